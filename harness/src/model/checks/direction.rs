//! Which way a metric is allowed to move, by default: the one table of default directions.
//!
//! A golden rule without `direction:` takes its metric's default from here, so a reward that
//! drops, a step that slows or a memory peak that grows fails on its bad side, while a move
//! of the same size the good way is reported "improved beyond the limit, bless if real"
//! (see `ImprovementLimit`) instead of passing silently. An explicit `direction:` in the
//! scenario always wins. Metrics whose good side is unknown or depends on the run (losses,
//! entropy, KL, grad norm, learning rate, lengths) stay two-sided.

use super::{Direction, GoldenRule};

/// How a table entry matches a metric name (case-insensitive).
#[derive(Debug, Clone, Copy)]
enum Pattern {
    Prefix(&'static str),
    Contains(&'static str),
}

impl Pattern {
    fn matches(self, metric: &str) -> bool {
        match self {
            Pattern::Prefix(p) => metric.starts_with(p),
            Pattern::Contains(p) => metric.contains(p),
        }
    }
}

/// The default directions, first match wins. The two-sided entries come first: a name such
/// as `actor/reward_kl_penalty` or `critic/score_loss` is a penalty or a loss, not a reward.
const DEFAULT_DIRECTIONS: &[(Pattern, Direction)] = &[
    (Pattern::Contains("loss"), Direction::TwoSided),
    (Pattern::Contains("kl"), Direction::TwoSided),
    (Pattern::Contains("penalty"), Direction::TwoSided),
    (Pattern::Contains("entropy"), Direction::TwoSided),
    (Pattern::Contains("grad_norm"), Direction::TwoSided),
    (Pattern::Contains("clipfrac"), Direction::TwoSided),
    (Pattern::Prefix("timing_s/"), Direction::LowerIsBetter),
    (Pattern::Prefix("timing/"), Direction::LowerIsBetter),
    (Pattern::Contains("memory"), Direction::LowerIsBetter),
    (Pattern::Prefix("perf/mfu"), Direction::HigherIsBetter),
    // 1 when a weight sync left the sampler with the trainer's weights bit for bit.
    (Pattern::Prefix("weight_sync/"), Direction::HigherIsBetter),
    (Pattern::Contains("throughput"), Direction::HigherIsBetter),
    (Pattern::Contains("reward"), Direction::HigherIsBetter),
    (Pattern::Contains("score"), Direction::HigherIsBetter),
    (Pattern::Contains("/acc"), Direction::HigherIsBetter),
    (Pattern::Contains("accuracy"), Direction::HigherIsBetter),
];

/// The direction a metric has when its rule does not say: higher is better for rewards,
/// scores and accuracies, MFU and throughput; lower is better for step times (`timing_s/*`)
/// and memory; two-sided for everything else.
pub(crate) fn default_direction(metric: &str) -> Direction {
    let m = metric.to_ascii_lowercase();
    DEFAULT_DIRECTIONS
        .iter()
        .find(|(p, _)| p.matches(&m))
        .map_or(Direction::TwoSided, |(_, d)| *d)
}

impl GoldenRule {
    /// The rule as it is judged for `metric`: its direction made explicit (the scenario's, or
    /// the metric's default).
    pub(crate) fn resolved(&self, metric: &str) -> GoldenRule {
        let mut r = self.clone();
        r.direction = Some(r.direction.unwrap_or_else(|| default_direction(metric)));
        r
    }

    /// The direction in force (two-sided when none was resolved or written).
    pub(crate) fn direction(&self) -> Direction {
        self.direction.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table() {
        use Direction::*;
        for (metric, want) in [
            ("critic/rewards/mean", HigherIsBetter),
            ("critic/score/mean", HigherIsBetter),
            ("val-core/openai/gsm8k/acc/mean@1", HigherIsBetter),
            ("val-core/openai/gsm8k/reward/mean@1", HigherIsBetter),
            ("perf/mfu/actor", HigherIsBetter),
            ("perf/throughput", HigherIsBetter),
            ("timing_s/step", LowerIsBetter),
            ("timing_s/gen", LowerIsBetter),
            ("perf/max_memory_allocated_gb", LowerIsBetter),
            ("perf/max_memory_reserved_gb", LowerIsBetter),
            ("actor/pg_loss", TwoSided),
            ("actor/kl_loss", TwoSided),
            ("actor/reward_kl_penalty", TwoSided),
            ("actor/entropy", TwoSided),
            ("actor/grad_norm", TwoSided),
            ("actor/pg_clipfrac", TwoSided),
            ("actor/lr", TwoSided),
            ("response_length/mean", TwoSided),
        ] {
            assert_eq!(default_direction(metric), want, "{metric}");
        }
    }

    #[test]
    fn an_explicit_direction_overrides_the_default() {
        let r: GoldenRule = serde_json::from_str(r#"{"abs": 0.1}"#).unwrap();
        assert_eq!(
            r.resolved("critic/rewards/mean").direction(),
            Direction::HigherIsBetter
        );
        assert_eq!(r.resolved("actor/entropy").direction(), Direction::TwoSided);
        let r: GoldenRule =
            serde_json::from_str(r#"{"abs": 0.1, "direction": "two_sided"}"#).unwrap();
        assert_eq!(
            r.resolved("critic/rewards/mean").direction(),
            Direction::TwoSided
        );
        let r: GoldenRule =
            serde_json::from_str(r#"{"abs": 0.1, "direction": "lower_is_better"}"#).unwrap();
        assert_eq!(
            r.resolved("actor/entropy").direction(),
            Direction::LowerIsBetter
        );
    }
}
