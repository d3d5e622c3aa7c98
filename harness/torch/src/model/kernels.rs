//! The decoder's tensor kernels: attention masks, RMSNorm and rotary embeddings.

use tch::{Kind, Tensor};

use super::DecoderConfig;

/// SDPA with a boolean mask (GQA inside the kernel when the block asks for it).
pub(super) fn masked_attention(
    mask: &Tensor,
) -> impl Fn(&Tensor, &Tensor, &Tensor, bool) -> Tensor + '_ {
    move |q, k, v, gqa| {
        Tensor::scaled_dot_product_attention(q, k, v, Some(mask), 0.0, false, None, gqa)
    }
}

/// Per row, the padding before the first real token `[B]`, when every row's real tokens are
/// one run (zeros, ones, zeros); `None` otherwise. One host sync.
pub(super) fn leading_padding(key_mask: &Tensor) -> Option<Tensor> {
    let m = key_mask.to_kind(Kind::Int64);
    let s = m.size()[1];
    // A row is one run when it rises from 0 to 1 at most once, counting a 1 in column 0.
    let first = m.narrow(1, 0, 1);
    let rises = m
        .narrow(1, 1, s - 1)
        .gt_tensor(&m.narrow(1, 0, s - 1))
        .sum_dim_intlist(1, false, Kind::Int64)
        + first.squeeze_dim(1);
    if rises.gt(1).any().int64_value(&[]) != 0 {
        return None;
    }
    Some(
        m.cumsum(1, Kind::Int64)
            .eq(0)
            .sum_dim_intlist(1, false, Kind::Int64),
    )
}

/// `[B,1,S,S]` boolean mask: causal, real keys only, and always the diagonal (so rows of
/// padding queries are never empty and stay finite).
pub(super) fn full_attention_mask(key_mask: &Tensor, s: i64) -> Tensor {
    let device = key_mask.device();
    let b = key_mask.size()[0];
    let causal = Tensor::ones([s, s], (Kind::Bool, device))
        .tril(0)
        .view([1, 1, s, s]);
    let diag = Tensor::eye(s, (Kind::Bool, device)).view([1, 1, s, s]);
    let keys = key_mask.to_kind(Kind::Bool).view([b, 1, 1, s]);
    causal.logical_and(&keys).logical_or(&diag)
}

/// HF's Qwen3RMSNorm: normalise in fp32, scale in the input dtype.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
    let kind = x.kind();
    let xf = x.to_kind(Kind::Float);
    let var = xf.square().mean_dim(-1, true, Kind::Float);
    let normed = (xf * (var + eps).rsqrt()).to_kind(kind);
    normed * weight
}

/// cos/sin tables `[B,1,S,hd]` for `positions [B,S]` (HF's `rotate_half` layout), computed in
/// fp32 and cast to the model dtype. With `signed`, the first half of `sin` is negated: the
/// table [`apply_rope_rolled`] takes.
pub(super) fn rope_tables(
    positions: &Tensor,
    c: &DecoderConfig,
    kind: Kind,
    signed: bool,
) -> (Tensor, Tensor) {
    let device = positions.device();
    let half = (c.head_dim / 2) as i64;
    let exponents = Tensor::arange(half, (Kind::Float, device)) * (2.0 / c.head_dim as f64);
    // The base is filled on the device: copying a host scalar would make every decode step
    // wait for the GPU.
    let inv_freq = Tensor::full(
        [0i64; 0].as_slice(),
        c.rope_theta as f32 as f64,
        (Kind::Float, device),
    )
    .pow(&exponents)
    .reciprocal();
    let freqs = positions.to_kind(Kind::Float).unsqueeze(-1) * inv_freq.view([1, 1, half]);
    let emb = Tensor::cat(&[&freqs, &freqs], -1).unsqueeze(1);
    let sin = if signed {
        let sf = freqs.sin().unsqueeze(1);
        Tensor::cat(&[&sf.neg(), &sf], -1)
    } else {
        emb.sin()
    };
    (emb.cos().to_kind(kind), sin.to_kind(kind))
}

pub(super) fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let x1 = x.narrow(3, 0, half);
    let x2 = x.narrow(3, half, half);
    let rotated = Tensor::cat(&[&x2.neg(), &x1], 3);
    x * cos + rotated * sin
}

/// [`apply_rope`] in three kernels: `rotate_half(x) * sin` is `roll(x, hd/2) * signed_sin`
/// (the first half of the table negated), and the sum rides in `addcmul`.
pub(super) fn apply_rope_rolled(x: &Tensor, cos: &Tensor, signed_sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    (x * cos).addcmul(&x.roll([half], [3]), signed_sin)
}
