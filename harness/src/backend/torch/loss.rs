//! verl's GRPO actor loss (vanilla PPO clip, as the Arctic server's `verl_grpo` computes it)
//! and its aggregation modes. Inputs are `[b,R]` response-aligned tensors.

use tch::{Kind, Tensor};

/// The clip ratios the Arctic server uses. It parses `actor_config.clip_ratio*` but its loss
/// keeps these fixed values; we keep that behaviour so runs match the real server.
pub const CLIP_LOW: f64 = 0.2;
pub const CLIP_HIGH: f64 = 0.2;
pub const CLIP_C: f64 = 3.0;

/// `actor_config.loss_agg_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggMode {
    TokenMean,
    TokenSum,
    SeqMeanTokenSum,
    SeqMeanTokenMean,
    SeqMeanTokenSumNorm,
}

impl AggMode {
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "token-mean" => AggMode::TokenMean,
            "token-sum" => AggMode::TokenSum,
            "seq-mean-token-sum" => AggMode::SeqMeanTokenSum,
            "seq-mean-token-mean" => AggMode::SeqMeanTokenMean,
            "seq-mean-token-sum-norm" => AggMode::SeqMeanTokenSumNorm,
            other => {
                return Err(format!(
                    "actor_config.loss_agg_mode {other:?} is not one of token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm"
                ))
            }
        })
    }
}

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
#[derive(Debug, Default, Clone)]
pub struct LossSums {
    pub pg_loss: f64,
    pub entropy_loss: f64,
    pub kl_loss: f64,
    pub loss: f64,
    pub ppo_kl_sum: f64,
    pub clipfrac_sum: f64,
    pub clipfrac_lower_sum: f64,
    pub tokens: f64,
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
    let tok = |t: &Tensor| (t * mask).sum(Kind::Float).double_value(&[]);
    sums.pg_loss += pg_loss.double_value(&[]);
    sums.ppo_kl_sum += tok(&neg_kl.neg());
    sums.clipfrac_sum += tok(&pg2.gt_tensor(&pg1).to_kind(Kind::Float));
    sums.clipfrac_lower_sum +=
        tok(&(clip1.gt_tensor(&pg3).logical_and(&negative)).to_kind(Kind::Float));
    sums.tokens += mask.sum(Kind::Float).double_value(&[]);
    drop(_g);

    if let Some(h) = entropy {
        let ent = aggregate(h, mask, cfg.agg, totals);
        sums.entropy_loss += ent.double_value(&[]);
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
            sums.kl_loss += kl.double_value(&[]);
            total += kl * cfg.kl_coef;
        }
    }
    sums.loss += total.double_value(&[]);
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
        assert!(AggMode::parse("mean").unwrap_err().contains("mean"));
    }
}
