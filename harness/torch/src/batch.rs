//! verl's padded layout, read from a `ModelBatch`: prompts LEFT-padded to P, responses
//! RIGHT-padded to R, S = P + R; response-side tensors LEFT-zero-padded to `[B,S]` (so response
//! token t sits at column P+t). Also the per-token log-probs / entropy of the response tokens,
//! and their placement in the returned `[B,S]` tensors.

use tch::{Device, Kind, Tensor};

use super::convert::to_tch_2d;
use super::model::Decoder;
use super::settings::Entropy;
use super::settings::{CallSettings, LogitsOpt};
use rlharness_arctic::engine::{EngineError, ModelBatch};

/// The model inputs of one call.
pub struct Padded {
    pub ids: Tensor,
    pub mask: Tensor,
    pub positions: Tensor,
    pub b: i64,
    pub s: i64,
    /// Where responses start (the prompt width P, or `S - response_len` under ZoRRo).
    pub p: i64,
    pub r: i64,
    /// Per row, whether any of its positions is padding (selects the masked attention
    /// path). Read on the host when the batch arrives, so taking a micro-batch's rows does
    /// not wait for the device.
    pub padded_rows: Vec<bool>,
}

impl Padded {
    pub fn from_batch(
        batch: &ModelBatch,
        settings: &CallSettings,
        vocab: usize,
        device: Device,
    ) -> Result<Padded, EngineError> {
        let ids_w = batch
            .tensor("input_ids")
            .ok_or_else(|| EngineError::unprocessable("batch has no input_ids"))?;
        let (ids, b, s) = to_tch_2d("input_ids", ids_w, Kind::Int64)?;
        let mask = match batch.tensor("attention_mask") {
            Some(t) => {
                let (m, mb, ms) = to_tch_2d("attention_mask", t, Kind::Int64)?;
                if (mb, ms) != (b, s) {
                    return Err(EngineError::unprocessable(format!(
                        "attention_mask is [{mb},{ms}] but input_ids is [{b},{s}]"
                    )));
                }
                m.ne(0).to_kind(Kind::Int64)
            }
            None => return Err(EngineError::unprocessable("batch has no attention_mask")),
        };
        if b == 0 || s < 2 {
            return Err(EngineError::unprocessable(format!(
                "input_ids [{b},{s}] is too small: need at least one row of two tokens"
            )));
        }
        let (min, max) = (ids.min().int64_value(&[]), ids.max().int64_value(&[]));
        if min < 0 || max >= vocab as i64 {
            return Err(EngineError::unprocessable(format!(
                "input_ids holds ids in [{min},{max}], outside the model's vocabulary of {vocab}"
            )));
        }
        let prompt_width = match batch.tensor("prompts") {
            Some(t) if t.shape.len() == 2 => t.shape[1] as i64,
            Some(t) => {
                return Err(EngineError::unprocessable(format!(
                    "prompts must be 2-D [B,P], got shape {:?}",
                    t.shape
                )))
            }
            None => {
                return Err(EngineError::unprocessable(
                    "batch has no prompts tensor (the server takes P from its width)",
                ))
            }
        };
        let p = match (settings.zorro, settings.response_len) {
            (true, Some(r)) => s - r,
            _ => prompt_width,
        };
        if p < 1 || p >= s {
            return Err(EngineError::unprocessable(format!(
                "prompt width {p} does not fit sequences of {s} tokens (need 1 <= P < S)"
            )));
        }
        let positions = match batch.tensor("position_ids") {
            Some(t) => {
                let (pos, pb, ps) = to_tch_2d("position_ids", t, Kind::Int64)?;
                if (pb, ps) != (b, s) {
                    return Err(EngineError::unprocessable(format!(
                        "position_ids is [{pb},{ps}] but input_ids is [{b},{s}]"
                    )));
                }
                pos
            }
            None => (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0),
        };
        let padded_rows = Vec::<i64>::try_from(mask.amin(1, false))
            .map_err(|e| EngineError::internal(format!("attention_mask: {e}")))?
            .into_iter()
            .map(|m| m == 0)
            .collect();
        Ok(Padded {
            ids: ids.to_device(device),
            mask: mask.to_device(device),
            positions: positions.to_device(device),
            b,
            s,
            p,
            r: s - p,
            padded_rows,
        })
    }

    /// Whether any position of the batch is padding.
    pub fn has_padding(&self) -> bool {
        self.padded_rows.iter().any(|&p| p)
    }

    /// Rows `[start, start+len)` of this batch.
    pub fn rows(&self, start: i64, len: i64) -> Padded {
        let (a, z) = (start as usize, (start + len) as usize);
        Padded {
            ids: self.ids.narrow(0, start, len),
            padded_rows: self.padded_rows[a..z].to_vec(),
            mask: self.mask.narrow(0, start, len),
            positions: self.positions.narrow(0, start, len),
            b: len,
            s: self.s,
            p: self.p,
            r: self.r,
        }
    }

    /// A response-side tensor as `[B,R]` f32 on `device`: `[B,S]` (left-zero-padded, the
    /// last R columns) or already `[B,R]`.
    pub fn response_side(
        &self,
        batch: &ModelBatch,
        name: &str,
        device: Device,
    ) -> Result<Option<Tensor>, EngineError> {
        let Some(t) = batch.tensor(name) else {
            return Ok(None);
        };
        let (x, tb, tw) = to_tch_2d(name, t, Kind::Float)?;
        if tb != self.b {
            return Err(EngineError::unprocessable(format!(
                "{name} has {tb} rows but input_ids has {}",
                self.b
            )));
        }
        let x = if tw == self.s {
            x.narrow(1, self.p, self.r)
        } else if tw == self.r {
            x
        } else {
            return Err(EngineError::unprocessable(format!(
                "{name} is {tw} wide; expected S={} (left-zero-padded) or R={}",
                self.s, self.r
            )));
        };
        Ok(Some(x.to_device(device)))
    }
}

/// Log-probs `[b,R]` of the response tokens, and their entropy when asked (differentiated
/// under `Entropy::WithGrad`). Keeps the autograd graph when called with gradients enabled.
pub fn response_logprobs(
    model: &Decoder,
    x: &Padded,
    settings: &CallSettings,
    entropy: Entropy,
) -> (Tensor, Option<Tensor>) {
    let key_mask = x.has_padding().then_some(&x.mask);
    let hidden = model.hidden_states(&x.ids, &x.positions, key_mask);
    // Position P-1+t predicts response token t (at P+t).
    let h = hidden.narrow(1, x.p - 1, x.r);
    let targets = x.ids.narrow(1, x.p, x.r);
    let chunk = chunk_rows(settings, x.b, x.r, model.config.vocab_size as i64);
    if chunk >= x.r {
        return logprobs_of(model, &h, &targets, settings, entropy);
    }
    // `logits.optimization=compute`: the logits chunk by chunk, the same numbers.
    let mut lps = Vec::new();
    let mut ents = Vec::new();
    let mut t0 = 0;
    while t0 < x.r {
        let len = chunk.min(x.r - t0);
        let (lp, e) = logprobs_of(
            model,
            &h.narrow(1, t0, len),
            &targets.narrow(1, t0, len),
            settings,
            entropy,
        );
        lps.push(lp);
        if let Some(e) = e {
            ents.push(e);
        }
        t0 += len;
    }
    let lp = Tensor::cat(&lps, 1);
    let ent = (!ents.is_empty()).then(|| Tensor::cat(&ents, 1));
    (lp, ent)
}

/// Response positions per chunk under `logits.optimization=compute` (else all of them).
fn chunk_rows(settings: &CallSettings, b: i64, r: i64, vocab: i64) -> i64 {
    if settings.logits_opt == LogitsOpt::None {
        return r;
    }
    let budget = (settings.peak_mem_gib.max(0.001) * (1u64 << 30) as f64) as i64;
    // fp32 logits plus the log-softmax workspace: about 8 bytes per element.
    (budget / (8 * vocab * b.max(1))).clamp(1, r)
}

fn logprobs_of(
    model: &Decoder,
    h: &Tensor,
    targets: &Tensor,
    settings: &CallSettings,
    entropy: Entropy,
) -> (Tensor, Option<Tensor>) {
    let mut logits = model.logits(h, settings.logits_fp32);
    // Dividing by 1 is exact, and a pass over a vocabulary-wide tensor is not free.
    if let Some(t) = settings.temperature.filter(|&t| t != 1.0) {
        logits /= t;
    }
    // gather - logsumexp keeps only the logits for backward (log_softmax would keep a second
    // vocabulary-sized tensor).
    let lp = logits
        .gather(-1, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1)
        - logits.logsumexp([-1i64].as_slice(), false);
    let entropy_of = |l: &Tensor| {
        let logp = l.log_softmax(-1, Kind::Float);
        -(logp.exp() * &logp).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float)
    };
    let ent = match entropy {
        Entropy::Off => None,
        Entropy::Value => {
            let _g = tch::no_grad_guard();
            Some(entropy_of(&logits.detach()))
        }
        // `entropy_coeff != 0`: the entropy bonus is part of the loss, so it is differentiated.
        Entropy::WithGrad => Some(entropy_of(&logits)),
    };
    (lp, ent)
}

/// Place `[B,R]` response values into the `[B,S]` tensor the server returns. Without ZoRRo
/// column P-1+t holds token t and every other cell (prompt region, padded response tokens,
/// the last column) holds `fill`; with ZoRRo column P+t, zeros elsewhere.
pub fn place(values: &Tensor, x: &Padded, zorro: bool, fill: f64) -> Tensor {
    let real = x
        .mask
        .narrow(1, x.p, x.r)
        .to_device(values.device())
        .to_kind(Kind::Bool);
    let (offset, fill) = if zorro { (x.p, 0.0) } else { (x.p - 1, fill) };
    let vals = values
        .to_kind(Kind::Float)
        .masked_fill(&real.logical_not(), fill);
    let out = Tensor::full([x.b, x.s], fill, (Kind::Float, values.device()));
    out.narrow(1, offset, x.r).copy_(&vals);
    out
}
