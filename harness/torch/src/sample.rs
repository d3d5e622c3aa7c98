//! Batched sampling with a KV cache: every prompt times `n` in one batch, prompts
//! left-padded, one prefill, then one token per step for all sequences until each has sampled
//! end-of-sequence or `max_tokens`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};
use tch::{Kind, Tensor};

use super::cuda_graph::{self, Graph, SideStream};
use super::model::{DecodeInputs, Decoder, KvCache};
use rlharness_arctic::engine::EngineError;

/// `sampling_params` as vLLM reads them (the subset that changes what is sampled).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub n: usize,
    pub temperature: f64,
    pub top_p: f64,
    /// `top_k <= 0` keeps the whole vocabulary (vLLM uses -1).
    pub top_k: i64,
    pub max_tokens: usize,
    pub seed: Option<u64>,
    /// vLLM's `ignore_eos`: keep sampling past end-of-sequence (benchmarks).
    pub ignore_eos: bool,
    /// vLLM's `logprobs` (0 or more: return the sampled token's log-probability, the Arctic
    /// adapter's `calculate_log_probs`): the log-softmax of the model's raw logits, before
    /// temperature, top-k and top-p (vLLM's default `raw_logprobs`).
    pub logprobs: bool,
}

impl SamplingParams {
    pub fn from_map(m: &Map<String, Value>) -> Result<Self, EngineError> {
        let num = |key: &str, default: f64| -> Result<f64, EngineError> {
            match m.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v.as_f64().ok_or_else(|| {
                    EngineError::bad_request(format!(
                        "sampling_params.{key} must be a number, got {v}"
                    ))
                }),
            }
        };
        let n = num("n", 1.0)?;
        let max_tokens = num("max_tokens", 16.0)?;
        let temperature = num("temperature", 1.0)?;
        let top_p = num("top_p", 1.0)?;
        if n < 1.0 || n.fract() != 0.0 {
            return Err(EngineError::bad_request(format!(
                "sampling_params.n must be a positive integer, got {n}"
            )));
        }
        if max_tokens < 1.0 || max_tokens.fract() != 0.0 {
            return Err(EngineError::bad_request(format!(
                "sampling_params.max_tokens must be a positive integer, got {max_tokens}"
            )));
        }
        if temperature < 0.0 {
            return Err(EngineError::bad_request(format!(
                "sampling_params.temperature must be >= 0, got {temperature}"
            )));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(EngineError::bad_request(format!(
                "sampling_params.top_p must be in (0, 1], got {top_p}"
            )));
        }
        let seed = match m.get("seed") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                EngineError::bad_request(format!(
                    "sampling_params.seed must be a non-negative integer, got {v}"
                ))
            })?),
        };
        let logprobs = match m.get("logprobs") {
            None | Some(Value::Null) => false,
            Some(v) if v.as_u64().is_some() => true,
            Some(v) => {
                return Err(EngineError::bad_request(format!(
                    "sampling_params.logprobs must be null or a non-negative integer, got {v}"
                )))
            }
        };
        Ok(SamplingParams {
            logprobs,
            n: n as usize,
            temperature,
            top_p,
            top_k: num("top_k", -1.0)? as i64,
            max_tokens: max_tokens as usize,
            seed,
            ignore_eos: match m.get("ignore_eos") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(EngineError::bad_request(format!(
                        "sampling_params.ignore_eos must be a boolean, got {v}"
                    )))
                }
            },
        })
    }
}

/// One sampled sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// Generated ids, the end-of-sequence id included when it was sampled.
    pub tokens: Vec<i64>,
    pub stopped: bool,
    /// Each token's log-probability under the sampler (with `SamplingParams::logprobs`).
    pub logprobs: Option<Vec<f32>>,
}

/// Where the random draws of a sampling call come from.
pub enum Draws {
    /// torch's global generator, on the model's device: the caller holds the generator lock
    /// and has seeded it. Keeps a CUDA batch on the device (no host round trip per token).
    Torch,
    /// A stream of the call's own, drawn on the host from the token probabilities. Calls
    /// sharing no generator can run side by side and still give the same tokens for the same
    /// seed, whatever their order (the CPU engine serves them on every core this way).
    Host(Box<ChaCha8Rng>),
    /// One host stream per row: rows of several calls batched together each draw exactly what
    /// their call would have drawn alone (the CPU engine batches identical one-row calls).
    Rows(Vec<ChaCha8Rng>),
}

impl Draws {
    pub fn host(seed: u64) -> Draws {
        Draws::Host(Box::new(ChaCha8Rng::seed_from_u64(seed)))
    }

    /// One stream per row, row `i` seeded with `seeds[i]`.
    pub fn rows(seeds: &[u64]) -> Draws {
        Draws::Rows(
            seeds
                .iter()
                .map(|&s| ChaCha8Rng::seed_from_u64(s))
                .collect(),
        )
    }
}

/// Sample `n` continuations of every prompt (ids, no padding), in prompt-major order.
pub fn sample(
    model: &Decoder,
    prompts: &[Vec<i64>],
    params: &SamplingParams,
    eos: i64,
    pad: i64,
    draws: &mut Draws,
) -> Vec<Sampled> {
    let _g = tch::no_grad_guard();
    let device = model.device;
    let rows: Vec<&Vec<i64>> = prompts
        .iter()
        .flat_map(|p| std::iter::repeat_n(p, params.n))
        .collect();
    let b = rows.len() as i64;
    let p = rows.iter().map(|r| r.len()).max().unwrap_or(1).max(1) as i64;
    let cap = p + params.max_tokens as i64;
    let mut ids = vec![pad; (b * p) as usize];
    let mut mask = vec![0i64; (b * cap) as usize];
    for (i, r) in rows.iter().enumerate() {
        let off = p as usize - r.len();
        ids[i * p as usize + off..(i + 1) * p as usize].copy_from_slice(r);
        for j in off..cap as usize {
            mask[i * cap as usize + j] = 1;
        }
    }
    let ids = Tensor::from_slice(&ids).view([b, p]).to_device(device);
    let key_mask = Tensor::from_slice(&mask).view([b, cap]).to_device(device);
    let prompt_mask = key_mask.narrow(1, 0, p);
    let positions = (prompt_mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
    let mut next_pos = prompt_mask
        .sum_dim_intlist([1i64].as_slice(), false, Kind::Int64)
        .view([b, 1]);
    // On the fused path: each layer's concatenated weights once for the call, not per step.
    let model = &model.for_decoding();
    let mut cache = model.new_cache(b, cap);
    let hidden = model.extend(&mut cache, &ids, &positions, &key_mask);
    // The head in the model dtype, then widened: what vLLM's sampler does.
    let mut logits = model.logits(&hidden, false);
    let mut graph = (model.graphs && model.fused && device.is_cuda() && params.max_tokens > 1)
        .then(|| GraphDecode::new(&key_mask, &next_pos, p))
        .flatten();
    let mut out: Vec<Tensor> = Vec::with_capacity(params.max_tokens);
    let mut lps: Vec<Tensor> = Vec::new();
    let mut done = Tensor::zeros([b], (Kind::Bool, device));
    for step in 0..params.max_tokens {
        let tok = pick(&logits, params, draws);
        if params.logprobs {
            lps.push(
                logits
                    .log_softmax(-1, Kind::Float)
                    .gather(1, &tok.view([b, 1]), false)
                    .view([b]),
            );
        }
        // Finished rows keep sampling padding; it is cut off below.
        let tok = tok.masked_fill(&done, pad);
        done = done.logical_or(&tok.eq(eos));
        out.push(tok.shallow_clone());
        // On CUDA, asking whether every row is done waits for the device; asking every 8th
        // step lets the host queue ahead (extra steps only sample padding, which is cut off).
        // CPU ops are synchronous anyway, so there every step may end the loop.
        let check = eos >= 0 && (device == tch::Device::Cpu || step % 8 == 7);
        if step + 1 == params.max_tokens || (check && done.all().int64_value(&[]) != 0) {
            break;
        }
        logits = match &mut graph {
            Some(g) => g.step(model, &mut cache, &tok),
            None => {
                let hidden = model.extend(&mut cache, &tok.view([b, 1]), &next_pos, &key_mask);
                next_pos = next_pos.g_add_scalar(1);
                model.logits(&hidden, false)
            }
        };
    }
    // Copied to the host (a sync) before the side stream is left: the tensors it allocated
    // are then idle when they are freed.
    let all = Tensor::stack(&out, 1).to_device(tch::Device::Cpu);
    drop(graph);
    let steps = out.len();
    let flat = Vec::<i64>::try_from(&all.reshape([-1])).unwrap_or_default();
    let lp_flat = (!lps.is_empty()).then(|| {
        let t = Tensor::stack(&lps, 1).to_device(tch::Device::Cpu);
        Vec::<f32>::try_from(&t.reshape([-1])).unwrap_or_default()
    });
    (0..b as usize)
        .map(|i| {
            let row = &flat[i * steps..(i + 1) * steps];
            let (len, stopped) = match row.iter().position(|&t| t == eos) {
                Some(k) => (k + 1, true),
                None => (row.len(), false),
            };
            Sampled {
                tokens: row[..len].to_vec(),
                stopped,
                logprobs: lp_flat
                    .as_ref()
                    .and_then(|f| f.get(i * steps..i * steps + len))
                    .map(<[f32]>::to_vec),
            }
        })
        .collect()
}

/// Decode steps through CUDA graphs (`cuda_graph.rs`), one per attended length (the cache's
/// buckets, [`KvCache::attended`]): the step's inputs live in buffers written in place; at each
/// new length the first step runs eagerly on the side stream (the warm-up: cuBLAS, the
/// attention kernel's plan for the shape and the allocator set up outside the capture), the
/// second is captured, and every further step of that length is one replay. Lives on a side
/// stream from libtorch's pool for the rest of the call.
struct GraphDecode {
    inp: DecodeInputs,
    /// Positions filled before the step to come (the prompt, then one per step).
    filled: i64,
    /// The attended length of the steps since the last change, and how many ran at it.
    kv_len: i64,
    at_len: usize,
    /// The captured step for `kv_len` and the logits tensor each replay rewrites; `None`
    /// before its capture.
    captured: Option<(Graph, Tensor)>,
    /// A capture or replay failed: the rest of the call runs eagerly.
    failed: bool,
    /// Dropped last: leaves the side stream.
    _side: SideStream,
}

impl GraphDecode {
    /// `None` (with a warning) when graphs are unavailable: the caller decodes eagerly.
    fn new(key_mask: &Tensor, next_pos: &Tensor, prompt_len: i64) -> Option<GraphDecode> {
        let side = match cuda_graph::available().and_then(|()| SideStream::enter()) {
            Ok(side) => side,
            Err(e) => {
                warn_once(&e);
                return None;
            }
        };
        Some(GraphDecode {
            inp: DecodeInputs::new(key_mask, next_pos, prompt_len),
            filled: prompt_len,
            kv_len: 0,
            at_len: 0,
            captured: None,
            failed: false,
            _side: side,
        })
    }

    /// The logits after feeding `tok [B]`.
    fn step(&mut self, model: &Decoder, cache: &mut KvCache, tok: &Tensor) -> Tensor {
        let b = self.inp.ids.size()[0];
        self.inp.ids.copy_(&tok.view([b, 1]));
        let kv_len = cache.attended(self.filled + 1);
        if kv_len != self.kv_len {
            // The previous length's graph is never replayed again; its logits are read on
            // this stream before anything reuses their memory.
            self.captured = None;
            (self.kv_len, self.at_len) = (kv_len, 0);
        }
        let run = |cache: &mut KvCache, inp: &DecodeInputs| {
            let hidden = model.decode_step(cache, inp, kv_len);
            model.logits(&hidden, false)
        };
        if self.at_len == 1 && !self.failed {
            match Graph::capture(|| run(cache, &self.inp)) {
                Ok(c) => self.captured = Some(c),
                Err(e) => self.fail(&e),
            }
        }
        let replayed = match &self.captured {
            Some((graph, logits)) => match graph.replay() {
                Ok(()) => Some(logits.shallow_clone()),
                Err(e) => {
                    self.fail(&e);
                    None
                }
            },
            None => None,
        };
        let logits = replayed.unwrap_or_else(|| run(cache, &self.inp));
        self.at_len += 1;
        self.filled += 1;
        self.inp.advance();
        logits
    }

    fn fail(&mut self, why: &cuda_graph::GraphError) {
        warn_once(why);
        self.failed = true;
        self.captured = None;
    }
}

/// Graphs unavailable or failed: said once per process, then the eager path serves.
fn warn_once(why: &cuda_graph::GraphError) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| tracing::warn!("decoding without CUDA graphs: {why}"));
}

/// One token per row from `[B,V]` logits: greedy at temperature 0, else temperature, top-k,
/// top-p (the smallest set whose mass reaches `top_p`, always at least one token), then a draw.
fn pick(logits: &Tensor, params: &SamplingParams, draws: &mut Draws) -> Tensor {
    if params.temperature == 0.0 {
        return logits.argmax(-1, false);
    }
    let mut logits = logits / params.temperature;
    let vocab = logits.size()[1];
    if params.top_k > 0 && params.top_k < vocab {
        let (top, _) = logits.topk(params.top_k, -1, true, true);
        let kth = top.narrow(1, params.top_k - 1, 1);
        logits = logits.masked_fill(&logits.lt_tensor(&kth), f64::NEG_INFINITY);
    }
    if params.top_p < 1.0 {
        let (sorted, idx) = logits.sort(-1, true);
        let probs = sorted.softmax(-1, Kind::Float);
        let before = probs.cumsum(-1, Kind::Float) - &probs;
        let drop_sorted = before.gt(params.top_p);
        let drop = drop_sorted.scatter(-1, &idx, &drop_sorted);
        logits = logits.masked_fill(&drop, f64::NEG_INFINITY);
    }
    let probs = logits.softmax(-1, Kind::Float);
    match draws {
        Draws::Torch => probs.multinomial(1, false).squeeze_dim(-1),
        Draws::Host(rng) => {
            host_draw(&probs, std::slice::from_mut(&mut **rng)).to_device(probs.device())
        }
        Draws::Rows(rngs) => host_draw(&probs, rngs).to_device(probs.device()),
    }
}

/// One inverse-CDF draw per row of `[B,V]` probabilities. Tokens of probability 0 (cut by
/// top-k or top-p) are never drawn; rounding that leaves the total under `u` falls back to
/// the last token of positive probability.
/// `rngs`: one stream shared by every row (drawn in row order), or one per row.
fn host_draw(probs: &Tensor, rngs: &mut [ChaCha8Rng]) -> Tensor {
    let (b, v) = (probs.size()[0], probs.size()[1] as usize);
    let flat =
        Vec::<f32>::try_from(&probs.to_device(tch::Device::Cpu).reshape([-1])).unwrap_or_default();
    let picks: Vec<i64> = flat
        .chunks(v.max(1))
        .take(b as usize)
        .enumerate()
        .map(|(i, row)| {
            let total: f64 = row.iter().map(|&p| p as f64).sum();
            let k = if rngs.len() == 1 { 0 } else { i };
            let u = rngs[k].random::<f64>() * total;
            let mut acc = 0.0;
            let mut last = 0;
            for (j, &p) in row.iter().enumerate() {
                if p > 0.0 {
                    acc += p as f64;
                    last = j;
                    if u < acc {
                        return j as i64;
                    }
                }
            }
            last as i64
        })
        .collect();
    Tensor::from_slice(&picks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DecoderConfig;
    use serde_json::json;

    #[test]
    fn params_defaults_and_errors() {
        let p = SamplingParams::from_map(&Map::new()).unwrap();
        assert_eq!(
            (p.n, p.max_tokens, p.temperature, p.top_p, p.top_k),
            (1, 16, 1.0, 1.0, -1)
        );
        for (v, key) in [
            (json!({"n": 0}), "n"),
            (json!({"top_p": 1.5}), "top_p"),
            (json!({"max_tokens": "8"}), "max_tokens"),
            (json!({"seed": -1}), "seed"),
        ] {
            let err = SamplingParams::from_map(v.as_object().unwrap()).unwrap_err();
            assert!(err.detail.contains(key), "{}", err.detail);
        }
    }

    #[test]
    fn top_p_keeps_the_head_of_the_distribution() {
        tch::manual_seed(0);
        // Probabilities 0.7, 0.2, 0.1: top_p 0.6 keeps only the first.
        let logits = Tensor::from_slice(&[0.7f32.ln(), 0.2f32.ln(), 0.1f32.ln()])
            .view([1, 3])
            .repeat([64, 1]);
        let params = SamplingParams {
            n: 1,
            temperature: 1.0,
            top_p: 0.6,
            top_k: -1,
            max_tokens: 1,
            seed: None,
            ignore_eos: false,
            logprobs: false,
        };
        let t = pick(&logits, &params, &mut Draws::Torch);
        assert_eq!(t.max().int64_value(&[]), 0);
        let t = pick(&logits, &params, &mut Draws::host(0));
        assert_eq!(t.max().int64_value(&[]), 0);
        let params = SamplingParams {
            top_p: 0.8,
            ..params
        };
        for mut draws in [Draws::Torch, Draws::host(1)] {
            let t = pick(&logits, &params, &mut draws);
            assert!(t.max().int64_value(&[]) <= 1);
            assert!(t.eq(1).sum(Kind::Int64).int64_value(&[]) > 0);
        }
    }

    #[test]
    fn host_draws_follow_the_probabilities_and_repeat_per_seed() {
        // Probabilities 0.6, 0.3, 0.1, 0: 20,000 draws land within 1.5 points of each, never
        // on the impossible token, and the same seed draws the same tokens.
        let probs = Tensor::from_slice(&[0.6f32, 0.3, 0.1, 0.0])
            .view([1, 4])
            .repeat([20_000, 1]);
        let a = host_draw(&probs, &mut [ChaCha8Rng::seed_from_u64(7)]);
        let b = host_draw(&probs, &mut [ChaCha8Rng::seed_from_u64(7)]);
        let c = host_draw(&probs, &mut [ChaCha8Rng::seed_from_u64(8)]);
        assert!(a.equal(&b));
        assert!(!a.equal(&c));
        for (tok, want) in [(0, 0.6), (1, 0.3), (2, 0.1), (3, 0.0)] {
            let share = a
                .eq(tok)
                .to_kind(Kind::Float)
                .mean(Kind::Float)
                .double_value(&[]);
            assert!(
                (share - want).abs() < 0.015,
                "token {tok}: {share} vs {want}"
            );
        }
    }

    #[test]
    fn greedy_sampling_is_the_argmax_of_the_full_forward() {
        tch::manual_seed(5);
        let m = Decoder::new_random(DecoderConfig::tiny(), tch::Device::Cpu, Kind::Float);
        let params = SamplingParams {
            n: 2,
            temperature: 0.0,
            top_p: 1.0,
            top_k: -1,
            max_tokens: 3,
            seed: None,
            ignore_eos: false,
            logprobs: false,
        };
        let prompts = vec![vec![3i64, 4, 5], vec![6i64]];
        let got = sample(&m, &prompts, &params, -1, 0, &mut Draws::Torch);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], got[1]);
        // Re-derive the first prompt's continuation without a cache.
        let _g = tch::no_grad_guard();
        let mut seq = prompts[0].clone();
        for _ in 0..3 {
            let ids = Tensor::from_slice(&seq).view([1, -1]);
            let pos =
                Tensor::arange(seq.len() as i64, (Kind::Int64, tch::Device::Cpu)).view([1, -1]);
            let h = m.hidden_states(&ids, &pos, None);
            let l = m.logits(&h.select(1, -1), true);
            seq.push(l.argmax(-1, false).int64_value(&[0]));
        }
        assert_eq!(got[0].tokens, seq[3..].to_vec());
        assert!(!got[0].stopped);
    }
}
