//! verl's padded batch layout and the `/forward` frames built from it.

use serde_json::{json, Map, Value};

use super::{bad_reply, protocol, wire_err, Sample, StepError};
use super::{BatchShape, Translation};
use rlharness_arctic::task::PAD_ID;
use rlharness_arctic::wire::{Node, Tensor};

/// Whether a planted bug drops `key` from every call's `meta` (see `Plant::DropMetaKey`).
fn planted_drop(t: &Translation, key: &str) -> bool {
    t.dropped_meta.iter().any(|k| k == key)
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum ForwardKind {
    OldLogProb,
    Update,
}

/// Per-sequence response-aligned values for an update.
pub(super) struct UpdateTensors {
    pub(super) old_logp: Vec<Vec<f32>>,
    pub(super) ref_logp: Option<Vec<Vec<f32>>>,
    pub(super) advantages: Vec<f64>,
}

impl UpdateTensors {
    pub(super) fn slice(&self, _batch: &PaddedBatch, lo: usize, hi: usize) -> UpdateTensors {
        UpdateTensors {
            old_logp: self.old_logp[lo..hi].to_vec(),
            ref_logp: self.ref_logp.as_ref().map(|r| r[lo..hi].to_vec()),
            advantages: self.advantages[lo..hi].to_vec(),
        }
    }
}

/// A batch's token planes, padded as verl pads them (see [`PaddedBatch::planes`]).
struct TokenPlanes {
    input_ids: Vec<i64>,
    mask: Vec<i64>,
    prompts: Vec<i64>,
    responses: Vec<i64>,
}

/// verl's padded layout: prompts LEFT-padded to P, responses RIGHT-padded to R, S = P + R.
#[derive(Clone)]
pub(super) struct PaddedBatch {
    p: usize,
    r: usize,
    prompts: Vec<Vec<i64>>,
    responses: Vec<Vec<i64>>,
}

impl PaddedBatch {
    pub(super) fn build(samples: &[Sample], shape: &BatchShape) -> Self {
        Self {
            p: shape.max_prompt_len,
            r: shape.max_response_len,
            prompts: samples.iter().map(|s| s.prompt.clone()).collect(),
            responses: samples.iter().map(|s| s.response.clone()).collect(),
        }
    }

    pub(super) fn slice(&self, lo: usize, hi: usize) -> PaddedBatch {
        PaddedBatch {
            p: self.p,
            r: self.r,
            prompts: self.prompts[lo..hi].to_vec(),
            responses: self.responses[lo..hi].to_vec(),
        }
    }

    fn b(&self) -> usize {
        self.prompts.len()
    }

    fn s(&self) -> usize {
        self.p + self.r
    }

    /// A `[B,S]` tensor with `f(i, t)` at response column `P + t` (t < response length),
    /// zero elsewhere ("left-zero-padded to [B,S]").
    fn response_plane<T: Copy + Default>(&self, f: impl Fn(usize, usize) -> T) -> Vec<T> {
        let (b, s) = (self.b(), self.s());
        let mut out = vec![T::default(); b * s];
        for i in 0..b {
            for t in 0..self.responses[i].len() {
                out[i * s + self.p + t] = f(i, t);
            }
        }
        out
    }

    /// The `/forward` request of this batch as the adapter frames it: the `batch` tensors,
    /// `meta` (with an update's extras) and the `processing` a `kind` of forward asks for.
    pub(super) fn frame(
        &self,
        meta: &Map<String, Value>,
        update: Option<&UpdateTensors>,
        kind: ForwardKind,
        t: &Translation,
    ) -> Result<Node, StepError> {
        let (b, s, p, r) = (self.b(), self.s(), self.p, self.r);
        let planes = self.planes();
        let mut tensors = vec![
            (
                "input_ids".to_string(),
                Tensor::from_i64(vec![b, s], &planes.input_ids).map_err(wire_err)?,
            ),
            (
                "attention_mask".to_string(),
                Tensor::from_i64(vec![b, s], &planes.mask).map_err(wire_err)?,
            ),
            (
                "prompts".to_string(),
                Tensor::from_i64(vec![b, p], &planes.prompts).map_err(wire_err)?,
            ),
        ];
        if !t.drop_position_ids {
            let pos = self.position_ids(&planes.mask);
            tensors.push((
                "position_ids".into(),
                Tensor::from_i64(vec![b, s], &pos).map_err(wire_err)?,
            ));
        }
        let processing = match kind {
            ForwardKind::OldLogProb => {
                json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": null})
            }
            ForwardKind::Update => json!({
                "post": ["apply_temperature", "compute_entropy_and_logprobs"],
                "loss_fn": "verl_grpo",
            }),
        };
        if let Some(u) = update {
            tensors.push((
                "responses".into(),
                Tensor::from_i64(vec![b, r], &planes.responses).map_err(wire_err)?,
            ));
            tensors.extend(self.update_planes(u)?);
        }
        let meta_entries = self.meta_entries(meta, update.is_some(), t)?;
        Ok(Node::Dict(vec![
            (
                "batch".into(),
                Node::Dict(
                    tensors
                        .into_iter()
                        .map(|(k, tensor)| {
                            (
                                k,
                                Node::Tensor {
                                    tensor,
                                    scalar: false,
                                },
                            )
                        })
                        .collect(),
                ),
            ),
            ("meta".into(), Node::Dict(meta_entries)),
            ("processing".into(), Node::Json(processing)),
        ]))
    }

    /// The padded token planes: `input_ids` and `attention_mask` `[B,S]`, `prompts` `[B,P]`
    /// (left-padded), `responses` `[B,R]` (right-padded).
    fn planes(&self) -> TokenPlanes {
        let (b, s, p, r) = (self.b(), self.s(), self.p, self.r);
        let mut planes = TokenPlanes {
            input_ids: vec![PAD_ID; b * s],
            mask: vec![0i64; b * s],
            prompts: vec![PAD_ID; b * p],
            responses: vec![PAD_ID; b * r],
        };
        for i in 0..b {
            let pr = &self.prompts[i];
            let off = p - pr.len();
            for (j, &tok) in pr.iter().enumerate() {
                planes.input_ids[i * s + off + j] = tok;
                planes.mask[i * s + off + j] = 1;
                planes.prompts[i * p + off + j] = tok;
            }
            for (j, &tok) in self.responses[i].iter().enumerate() {
                planes.input_ids[i * s + p + j] = tok;
                planes.mask[i * s + p + j] = 1;
                planes.responses[i * r + j] = tok;
            }
        }
        planes
    }

    /// `position_ids` `[B,S]` from the attention mask: the running count of real tokens less
    /// one, never below zero.
    fn position_ids(&self, mask: &[i64]) -> Vec<i64> {
        let (b, s) = (self.b(), self.s());
        let mut pos = vec![0i64; b * s];
        for i in 0..b {
            let mut c = 0i64;
            for j in 0..s {
                c += mask[i * s + j];
                pos[i * s + j] = (c - 1).max(0);
            }
        }
        pos
    }

    /// An update's response-aligned `[B,S]` planes: the response and loss masks, the old
    /// log-probs, the advantages and (with a reference model) the reference log-probs.
    fn update_planes(&self, u: &UpdateTensors) -> Result<Vec<(String, Tensor)>, StepError> {
        let (b, s) = (self.b(), self.s());
        let rmask = self.response_plane(|_, _| 1i64);
        let mut tensors = vec![
            (
                "response_mask".into(),
                Tensor::from_i64(vec![b, s], &rmask).map_err(wire_err)?,
            ),
            (
                "loss_mask".into(),
                Tensor::from_i64(vec![b, s], &rmask).map_err(wire_err)?,
            ),
        ];
        let old = self.response_plane(|i, t| u.old_logp[i].get(t).copied().unwrap_or(0.0));
        tensors.push((
            "old_log_probs".into(),
            Tensor::from_f32(vec![b, s], &old).map_err(wire_err)?,
        ));
        let adv = self.response_plane(|i, _| u.advantages[i] as f32);
        tensors.push((
            "advantages".into(),
            Tensor::from_f32(vec![b, s], &adv).map_err(wire_err)?,
        ));
        if let Some(rl) = &u.ref_logp {
            let rp = self.response_plane(|i, t| rl[i].get(t).copied().unwrap_or(0.0));
            tensors.push((
                "ref_log_prob".into(),
                Tensor::from_f32(vec![b, s], &rp).map_err(wire_err)?,
            ));
        }
        Ok(tensors)
    }

    /// The frame's `meta`: the step's meta, then for an update the mini-batch's
    /// `batch_num_tokens` (a 0-d I64 tensor: `response_mask.sum()`) and `rollout_is_weights`
    /// (no importance weights: an explicit null), as the adapter sends them.
    fn meta_entries(
        &self,
        meta: &Map<String, Value>,
        update: bool,
        t: &Translation,
    ) -> Result<Vec<(String, Node)>, StepError> {
        let mut meta_entries: Vec<(String, Node)> = meta
            .clone()
            .into_iter()
            .map(|(k, v)| (k, Node::Json(v)))
            .collect();
        if update {
            let tokens: usize = self.responses.iter().map(Vec::len).sum();
            if !planted_drop(t, "batch_num_tokens") {
                meta_entries.push((
                    "batch_num_tokens".into(),
                    Node::scalar(Tensor::from_i64(vec![], &[tokens as i64]).map_err(wire_err)?),
                ));
            }
            if !planted_drop(t, "rollout_is_weights") {
                meta_entries.push(("rollout_is_weights".into(), Node::Json(Value::Null)));
            }
        }
        Ok(meta_entries)
    }

    /// Response-aligned log-probs (and entropy) out of a `/forward` reply's `[B,S]` planes:
    /// column `P-1+t` without ZoRRo, `P+t` with it.
    #[allow(clippy::type_complexity)]
    pub(super) fn response_logprobs(
        &self,
        reply: &Node,
        zorro: bool,
    ) -> Result<(Vec<Vec<f32>>, Option<Vec<Vec<f32>>>), StepError> {
        let batch = reply
            .get("batch")
            .ok_or_else(|| protocol("/forward response has no `batch`"))?;
        let plane = |name: &str| -> Result<Option<Vec<Vec<f32>>>, StepError> {
            let Some(Node::Tensor { tensor, .. }) = batch.get(name) else {
                return Ok(None);
            };
            if tensor.shape != [self.b(), self.s()] {
                return Err(bad_reply(
                    "/forward",
                    format!(
                        "`batch.{name}` has shape {:?}, expected [{}, {}]",
                        tensor.shape,
                        self.b(),
                        self.s()
                    ),
                ));
            }
            let flat = tensor.to_f32_vec();
            let shift = if zorro { self.p } else { self.p - 1 };
            let rows: Vec<Vec<f32>> = (0..self.b())
                .map(|i| {
                    (0..self.responses[i].len())
                        .map(|t| flat[i * self.s() + shift + t])
                        .collect()
                })
                .collect();
            // A non-finite value would flow into the loss and the weights unnoticed.
            for (i, row) in rows.iter().enumerate() {
                if let Some(t) = row.iter().position(|x| !x.is_finite()) {
                    return Err(bad_reply(
                        "/forward",
                        format!(
                            "`batch.{name}` holds a non-finite value ({}) at sequence {i}, response token {t}",
                            row[t]
                        ),
                    ));
                }
            }
            Ok(Some(rows))
        };
        let logp = plane("logprobs")?
            .ok_or_else(|| protocol("/forward response has no `batch.logprobs`"))?;
        Ok((logp, plane("entropy")?))
    }

    pub(super) fn masked_mean(&self, per_seq: &[Vec<f32>]) -> f64 {
        let (sum, n) = per_seq
            .iter()
            .flatten()
            .fold((0.0f64, 0usize), |(s, n), &x| (s + x as f64, n + 1));
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    }

    /// A per-sequence value repeated over its response tokens (verl's token-level stats).
    pub(super) fn token_values(&self, per_seq: &[f64]) -> Vec<f64> {
        per_seq
            .iter()
            .zip(&self.responses)
            .flat_map(|(&v, r)| std::iter::repeat_n(v, r.len()))
            .collect()
    }
}
