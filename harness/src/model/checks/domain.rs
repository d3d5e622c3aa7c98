//! What values a metric can take, by its name (verl's and the harness's metric names): the
//! lint of rules that cannot fail (`rlharness check`) and the default stability rules read it.

/// Metrics that are a fraction of a peak, so a value outside (0, 1] cannot be true.
pub(crate) const FRACTION_METRICS: &[&str] = &["perf/mfu/actor"];

/// Whether the runner must keep `value` of `metric` out of the series (and the judge fail
/// `sanity:0 < {metric} <= 1` on it): a fraction of a peak outside (0, 1], NaN included.
pub(crate) fn is_insane(metric: &str, value: f64) -> bool {
    FRACTION_METRICS.contains(&metric) && !(value > 0.0 && value <= 1.0)
}

/// The values a metric can take: `(lowest, highest)`. Unknown metrics (a reward, a loss, an
/// advantage) may take any value.
pub(crate) fn domain(metric: &str) -> (f64, f64) {
    let m = metric.to_ascii_lowercase();
    if m.contains("mfu")
        || m.contains("acc")
        || m.contains("clipfrac")
        || m.starts_with("weight_sync/")
    {
        (0.0, 1.0)
    } else if positive(metric)
        || m.contains("length")
        || m.ends_with("/lr")
        || m.starts_with("timing")
        || m.starts_with("perf/")
    {
        (0.0, f64::INFINITY)
    } else {
        (f64::NEG_INFINITY, f64::INFINITY)
    }
}

/// Metrics that are above 0 at every healthy step: at 0 the thing they measure stopped (no
/// gradient, a policy collapsed to one token, no tokens made).
pub(crate) fn positive(metric: &str) -> bool {
    let m = metric.to_ascii_lowercase();
    m.ends_with("entropy")
        || m.ends_with("grad_norm")
        || m.contains("throughput")
        || m.starts_with("timing_s/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_of_verl_metrics() {
        assert_eq!(domain("perf/mfu/actor"), (0.0, 1.0));
        assert_eq!(domain("val-core/openai/gsm8k/acc/mean@1"), (0.0, 1.0));
        assert_eq!(domain("actor/grad_norm"), (0.0, f64::INFINITY));
        assert_eq!(domain("response_length/mean"), (0.0, f64::INFINITY));
        assert_eq!(domain("actor/lr"), (0.0, f64::INFINITY));
        assert_eq!(
            domain("critic/rewards/mean"),
            (f64::NEG_INFINITY, f64::INFINITY)
        );
        assert!(positive("actor/entropy") && positive("actor/grad_norm"));
        assert!(!positive("actor/ppo_kl") && !positive("critic/rewards/mean"));
    }
}
