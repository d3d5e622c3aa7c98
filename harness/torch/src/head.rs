//! The vocabulary head of the fused (CUDA) path, done by hand, a few rows at a time.
//!
//! Autograd through `log_softmax` over a 151,936-token vocabulary keeps the whole `[N,V]`
//! logits in fp32 for backward and makes about a dozen passes over them (widening, the
//! log-sum-exp's max/subtract/exp/sum, the entropy, and in backward the log-sum-exp's
//! gradient, the gather's scatter into zeros, their sum and the narrowing). Here each chunk
//! of rows makes one log-softmax, one exp, one batched dot product for the entropy and one
//! fused multiply-and-narrow for the gradient of the logits,
//!
//! `dL/dz = (g (onehot(y) - p) - e p (log p + H)) / T`,
//!
//! where `g = dL/dlogp(y)` and `e = dL/dH` come from the loss itself, run per chunk on leaf
//! tensors: every loss here is a sum of per-token terms (the aggregation's normalisers are
//! those of the whole call), so a chunk's gradient does not wait for the other chunks. The
//! chunk's `[N,V]` tensors are freed before the next chunk starts, so peak memory no longer
//! grows with the micro-batch's vocabulary-wide logits. The gradient of the hidden states
//! then flows back through the trunk in one backward, and the head's weight gradient (the
//! tied embedding) is added to the embedding's.
//!
//! Numerics match the autograd path of `batch.rs` to fp32 rounding (a test runs both); the
//! `logits.compute_in_fp32` knob keeps its meaning (the head's product in fp32, or in the
//! model dtype and then widened).

use tch::{Kind, Tensor};

use super::batch::Padded;
use super::model::Decoder;
use super::settings::{CallSettings, LogitsOpt};

/// Where the engine names it (`head::Entropy`); defined with the call settings.
pub use super::settings::Entropy;

/// Rows per chunk: about 12 bytes per vocabulary entry live at once (the product in the head
/// dtype, the log-softmax and its exp in fp32, the gradient in the head dtype), kept under
/// `peak_mem_gib` when `logits.optimization=compute` asks for it, else under 4 GiB.
pub fn chunk_rows(settings: &CallSettings, r: i64, vocab: i64) -> i64 {
    let budget_gib = if settings.logits_opt == LogitsOpt::None {
        4.0
    } else {
        settings.peak_mem_gib.max(0.001)
    };
    let budget = (budget_gib * (1u64 << 30) as f64) as i64;
    (budget / (12 * vocab * r.max(1))).max(1)
}

/// The head's weight in the dtype its product runs in.
struct Head {
    w: Tensor,
    kind: Kind,
    temperature: f64,
}

impl Head {
    fn new(model: &Decoder, settings: &CallSettings) -> Head {
        let kind = if settings.logits_fp32 {
            Kind::Float
        } else {
            model.kind
        };
        Head {
            w: model.head_weight().detach().to_kind(kind),
            kind,
            temperature: settings.temperature.unwrap_or(1.0),
        }
    }

    /// fp32 log-probabilities `[N,V]` of hidden states `[N,H]` (no gradient).
    fn log_softmax(&self, h: &Tensor) -> Tensor {
        let z = h.to_kind(self.kind).mm(&self.w.tr());
        if self.temperature != 1.0 {
            (z.to_kind(Kind::Float) / self.temperature).log_softmax(-1, Kind::Float)
        } else {
            z.log_softmax(-1, Kind::Float)
        }
    }
}

/// `-sum_j p_j log p_j` per row, as one batched dot product.
fn entropy_of(p: &Tensor, lsm: &Tensor) -> Tensor {
    p.unsqueeze(1).bmm(&lsm.unsqueeze(2)).view([-1]).neg()
}

/// Response log-probs `[b,R]` and entropy (no gradient), chunk by chunk.
pub fn response_logprobs(
    model: &Decoder,
    x: &Padded,
    settings: &CallSettings,
    entropy: bool,
) -> (Tensor, Option<Tensor>) {
    let _g = tch::no_grad_guard();
    let key_mask = x.has_padding().then_some(&x.mask);
    let hidden = model.hidden_states(&x.ids, &x.positions, key_mask);
    let h = hidden.narrow(1, x.p - 1, x.r).contiguous();
    let targets = x.ids.narrow(1, x.p, x.r);
    let head = Head::new(model, settings);
    let rows = chunk_rows(settings, x.r, model.config.vocab_size as i64);
    let (mut lps, mut ents) = (Vec::new(), Vec::new());
    let mut r0 = 0;
    while r0 < x.b {
        let c = rows.min(x.b - r0);
        let n = c * x.r;
        let lsm = head.log_softmax(&h.narrow(0, r0, c).reshape([n, -1]));
        let tgt = targets.narrow(0, r0, c).reshape([n, 1]);
        lps.push(lsm.gather(-1, &tgt, false).view([c, x.r]));
        if entropy {
            ents.push(entropy_of(&lsm.exp(), &lsm).view([c, x.r]));
        }
        r0 += c;
    }
    let lp = Tensor::cat(&lps, 0);
    let ent = entropy.then(|| Tensor::cat(&ents, 0));
    (lp, ent)
}

/// One micro-batch's forward and backward. `loss_of(first_row, rows, logp, entropy)` returns
/// the loss of those rows (`[rows,R]` inputs that are leaves of a small graph); the gradients
/// land in the model's parameters, accumulated like `loss.backward()` would.
pub fn forward_backward(
    model: &Decoder,
    x: &Padded,
    settings: &CallSettings,
    entropy: Entropy,
    rows_per_chunk: i64,
    mut loss_of: impl FnMut(i64, i64, &Tensor, Option<&Tensor>) -> Tensor,
) -> Result<(), NoHeadGradient> {
    let key_mask = x.has_padding().then_some(&x.mask);
    let hidden = model.hidden_states(&x.ids, &x.positions, key_mask);
    let h = hidden.narrow(1, x.p - 1, x.r);
    let hd = h.detach().contiguous();
    let targets = x.ids.narrow(1, x.p, x.r);
    let head = Head::new(model, settings);
    let grad_h = Tensor::zeros(hd.size(), (model.kind, model.device));
    let mut grad_w: Option<Tensor> = None;
    let mut r0 = 0;
    while r0 < x.b {
        let c = rows_per_chunk.max(1).min(x.b - r0);
        let n = c * x.r;
        let (lsm, mut p, hc, tgt, lp, ent) = {
            let _g = tch::no_grad_guard();
            let hc = hd.narrow(0, r0, c).reshape([n, -1]).to_kind(head.kind);
            let lsm = head.log_softmax(&hc);
            let tgt = targets.narrow(0, r0, c).reshape([n, 1]);
            let lp = lsm.gather(-1, &tgt, false).view([c, x.r]);
            let p = lsm.exp();
            let ent = (entropy != Entropy::Off).then(|| entropy_of(&p, &lsm).view([c, x.r]));
            (lsm, p, hc, tgt, lp, ent)
        };
        let lp = lp.set_requires_grad(true);
        let ent = ent.map(|e| e.set_requires_grad(entropy == Entropy::WithGrad));
        let loss = loss_of(r0, c, &lp, ent.as_ref());
        if loss.requires_grad() {
            loss.backward();
        }
        let _g = tch::no_grad_guard();
        let g = lp.grad();
        let g = if g.defined() { g } else { lp.zeros_like() };
        // The entropy's share, while p and log p are both at hand.
        let ent_term = match (&ent, entropy) {
            (Some(e), Entropy::WithGrad) if e.grad().defined() => {
                let ge = e.grad().view([n, 1]);
                let hh = e.detach().view([n, 1]);
                Some((&lsm + hh) * &p * ge.neg() / head.temperature)
            }
            _ => None,
        };
        drop(lsm);
        // g (onehot - p) = -g (p - onehot), over T; narrowed to the head dtype in the same pass.
        let _ = p.scatter_add_(
            -1,
            &tgt,
            &Tensor::full([n, 1], -1.0, (Kind::Float, p.device())),
        );
        let scale = g.view([n, 1]).neg() / head.temperature;
        let gz = match ent_term {
            Some(e) => (p * scale + e).to_kind(head.kind),
            None => {
                let out = Tensor::empty(p.size(), (head.kind, p.device()));
                p.mul_out(&out, &scale)
            }
        };
        let gh = gz.mm(&head.w);
        grad_h
            .narrow(0, r0, c)
            .view([n, -1])
            .copy_(&gh.to_kind(model.kind));
        match grad_w.as_mut() {
            None => grad_w = Some(gz.tr().mm(&hc)),
            Some(acc) => {
                let _ = acc.addmm_(&gz.tr(), &hc);
            }
        }
        r0 += c;
    }
    // Back through the trunk: d(sum(h * grad_h))/dh is grad_h itself.
    (&h * &grad_h).sum(Kind::Float).backward();
    let _g = tch::no_grad_guard();
    if let Some(gw) = grad_w {
        let mut wg = model.head_weight().grad();
        if !wg.defined() {
            return Err(NoHeadGradient);
        }
        let _ = wg.g_add_(&gw.to_kind(wg.kind()));
    }
    Ok(())
}

/// The head's weight came out of backward without a gradient (a broken autograd graph).
#[derive(Debug, thiserror::Error)]
#[error("the head's weight has no gradient after backward")]
pub struct NoHeadGradient;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DecoderConfig;
    use crate::settings::WorkerSettings;
    use tch::Device;

    fn settings(temperature: f64, fp32: bool) -> CallSettings {
        let mut s = CallSettings::resolve(
            &WorkerSettings::from_config(None).unwrap(),
            &serde_json::Map::new(),
            &[],
        )
        .unwrap();
        s.temperature = Some(temperature);
        s.logits_fp32 = fp32;
        s
    }

    /// Three rows of 9 tokens, the last two left-padded; responses are the last 4 columns.
    fn padded() -> Padded {
        let ids = Tensor::from_slice(&[
            3i64, 4, 5, 6, 7, 8, 9, 10, 11, //
            0, 0, 5, 6, 7, 12, 13, 14, 15, //
            0, 3, 3, 4, 4, 16, 17, 18, 2,
        ])
        .view([3, 9]);
        let mask = ids.ne(0).to_kind(Kind::Int64);
        let positions = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        Padded {
            ids,
            mask,
            positions,
            b: 3,
            s: 9,
            p: 5,
            r: 4,
            padded_rows: vec![false, true, true],
        }
    }

    fn grads(model: &Decoder) -> Vec<Tensor> {
        model.params.iter().map(|p| p.grad().copy()).collect()
    }

    fn zero(model: &Decoder) {
        for p in &model.params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// The hand-made head gives autograd's log-probs, entropy and gradients, with a
    /// temperature, a differentiated entropy, padded rows and chunks of one row.
    #[test]
    fn the_hand_made_head_matches_autograd() {
        tch::manual_seed(11);
        let mut model = Decoder::new_random(DecoderConfig::tiny(), Device::Cpu, Kind::Float);
        model.fused = true;
        model.set_requires_grad(true);
        let x = padded();
        let s = settings(0.7, true);
        let w_lp = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
        let w_ent = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));

        // Autograd through the whole head.
        let hidden = model.hidden_states(&x.ids, &x.positions, Some(&x.mask));
        let logits = model.logits(&hidden.narrow(1, x.p - 1, x.r), true) / 0.7;
        let lsm = logits.log_softmax(-1, Kind::Float);
        let targets = x.ids.narrow(1, x.p, x.r);
        let lp = lsm
            .gather(-1, &targets.unsqueeze(-1), false)
            .squeeze_dim(-1);
        let ent = -(lsm.exp() * &lsm).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float);
        ((&lp * &w_lp).sum(Kind::Float) + (&ent * &w_ent).sum(Kind::Float)).backward();
        let want = grads(&model);
        zero(&model);

        let mut seen = Vec::new();
        forward_backward(
            &model,
            &x,
            &s,
            Entropy::WithGrad,
            1,
            |r0, c, lp_c, ent_c| {
                seen.push((lp_c.detach().copy(), ent_c.unwrap().detach().copy()));
                (lp_c * w_lp.narrow(0, r0, c)).sum(Kind::Float)
                    + (ent_c.unwrap() * w_ent.narrow(0, r0, c)).sum(Kind::Float)
            },
        )
        .unwrap();
        let got = grads(&model);
        assert_eq!(seen.len(), 3, "one chunk per row");
        let lp_got = Tensor::cat(
            &seen.iter().map(|s| s.0.shallow_clone()).collect::<Vec<_>>(),
            0,
        );
        let ent_got = Tensor::cat(
            &seen.iter().map(|s| s.1.shallow_clone()).collect::<Vec<_>>(),
            0,
        );
        let close = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
        assert!(close(&lp_got, &lp.detach()) < 1e-5);
        assert!(close(&ent_got, &ent.detach()) < 1e-5);
        for ((g, w), name) in got.iter().zip(&want).zip(&model.names) {
            let d = close(g, w);
            let scale = w.abs().max().double_value(&[]).max(1e-3);
            assert!(d / scale < 1e-4, "{name}: max diff {d} (scale {scale})");
        }

        // The no-gradient forward agrees too.
        let (lp_f, ent_f) = response_logprobs(&model, &x, &s, true);
        assert!(close(&lp_f, &lp.detach()) < 1e-5);
        assert!(close(&ent_f.unwrap(), &ent.detach()) < 1e-5);
    }

    /// Without a differentiated entropy, the gradient is the log-probs' alone, and chunking
    /// does not change it.
    #[test]
    fn chunking_does_not_change_the_gradient() {
        tch::manual_seed(12);
        let mut model = Decoder::new_random(DecoderConfig::tiny(), Device::Cpu, Kind::Float);
        model.fused = true;
        model.set_requires_grad(true);
        let x = padded();
        let s = settings(1.0, false);
        let w_lp = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
        let run = |rows: i64| {
            zero(&model);
            forward_backward(&model, &x, &s, Entropy::Value, rows, |r0, c, lp, ent| {
                assert!(ent.is_some_and(|e| !e.requires_grad()));
                (lp * w_lp.narrow(0, r0, c)).sum(Kind::Float)
            })
            .unwrap();
            grads(&model)
        };
        let whole = run(3);
        let single = run(1);
        for (a, b) in whole.iter().zip(&single) {
            assert!((a - b).abs().max().double_value(&[]) < 1e-6);
        }
        assert!(whole[0].abs().sum(Kind::Float).double_value(&[]) > 0.0);
    }
}
