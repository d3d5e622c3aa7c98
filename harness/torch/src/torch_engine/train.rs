//! Training passes: `/forward` and `/forward-backward` on a batch, and the loss inputs,
//! loss and metrics they compute.

use serde_json::{Map, Value};
use tch::{Device, Kind, Tensor};

use super::{Job, TorchEngine};
use crate::batch::{place, response_logprobs, Padded};
use crate::loss::{grpo_micro_loss, AggMode, AggTotals, LossSums, Sum};
use crate::settings::CallSettings;
use crate::{convert, head, loss};
use rlharness_arctic::engine::{
    EngineError, ForwardBackwardOutput, ForwardOutput, FwdBatch, ModelBatch,
};
use rlharness_arctic::processing;

impl TorchEngine {
    pub(super) fn forward_impl(
        &self,
        job: &Job,
        batch: &ModelBatch,
    ) -> Result<ForwardOutput, EngineError> {
        let settings = CallSettings::resolve(&job.worker, &batch.meta, &batch.post)?;
        let x = Padded::from_batch(batch, &settings, self.config.vocab_size, job.device)?;
        let loss_inputs = match batch.loss_fn.as_deref() {
            None => None,
            Some(name) if processing::is_known_loss(name) => {
                Some(LossInputs::read(batch, &x, name, job.device)?)
            }
            Some(other) => {
                return Err(EngineError::bad_request(format!(
                    "unknown loss_fn {other:?}"
                )))
            }
        };
        let _g = tch::no_grad_guard();
        let mut lps = Vec::new();
        let mut ents = Vec::new();
        let mb = job.micro_batch.max(1) as i64;
        let mut start = 0;
        while start < x.b {
            let rows = x.rows(start, mb.min(x.b - start));
            let (lp, ent) = if job.model.fused && self.hand_head {
                head::response_logprobs(&job.model, &rows, &settings, settings.want_entropy)
            } else {
                let entropy = if settings.want_entropy {
                    head::Entropy::Value
                } else {
                    head::Entropy::Off
                };
                response_logprobs(&job.model, &rows, &settings, entropy)
            };
            lps.push(lp);
            if let Some(e) = ent {
                ents.push(e);
            }
            start += rows.b;
        }
        let lp = Tensor::cat(&lps, 0);
        let ent = (!ents.is_empty()).then(|| Tensor::cat(&ents, 0));
        let (metrics, avg_loss) = match &loss_inputs {
            Some(li) => {
                let mut sums = LossSums::default();
                let totals = AggTotals::of(&li.mask);
                let _ = li.loss(&lp, ent.as_ref(), &settings, totals, &mut sums);
                sums.settle()
                    .map_err(|e| EngineError::internal(e.to_string()))?;
                (li.metrics(&sums, &settings), Some(sums.loss))
            }
            None => (Map::new(), None),
        };
        let logprobs = place(&lp, &x, settings.zorro, settings.pad_token_id as f64);
        let entropy = ent.map(|e| place(&e, &x, settings.zorro, 0.0));
        Ok(ForwardOutput {
            logprobs: convert::to_wire_f32(&logprobs)?,
            entropy: entropy.map(|e| convert::to_wire_f32(&e)).transpose()?,
            metrics,
            avg_loss,
        })
    }

    pub(super) fn forward_backward_impl(
        &self,
        job: &mut Job,
        batch: &ModelBatch,
    ) -> Result<ForwardBackwardOutput, EngineError> {
        if job.trainer.is_none() {
            return Err(EngineError::bad_request(
                "forward-backward needs a training job",
            ));
        }
        let settings = CallSettings::resolve(&job.worker, &batch.meta, &batch.post)?;
        let loss_name = match batch.loss_fn.as_deref() {
            None => {
                return Err(EngineError::bad_request(
                    "forward-backward needs a loss_fn (got null)",
                ))
            }
            Some(n) if processing::is_known_loss(n) => n.to_string(),
            Some(other) => {
                return Err(EngineError::bad_request(format!(
                    "unknown loss_fn {other:?}"
                )))
            }
        };
        let x = Padded::from_batch(batch, &settings, self.config.vocab_size, job.device)?;
        let li = LossInputs::read(batch, &x, &loss_name, job.device)?;
        let totals = AggTotals::of(&li.mask);
        let mut sums = LossSums::default();
        let mb = job.micro_batch.max(1) as i64;
        let mut start = 0;
        let entropy_grad = li.is_grpo() && settings.actor.entropy_coeff != 0.0;
        // 0.1.4's `meta.return_fwd_batch`: the forward pass's [B,R] log-probs (and entropy),
        // kept detached as each micro-batch's pieces come, in row order.
        let keep = batch.returns_fwd_batch();
        let mut kept_lp: Vec<Tensor> = Vec::new();
        let mut kept_ent: Vec<Tensor> = Vec::new();
        let mut keep_piece = |lp: &Tensor, ent: Option<&Tensor>| {
            if keep {
                kept_lp.push(lp.detach().copy());
                if let Some(e) = ent {
                    kept_ent.push(e.detach().copy());
                }
            }
        };
        while start < x.b {
            let n = mb.min(x.b - start);
            let rows = x.rows(start, n);
            let part = li.rows(start, n);
            let entropy = if entropy_grad {
                head::Entropy::WithGrad
            } else if settings.want_entropy || part.needs_entropy(&settings) {
                head::Entropy::Value
            } else {
                head::Entropy::Off
            };
            if job.model.fused && self.hand_head {
                let chunk = head::chunk_rows(&settings, rows.r, self.config.vocab_size as i64);
                head::forward_backward(
                    &job.model,
                    &rows,
                    &settings,
                    entropy,
                    chunk,
                    |r0, c, lp, ent| {
                        keep_piece(lp, ent);
                        part.rows(r0, c).loss(lp, ent, &settings, totals, &mut sums)
                    },
                )
                .map_err(EngineError::internal)?;
            } else {
                let (lp, ent) = response_logprobs(&job.model, &rows, &settings, entropy);
                keep_piece(&lp, ent.as_ref());
                let loss = part.loss(&lp, ent.as_ref(), &settings, totals, &mut sums);
                loss.backward();
            }
            start += n;
        }
        sums.settle()
            .map_err(|e| EngineError::internal(e.to_string()))?;
        let fwd_batch = if keep {
            let lp = place(
                &Tensor::cat(&kept_lp, 0),
                &x,
                settings.zorro,
                settings.pad_token_id as f64,
            );
            // Entropy only where a post-processor asked for it, as `/forward` answers it.
            let ent = (settings.want_entropy && !kept_ent.is_empty())
                .then(|| place(&Tensor::cat(&kept_ent, 0), &x, settings.zorro, 0.0));
            Some(FwdBatch {
                logprobs: convert::to_wire_f32(&lp)?,
                entropy: ent.map(|e| convert::to_wire_f32(&e)).transpose()?,
            })
        } else {
            None
        };
        Ok(ForwardBackwardOutput {
            metrics: li.metrics(&sums, &settings),
            avg_loss: sums.loss,
            fwd_batch,
        })
    }
}

/// The response-side inputs of a loss, `[B,R]`.
pub(super) struct LossInputs {
    name: String,
    mask: Tensor,
    old: Option<Tensor>,
    adv: Option<Tensor>,
    reference: Option<Tensor>,
}

impl LossInputs {
    fn read(
        batch: &ModelBatch,
        x: &Padded,
        name: &str,
        device: Device,
    ) -> Result<LossInputs, EngineError> {
        let mask = match x.response_side(batch, "response_mask", device)? {
            Some(m) => m,
            None => match x.response_side(batch, "loss_mask", device)? {
                Some(m) => m,
                None => x.mask.narrow(1, x.p, x.r).to_kind(Kind::Float),
            },
        };
        let mask = mask.ne(0.0).to_kind(Kind::Float);
        let grpo = processing::is_policy_loss(name);
        let need = |t: Option<Tensor>, key: &str| -> Result<Option<Tensor>, EngineError> {
            match t {
                Some(t) => Ok(Some(t)),
                None if grpo => Err(EngineError::unprocessable(format!(
                    "loss_fn {name} needs batch.{key} (send loss_fn null for log-probs only)"
                ))),
                None => Ok(None),
            }
        };
        Ok(LossInputs {
            name: name.to_string(),
            old: need(
                x.response_side(batch, "old_log_probs", device)?,
                "old_log_probs",
            )?,
            adv: need(x.response_side(batch, "advantages", device)?, "advantages")?,
            reference: x.response_side(batch, "ref_log_prob", device)?,
            mask,
        })
    }

    fn rows(&self, start: i64, n: i64) -> LossInputs {
        let cut = |t: &Tensor| t.narrow(0, start, n);
        LossInputs {
            name: self.name.clone(),
            mask: cut(&self.mask),
            old: self.old.as_ref().map(cut),
            adv: self.adv.as_ref().map(cut),
            reference: self.reference.as_ref().map(cut),
        }
    }

    fn is_grpo(&self) -> bool {
        processing::is_policy_loss(&self.name)
    }

    fn needs_entropy(&self, s: &CallSettings) -> bool {
        self.is_grpo() && s.actor.entropy_coeff != 0.0
    }

    fn loss(
        &self,
        lp: &Tensor,
        ent: Option<&Tensor>,
        s: &CallSettings,
        totals: AggTotals,
        sums: &mut LossSums,
    ) -> Tensor {
        match (&self.old, &self.adv) {
            (Some(old), Some(adv)) if self.is_grpo() => {
                let ent_for_loss = if s.actor.entropy_coeff != 0.0 {
                    ent
                } else {
                    ent.filter(|_| s.want_entropy)
                };
                grpo_micro_loss(
                    lp,
                    ent_for_loss,
                    old,
                    adv,
                    &self.mask,
                    self.reference.as_ref(),
                    &s.actor,
                    totals,
                    sums,
                )
            }
            _ => {
                // sft / sft_ce: token-mean negative log-likelihood of the response.
                let l = loss::aggregate(&lp.neg(), &self.mask, AggMode::TokenMean, totals);
                sums.add(Sum::Loss, &l);
                sums.add(Sum::Tokens, &self.mask.sum(Kind::Float));
                l
            }
        }
    }

    fn metrics(&self, sums: &LossSums, s: &CallSettings) -> Map<String, Value> {
        debug_assert!(sums.is_settled(), "loss sums read before settle()");
        let mut m = Map::new();
        let tokens = sums.tokens.max(1.0);
        if self.is_grpo() {
            m.insert(
                "actor/pg_loss".into(),
                rlharness_arctic::wire::pyjson::float(sums.pg_loss),
            );
            m.insert(
                "actor/ppo_kl".into(),
                rlharness_arctic::wire::pyjson::float(sums.ppo_kl_sum / tokens),
            );
            m.insert(
                "actor/pg_clipfrac".into(),
                rlharness_arctic::wire::pyjson::float(sums.clipfrac_sum / tokens),
            );
            m.insert(
                "actor/pg_clipfrac_lower".into(),
                rlharness_arctic::wire::pyjson::float(sums.clipfrac_lower_sum / tokens),
            );
            if s.want_entropy || s.actor.entropy_coeff != 0.0 {
                m.insert(
                    "actor/entropy_loss".into(),
                    rlharness_arctic::wire::pyjson::float(sums.entropy_loss),
                );
            }
            if s.actor.use_kl_loss && self.reference.is_some() {
                m.insert(
                    "kl_loss".into(),
                    rlharness_arctic::wire::pyjson::float(sums.kl_loss),
                );
                m.insert(
                    "kl_coef".into(),
                    rlharness_arctic::wire::pyjson::float(s.actor.kl_coef),
                );
            }
        }
        m.insert(
            "loss".into(),
            rlharness_arctic::wire::pyjson::float(sums.loss),
        );
        m
    }
}
