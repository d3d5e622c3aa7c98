//! verl's GRPO actor loss (vanilla PPO clip, as the Arctic server's `verl_grpo` computes it)
//! and its aggregation modes. Inputs are `[b,R]` response-aligned tensors.

use tch::{Kind, Tensor};

/// The clip ratios the Arctic server uses. It parses `actor_config.clip_ratio*` but its loss
/// keeps these fixed values; we keep that behaviour so runs match the real server.
pub use rlharness_arctic::mock::grpo::{AggMode, CLIP_HIGH, CLIP_LOW, CLIP_RATIO_C as CLIP_C};

/// The normalisers of one whole `/forward-backward` call, so that micro-batches add up to the
/// loss of the full batch.
#[derive(Debug, Clone, Copy)]
pub struct AggTotals {
    pub tokens: f64,
    /// Sequences with at least one response token.
    pub seqs: f64,
    /// Response width R (the `-norm` mode's constant divisor).
    pub horizon: f64,
}

impl AggTotals {
    pub fn of(mask: &Tensor) -> AggTotals {
        let tokens = mask.sum(Kind::Float).double_value(&[]);
        let seqs = mask
            .sum_dim_intlist(1, false, Kind::Float)
            .gt(0.0)
            .sum(Kind::Float)
            .double_value(&[]);
        AggTotals {
            tokens,
            seqs,
            horizon: mask.size().get(1).copied().unwrap_or(1) as f64,
        }
    }
}

/// This micro-batch's share of `agg(values)` over the whole call.
pub fn aggregate(values: &Tensor, mask: &Tensor, mode: AggMode, totals: AggTotals) -> Tensor {
    let masked = values * mask;
    match mode {
        AggMode::TokenMean => masked.sum(Kind::Float) / totals.tokens.max(1.0),
        AggMode::TokenSum => masked.sum(Kind::Float),
        AggMode::SeqMeanTokenSum => {
            masked
                .sum_dim_intlist(1, false, Kind::Float)
                .sum(Kind::Float)
                / totals.seqs.max(1.0)
        }
        AggMode::SeqMeanTokenMean => {
            let per_seq = masked.sum_dim_intlist(1, false, Kind::Float)
                / mask.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0);
            per_seq.sum(Kind::Float) / totals.seqs.max(1.0)
        }
        AggMode::SeqMeanTokenSumNorm => masked.sum(Kind::Float) / totals.horizon.max(1.0),
    }
}

/// The actor settings one call carries (`meta.actor_config`).
#[derive(Debug, Clone, PartialEq)]
pub struct ActorLoss {
    pub entropy_coeff: f64,
    pub agg: AggMode,
    pub use_kl_loss: bool,
    pub kl_coef: f64,
}

impl Default for ActorLoss {
    fn default() -> Self {
        ActorLoss {
            entropy_coeff: 0.0,
            agg: AggMode::TokenMean,
            use_kl_loss: false,
            kl_coef: 0.001,
        }
    }
}

/// Sums over the tokens of a call, for the token-mean metrics the server returns.
///
/// The per-micro-batch values stay on the device until [`LossSums::settle`] reads them all in
/// one copy: reading each as it is made would drain the GPU's queue several times per
/// micro-batch. The sums are the same f64 additions, in the same order, as reading each value
/// at once.
#[derive(Debug, Default)]
pub struct LossSums {
    pub pg_loss: f64,
    pub entropy_loss: f64,
    pub kl_loss: f64,
    pub loss: f64,
    pub ppo_kl_sum: f64,
    pub clipfrac_sum: f64,
    pub clipfrac_lower_sum: f64,
    pub tokens: f64,
    pending: Vec<(Sum, Tensor)>,
}

/// Which field of [`LossSums`] a pending value adds to.
#[derive(Debug, Clone, Copy)]
pub enum Sum {
    PgLoss,
    EntropyLoss,
    KlLoss,
    Loss,
    PpoKl,
    Clipfrac,
    ClipfracLower,
    Tokens,
}

impl LossSums {
    /// Adds the scalar `value` to `slot` once the sums are settled.
    pub fn add(&mut self, slot: Sum, value: &Tensor) {
        self.pending
            .push((slot, value.detach().to_kind(Kind::Double).reshape([1])));
    }

    /// Whether every added value has been read back (the fields are final).
    pub fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }

    /// Reads the pending values back (one device-to-host copy) and adds them up.
    pub fn settle(&mut self) -> Result<(), tch::TchError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let (slots, values): (Vec<Sum>, Vec<Tensor>) = self.pending.drain(..).unzip();
        let values = Vec::<f64>::try_from(Tensor::f_cat(&values, 0)?.to_device(tch::Device::Cpu))?;
        for (slot, v) in slots.into_iter().zip(values) {
            *match slot {
                Sum::PgLoss => &mut self.pg_loss,
                Sum::EntropyLoss => &mut self.entropy_loss,
                Sum::KlLoss => &mut self.kl_loss,
                Sum::Loss => &mut self.loss,
                Sum::PpoKl => &mut self.ppo_kl_sum,
                Sum::Clipfrac => &mut self.clipfrac_sum,
                Sum::ClipfracLower => &mut self.clipfrac_lower_sum,
                Sum::Tokens => &mut self.tokens,
            } += v;
        }
        Ok(())
    }
}

/// One micro-batch of the loss. Returns the differentiable scalar to back-propagate.
#[allow(clippy::too_many_arguments)]
pub fn grpo_micro_loss(
    logp: &Tensor,
    entropy: Option<&Tensor>,
    old_logp: &Tensor,
    advantages: &Tensor,
    mask: &Tensor,
    ref_logp: Option<&Tensor>,
    cfg: &ActorLoss,
    totals: AggTotals,
    sums: &mut LossSums,
) -> Tensor {
    let neg_kl = (logp - old_logp).clamp(-20.0, 20.0);
    let ratio = neg_kl.exp();
    let pg1 = -advantages * &ratio;
    let pg2 = -advantages * ratio.clamp(1.0 - CLIP_LOW, 1.0 + CLIP_HIGH);
    let clip1 = pg1.maximum(&pg2);
    let pg3 = -advantages * CLIP_C;
    let clip2 = pg3.minimum(&clip1);
    let negative = advantages.lt(0.0);
    let pg_losses = clip2.where_self(&negative, &clip1);
    let pg_loss = aggregate(&pg_losses, mask, cfg.agg, totals);
    let mut total = pg_loss.shallow_clone();

    let _g = tch::no_grad_guard();
    let tok = |t: &Tensor| (t * mask).sum(Kind::Float);
    sums.add(Sum::PgLoss, &pg_loss);
    sums.add(Sum::PpoKl, &tok(&neg_kl.neg()));
    sums.add(
        Sum::Clipfrac,
        &tok(&pg2.gt_tensor(&pg1).to_kind(Kind::Float)),
    );
    sums.add(
        Sum::ClipfracLower,
        &tok(&(clip1.gt_tensor(&pg3).logical_and(&negative)).to_kind(Kind::Float)),
    );
    sums.add(Sum::Tokens, &mask.sum(Kind::Float));
    drop(_g);

    if let Some(h) = entropy {
        let ent = aggregate(h, mask, cfg.agg, totals);
        sums.add(Sum::EntropyLoss, &ent);
        if cfg.entropy_coeff != 0.0 {
            total -= ent * cfg.entropy_coeff;
        }
    }
    if cfg.use_kl_loss {
        if let Some(r) = ref_logp {
            // verl's low_var_kl (k3), clamped to [-10, 10].
            let d = r - logp;
            let kld = (d.exp() - &d - 1.0).clamp(-10.0, 10.0);
            let kl = aggregate(&kld, mask, cfg.agg, totals);
            sums.add(Sum::KlLoss, &kl);
            total += kl * cfg.kl_coef;
        }
    }
    sums.add(Sum::Loss, &total);
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_slice(v).view([1, v.len() as i64])
    }

    #[test]
    fn clipped_surrogate_matches_hand_values() {
        // Token 0: A>0, ratio e^0.5 > 1.2 -> clipped branch -A*1.2.
        // Token 1: A<0, ratio e^2 -> -A*r = 7.39 above the cap 3 -> capped at 3.
        // Token 2: A>0, ratio 1 -> -A.  Token 3 masked out.
        let logp = t(&[0.0, 0.0, -1.0, -5.0]);
        let old = t(&[-0.5, -2.0, -1.0, 0.0]);
        let adv = t(&[1.0, -1.0, 2.0, 9.0]);
        let mask = t(&[1.0, 1.0, 1.0, 0.0]);
        let totals = AggTotals::of(&mask);
        let mut sums = LossSums::default();
        let loss = grpo_micro_loss(
            &logp,
            None,
            &old,
            &adv,
            &mask,
            None,
            &ActorLoss::default(),
            totals,
            &mut sums,
        );
        sums.settle().unwrap();
        let want = (-1.2 + 3.0 - 2.0) / 3.0;
        assert!((loss.double_value(&[]) - want).abs() < 1e-6);
        assert!(
            (sums.clipfrac_sum - 1.0).abs() < 1e-9,
            "{}",
            sums.clipfrac_sum
        );
        assert!((sums.clipfrac_lower_sum - 1.0).abs() < 1e-9);
        assert!((sums.ppo_kl_sum - (-0.5 - 2.0)).abs() < 1e-6);
    }

    #[test]
    fn aggregation_modes() {
        let v = Tensor::from_slice2(&[[1.0f32, 2.0, 3.0], [4.0, 0.0, 0.0]]);
        let m = Tensor::from_slice2(&[[1.0f32, 1.0, 1.0], [1.0, 0.0, 0.0]]);
        let tot = AggTotals::of(&m);
        let get = |mode| aggregate(&v, &m, mode, tot).double_value(&[]);
        assert!((get(AggMode::TokenMean) - 2.5).abs() < 1e-6);
        assert!((get(AggMode::TokenSum) - 10.0).abs() < 1e-6);
        assert!((get(AggMode::SeqMeanTokenSum) - 5.0).abs() < 1e-6);
        assert!((get(AggMode::SeqMeanTokenMean) - 3.0).abs() < 1e-6);
        assert!((get(AggMode::SeqMeanTokenSumNorm) - 10.0 / 3.0).abs() < 1e-6);
        assert!(AggMode::parse("mean").unwrap_err().0.contains("mean"));
    }
}
