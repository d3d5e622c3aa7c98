//! Sampler-vs-trainer mismatch: how far the log-probabilities the sampler returned for the
//! tokens it sampled are from the trainer's old log-probabilities of the same tokens, per step.
//! In a healthy run the two engines hold the same weights, so the gap is numerical noise; a
//! skipped or broken weight sync, or a sampler in another dtype, opens it (the health signal
//! NeMo-RL's token probability error and prime-rl's mismatch KL gate on).
//!
//! The figures are verl's, under verl's names (`verl/utils/debug/metrics.py` and
//! `verl/trainer/ppo/rollout_corr_helper.py`), over every response token of the step:
//! - `training/rollout_probs_diff_mean` and `_max`: |p_trainer − p_sampler|, on probabilities
//!   (verl calls it a log-prob diff, but takes `exp` first);
//! - `rollout_corr/k3_kl`: the k3 estimator of KL(π_sampler ‖ π_trainer),
//!   mean of exp(r) − r − 1 with r = log p_trainer − log p_sampler.

/// The metric names, as verl logs them.
pub(crate) const PROBS_DIFF_MEAN: &str = "training/rollout_probs_diff_mean";
pub(crate) const PROBS_DIFF_MAX: &str = "training/rollout_probs_diff_max";
pub(crate) const K3_KL: &str = "rollout_corr/k3_kl";

/// One step's mismatch figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Mismatch {
    pub(crate) probs_diff_mean: f64,
    pub(crate) probs_diff_max: f64,
    pub(crate) k3_kl: f64,
}

/// The mismatch over `sampler[i]` and `trainer[i]` (each sample's response tokens, the trainer's
/// row as long as the response it scored), or `None` when a sample has no sampler log-probs (the
/// sampler was not asked for them, or did not send them) or there is no token at all. A
/// sampler row longer than the trainer's (the driver cut the response) is compared on the
/// trainer's tokens.
pub(crate) fn mismatch(sampler: &[Option<&[f32]>], trainer: &[Vec<f32>]) -> Option<Mismatch> {
    if sampler.len() != trainer.len() {
        return None;
    }
    let (mut n, mut sum, mut max, mut k3) = (0usize, 0.0f64, 0.0f64, 0.0f64);
    for (s, t) in sampler.iter().zip(trainer) {
        let s = (*s)?;
        for (&ls, &lt) in s.iter().zip(t) {
            let (ls, lt) = (f64::from(ls), f64::from(lt));
            let d = (lt.exp() - ls.exp()).abs();
            sum += d;
            max = max.max(d);
            let r = lt - ls;
            k3 += r.exp() - r - 1.0;
            n += 1;
        }
    }
    (n > 0).then(|| Mismatch {
        probs_diff_mean: sum / n as f64,
        probs_diff_max: max,
        k3_kl: k3 / n as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_log_probs_have_no_mismatch() {
        let a = vec![-0.5f32, -1.0, -2.0];
        let m = mismatch(&[Some(&a[..])], std::slice::from_ref(&a)).unwrap();
        assert_eq!(
            (m.probs_diff_mean, m.probs_diff_max, m.k3_kl),
            (0.0, 0.0, 0.0)
        );
    }

    #[test]
    fn figures_follow_verls_definitions() {
        let s = [-1.0f32, -0.5];
        let t = vec![-0.5f32, -0.5];
        let m = mismatch(&[Some(&s[..])], &[t]).unwrap();
        let d = (-0.5f64).exp() - (-1.0f64).exp();
        assert!((m.probs_diff_mean - d / 2.0).abs() < 1e-12);
        assert!((m.probs_diff_max - d).abs() < 1e-12);
        // r = 0.5 on the first token, 0 on the second.
        let k3 = (0.5f64.exp() - 0.5 - 1.0) / 2.0;
        assert!((m.k3_kl - k3).abs() < 1e-12);
        assert!(m.k3_kl > 0.0);
    }

    #[test]
    fn a_sample_without_sampler_log_probs_gives_none() {
        let a = vec![-0.5f32];
        assert_eq!(
            mismatch(&[Some(&a[..]), None], &[a.clone(), a.clone()]),
            None
        );
        assert_eq!(mismatch(&[], &[]), None);
        // Only the trainer's tokens count (a cut response).
        let long = [-0.5f32, -9.0];
        let m = mismatch(&[Some(&long[..])], &[a]).unwrap();
        assert_eq!(m.probs_diff_max, 0.0);
    }
}
