//! The libtorch engine against independent computations: log-probs from `forward` versus a
//! second forward written plainly here (no SDPA, no KV cache, no shared helpers), weight sync,
//! the fp32-logits knob under bf16, determinism, checkpoints, error statuses, weight digests,
//! and learning.
#![cfg(feature = "torch")]

use rlharness_arctic::engine::{Engine, ModelBatch};
use rlharness_arctic::torch_spec::{
    ModelKind, ModelSpec, TorchDType, TorchDevice, TorchSpec, WarmStartSpec,
};
use rlharness_arctic::wire::api::JobType;
use rlharness_torch::grpo::{f32_values, job_config, padded_batch, run_grpo, window_mean, GrpoRun};
use rlharness_torch::sample::SamplingParams;
use rlharness_torch::TorchEngine;
use serde_json::{json, Map, Value};
use std::path::Path;

use tch::{Kind, Tensor};

mod arctic_014;
mod digest;
mod generate;
mod layout;
mod training;

/// The default spec with `steps` warm-start steps and nothing cached.
fn warm_spec(steps: usize) -> TorchSpec {
    TorchSpec {
        warm_start: WarmStartSpec {
            steps,
            ..WarmStartSpec::default()
        },
        cache_dir: tempfile::tempdir().unwrap().path().display().to_string(),
        ..TorchSpec::default()
    }
}

/// Random-weight tiny engine (no warm start, nothing cached).
fn random_engine(dtype: TorchDType, seed: u64) -> TorchEngine {
    let spec = TorchSpec {
        dtype,
        ..warm_spec(0)
    };
    TorchEngine::new(&spec, seed).unwrap()
}

/// A random-weight engine (as [`random_engine`]) with job 1 created as `job`.
fn engine_with_job(dtype: TorchDType, seed: u64, job: JobType) -> TorchEngine {
    let engine = random_engine(dtype, seed);
    engine.create_job(1, &job_config(job)).unwrap();
    engine
}

/// Sampling over the whole vocabulary (`top_p` 1, `top_k` -1).
fn sampling(
    n: usize,
    temperature: f64,
    max_tokens: usize,
    seed: Option<u64>,
    ignore_eos: bool,
) -> SamplingParams {
    SamplingParams {
        n,
        temperature,
        top_p: 1.0,
        top_k: -1,
        max_tokens,
        seed,
        ignore_eos,
        logprobs: false,
    }
}

/// The largest element-wise difference of two equally long vectors.
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

fn meta(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

/// Prompts of different lengths and responses of different lengths, so both paddings occur.
fn sample_rows() -> (Vec<Vec<i64>>, Vec<Vec<i64>>) {
    let prompts = vec![
        vec![17, 20, 5, 12, 6, 15, 18, 16, 21, 19],
        vec![17, 5, 13, 4],
        vec![3, 4, 5, 6, 7, 8],
    ];
    let responses = vec![
        vec![15, 15, 15, 15, 16, 9, 1],
        vec![4, 5],
        vec![16, 6, 7, 8, 9, 10, 11, 12, 1],
    ];
    (prompts, responses)
}

fn forward_batch(tensors: Vec<(String, rlharness_arctic::wire::Tensor)>, m: Value) -> ModelBatch {
    ModelBatch {
        batch: tensors,
        meta: meta(m),
        post: vec!["compute_entropy_and_logprobs".into()],
        loss_fn: None,
    }
}

/// The log-probs `forward` answers on `job` for `tensors` with meta `m`.
fn forward_logprobs(
    engine: &TorchEngine,
    job: u64,
    tensors: &[(String, rlharness_arctic::wire::Tensor)],
    m: Value,
) -> Vec<f32> {
    f32_values(
        &engine
            .forward(job, &forward_batch(tensors.to_vec(), m))
            .unwrap()
            .value
            .logprobs,
    )
    .unwrap()
}

/// The model written out plainly from its weights: explicit attention scores with a
/// -inf mask, explicit RMSNorm and rotary embeddings, full log-softmax.
/// Returns log-probs `[B,S-1]` of token j+1 at position j, and the entropy there.
fn plain_forward(
    weights: &[(String, Tensor)],
    ids: &[Vec<i64>],
    mask: &[Vec<i64>],
    heads: i64,
    kv_heads: i64,
    theta: f64,
) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let w = |name: &str| {
        weights
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.to_kind(Kind::Double))
            .unwrap()
    };
    let layers = weights
        .iter()
        .filter(|(n, _)| n.ends_with("input_layernorm.weight"))
        .count();
    let rms = |x: &Tensor, g: &Tensor| {
        x / (x.square().mean_dim(-1, true, Kind::Double) + 1e-6).sqrt() * g
    };
    let embed = w("model.embed_tokens.weight");
    let mut lps = Vec::new();
    let mut ents = Vec::new();
    for (row, m) in ids.iter().zip(mask) {
        // Only the real tokens of the row take part; positions count real tokens.
        let real: Vec<usize> = (0..row.len()).filter(|&j| m[j] == 1).collect();
        let toks: Vec<i64> = real.iter().map(|&j| row[j]).collect();
        let n = toks.len() as i64;
        let mut x = embed.index_select(0, &Tensor::from_slice(&toks));
        let hd = embed.size()[1] / heads;
        let hd = if weights.iter().any(|(n, _)| n.ends_with("q_norm.weight")) {
            w("model.layers.0.self_attn.q_norm.weight").size()[0]
        } else {
            hd
        };
        // Rotary tables: angle(pos, i) = pos / theta^(2i/hd), pairs (i, i + hd/2).
        let mut cos = vec![0f64; (n * hd) as usize];
        let mut sin = vec![0f64; (n * hd) as usize];
        for pos in 0..n {
            for i in 0..hd / 2 {
                let a = pos as f64 / theta.powf(2.0 * i as f64 / hd as f64);
                for k in [i, i + hd / 2] {
                    cos[(pos * hd + k) as usize] = a.cos();
                    sin[(pos * hd + k) as usize] = a.sin();
                }
            }
        }
        let cos = Tensor::from_slice(&cos).view([n, 1, hd]);
        let sin = Tensor::from_slice(&sin).view([n, 1, hd]);
        let rope = |t: &Tensor| {
            let h = hd / 2;
            let rot = Tensor::cat(&[t.narrow(2, h, h).neg(), t.narrow(2, 0, h)], 2);
            t * &cos + rot * &sin
        };
        let causal = Tensor::ones([n, n], (Kind::Bool, tch::Device::Cpu)).tril(0);
        for l in 0..layers {
            let p = |s: &str| w(&format!("model.layers.{l}.{s}"));
            let h = rms(&x, &p("input_layernorm.weight"));
            let q = rms(
                &h.matmul(&p("self_attn.q_proj.weight").tr())
                    .view([n, heads, hd]),
                &p("self_attn.q_norm.weight"),
            );
            let k = rms(
                &h.matmul(&p("self_attn.k_proj.weight").tr())
                    .view([n, kv_heads, hd]),
                &p("self_attn.k_norm.weight"),
            );
            let v = h
                .matmul(&p("self_attn.v_proj.weight").tr())
                .view([n, kv_heads, hd]);
            let (q, k) = (rope(&q), rope(&k));
            let mut outs = Vec::new();
            for head in 0..heads {
                let kvh = head / (heads / kv_heads);
                let qh = q.select(1, head);
                let kh = k.select(1, kvh);
                let vh = v.select(1, kvh);
                let scores = qh.matmul(&kh.tr()) / (hd as f64).sqrt();
                let scores = scores.masked_fill(&causal.logical_not(), f64::NEG_INFINITY);
                outs.push(scores.softmax(-1, Kind::Double).matmul(&vh));
            }
            let a = Tensor::cat(&outs, 1);
            x = &x + a.matmul(&p("self_attn.o_proj.weight").tr());
            let h = rms(&x, &p("post_attention_layernorm.weight"));
            let g = h.matmul(&p("mlp.gate_proj.weight").tr());
            let act = &g * g.sigmoid();
            x = &x
                + (act * h.matmul(&p("mlp.up_proj.weight").tr()))
                    .matmul(&p("mlp.down_proj.weight").tr());
        }
        let x = rms(&x, &w("model.norm.weight"));
        let logp = x.matmul(&embed.tr()).log_softmax(-1, Kind::Double);
        let mut lp_row = vec![f64::NAN; row.len() - 1];
        let mut ent_row = vec![f64::NAN; row.len() - 1];
        for (k, &j) in real.iter().enumerate().take(real.len() - 1) {
            lp_row[j] = logp.double_value(&[k as i64, toks[k + 1]]);
            let lk = logp.select(0, k as i64);
            ent_row[j] = -(lk.exp() * &lk).sum(Kind::Double).double_value(&[]);
        }
        lps.push(lp_row);
        ents.push(ent_row);
    }
    (lps, ents)
}

fn rows_of(t: &rlharness_arctic::wire::Tensor) -> Vec<Vec<i64>> {
    let vals: Vec<i64> = t
        .data
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    vals.chunks(t.shape[1]).map(<[i64]>::to_vec).collect()
}

fn grpo_update(
    tensors: &[(String, rlharness_arctic::wire::Tensor)],
    b: usize,
    s: usize,
    p: usize,
    old: &[f32],
    adv: f32,
) -> ModelBatch {
    let mut batch = tensors.to_vec();
    let mut old_full = vec![0f32; b * s];
    let mut adv_full = vec![0f32; b * s];
    let rm = f32_values(&tensors[4].1).unwrap();
    for i in 0..b {
        for col in p..s {
            if rm[i * s + col] > 0.0 {
                old_full[i * s + col] = old[i * s + col - 1];
                adv_full[i * s + col] = adv;
            }
        }
    }
    batch.push((
        "old_log_probs".into(),
        rlharness_arctic::engine::f32_tensor(vec![b, s], &old_full),
    ));
    batch.push((
        "advantages".into(),
        rlharness_arctic::engine::f32_tensor(vec![b, s], &adv_full),
    ));
    ModelBatch {
        batch,
        meta: meta(
            json!({"pad_token_id": 0, "temperature": 1.0, "actor_config": {"loss_agg_mode": "token-mean"}}),
        ),
        post: vec![
            "apply_temperature".into(),
            "compute_entropy_and_logprobs".into(),
        ],
        loss_fn: Some("verl_grpo".into()),
    }
}
