//! A batch's response tokens read once, and the loss metrics the mock computes from them.

use serde_json::{Map, Value};

use super::grpo::{LossSettings, SeqTokens};
use super::{grpo, policy, MockEngine};
use crate::engine::{f32_tensor, EngineError, FwdBatch, ModelBatch};
use crate::server::frame::{tensor_f64, tensor_i64};
use crate::task::CharTokenizer;

pub(super) fn prompt_token_len(prompt: &str) -> usize {
    CharTokenizer::encode(prompt)
        .map(|t| t.len())
        .unwrap_or_else(|_| prompt.chars().count())
}

/// The response tokens of a batch, read once: per row the (column, token id, position) of
/// each response token the attention mask keeps.
pub(super) struct ResponseView {
    pub(super) b: usize,
    pub(super) s: usize,
    pub(super) p: usize,
    pub(super) rows: Vec<Vec<(usize, i64, usize)>>,
    pub(super) seqlens: Vec<u64>,
}

pub(super) fn unprocessable(e: impl ToString) -> EngineError {
    EngineError::unprocessable(e.to_string())
}

pub(super) fn response_view(batch: &ModelBatch) -> Result<ResponseView, EngineError> {
    let need = |n: &str| {
        batch
            .tensor(n)
            .ok_or_else(|| EngineError::unprocessable(format!("missing tensor batch.{n}")))
    };
    let ids_t = need("input_ids")?;
    let (b, s) = match ids_t.shape[..] {
        [b, s] => (b, s),
        _ => {
            return Err(unprocessable(format!(
                "batch.input_ids must be 2-D, got shape {:?}",
                ids_t.shape
            )))
        }
    };
    let ids = tensor_i64(ids_t, "batch.input_ids").map_err(unprocessable)?;
    let mask =
        tensor_i64(need("attention_mask")?, "batch.attention_mask").map_err(unprocessable)?;
    let p = need("prompts")?.shape.get(1).copied().unwrap_or(0);
    if ids.len() != b * s || mask.len() != b * s || p > s {
        return Err(unprocessable(format!(
            "batch.input_ids, attention_mask and prompts disagree on [B,S] = [{b}, {s}], P = {p}"
        )));
    }
    let mut rows = Vec::with_capacity(b);
    let mut seqlens = Vec::with_capacity(b);
    for r in 0..b {
        let m = &mask[r * s..(r + 1) * s];
        let prompt_valid = m[..p].iter().filter(|&&v| v != 0).count();
        let mut row = Vec::new();
        let mut pos = prompt_valid;
        for (t, &keep) in m[p..].iter().enumerate() {
            if keep != 0 {
                row.push((p + t, ids[r * s + p + t], pos));
                pos += 1;
            }
        }
        seqlens.push(m.iter().filter(|&&v| v != 0).count() as u64);
        rows.push(row);
    }
    Ok(ResponseView {
        b,
        s,
        p,
        rows,
        seqlens,
    })
}

pub(super) fn float_rows(batch: &ModelBatch, name: &str) -> Result<Option<Vec<f64>>, EngineError> {
    batch
        .tensor(name)
        .map(|t| tensor_f64(t, &format!("batch.{name}")).map_err(unprocessable))
        .transpose()
}

fn wants_entropy(batch: &ModelBatch) -> bool {
    batch
        .post
        .iter()
        .any(|p| p == "compute_entropy_and_logprobs" || p == "compute_entropy")
}

impl MockEngine {
    /// The per-token outputs of a forward pass under policy `version` (`/forward`'s `batch`,
    /// and `/forward-backward`'s with `meta.return_fwd_batch`): log p(token) at column P-1+t
    /// (at its own column with ZoRRo), the rest `meta.pad_token_id` (0 with ZoRRo).
    pub(super) fn fwd_batch(
        &self,
        batch: &ModelBatch,
        view: &ResponseView,
        version: u64,
        zorro: bool,
    ) -> Result<FwdBatch, EngineError> {
        if !zorro && view.p == 0 {
            return Err(unprocessable(
                "batch.prompts has width 0: without ZoRRo log p(response token t) sits at column P-1+t",
            ));
        }
        let fill = if zorro {
            0.0
        } else {
            match batch.meta.get("pad_token_id") {
                None | Some(Value::Null) => 0.0,
                Some(v) => v.as_f64().ok_or_else(|| {
                    unprocessable(format!("meta.pad_token_id must be a number, got {v}"))
                })? as f32,
            }
        };
        let mut lp = vec![fill; view.b * view.s];
        let mut ent = vec![fill; view.b * view.s];
        for (r, row) in view.rows.iter().enumerate() {
            for &(col, tok, pos) in row {
                let out_col = if zorro { col } else { col - 1 };
                lp[r * view.s + out_col] = policy::token_logprob(self.seed, tok, pos, version);
                ent[r * view.s + out_col] = policy::token_entropy(self.seed, pos, version);
            }
        }
        let shape = vec![view.b, view.s];
        Ok(FwdBatch {
            logprobs: f32_tensor(shape.clone(), &lp),
            entropy: wants_entropy(batch).then(|| f32_tensor(shape, &ent)),
        })
    }

    /// Loss metrics of a batch under the job's current weights (`/forward` with a loss and
    /// `/forward-backward`).
    pub(super) fn loss(
        &self,
        batch: &ModelBatch,
        view: &ResponseView,
        version: u64,
        loss_fn: &str,
    ) -> Result<(Map<String, Value>, f64, u64), EngineError> {
        let mask_name = if batch.tensor("loss_mask").is_some() {
            "loss_mask"
        } else {
            "response_mask"
        };
        let mask = float_rows(batch, mask_name)?.ok_or_else(|| {
            unprocessable(format!(
                "loss_fn {loss_fn:?} needs batch.response_mask or batch.loss_mask"
            ))
        })?;
        let settings =
            LossSettings::from_meta(&batch.meta, view.s - view.p).map_err(unprocessable)?;
        // Every GRPO name, 5864380's and 0.1.4's, is the same policy loss here.
        let is_policy = crate::processing::is_policy_loss(loss_fn);
        let (old, adv) = if is_policy {
            let get = |n: &str| {
                float_rows(batch, n)?
                    .ok_or_else(|| unprocessable(format!("loss_fn {loss_fn:?} needs batch.{n}")))
            };
            (get("old_log_probs")?, get("advantages")?)
        } else {
            (Vec::new(), Vec::new())
        };
        let ref_lp = float_rows(batch, "ref_log_prob")?;
        let mut seqs = Vec::with_capacity(view.b);
        let mut tokens = 0u64;
        for (r, row) in view.rows.iter().enumerate() {
            let mut q = SeqTokens::default();
            let mut refs = Vec::new();
            for &(col, tok, pos) in row {
                let i = r * view.s + col;
                if mask[i] == 0.0 {
                    continue;
                }
                tokens += 1;
                q.logp
                    .push(policy::token_logprob(self.seed, tok, pos, version) as f64);
                q.entropy
                    .push(policy::token_entropy(self.seed, pos, version) as f64);
                if is_policy {
                    q.old_logp.push(old[i]);
                    q.advantages.push(adv[i]);
                }
                if let Some(rl) = &ref_lp {
                    refs.push(rl[i]);
                }
            }
            if ref_lp.is_some() {
                q.ref_logp = Some(refs);
            }
            seqs.push(q);
        }
        let (metrics, loss) = if is_policy {
            grpo::policy_loss(&seqs, &settings, wants_entropy(batch))
        } else {
            grpo::sft_loss(&seqs, &settings)
        };
        Ok((metrics, loss, tokens))
    }
}
