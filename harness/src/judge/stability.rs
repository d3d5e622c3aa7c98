//! Stability rules by default. A learning scenario (tagged `convergence`, or `checks.stability:
//! true`) gets a two-sided rule on each stability metric its golden holds and its author did not
//! name: the policy's entropy, the gradient norm, the KL between the sampling and the updated
//! policy, and the mismatch between the sampler's and the trainer's log-probabilities of the
//! same tokens. An entropy driven to collapse while the reward still looks fine, a gradient norm ten
//! times larger, a KL that is no longer zero on-policy: each is a regression whether or not the
//! scenario's author thought of it.
//!
//! The rule ids are `stability:<metric>`. Each compares the medians of windows of [`WINDOW`]
//! steps (one spike in a healthy run does not move a median; a regression moves it). Its band
//! comes from the golden's calibration when it measured the metric (k [`K`] × σ of the window
//! means over the calibration runs, never narrower than the metric's floor), otherwise it is
//! hand-set: ± [`REL`] of the golden's window mean, never narrower than the floor. The floors
//! are absolute, for metrics whose golden may be 0 (an on-policy KL is exactly 0).

use crate::model::checks::{
    Calibrated, ChecksSpec, Direction, GoldenRule, GoldenRules, ImprovementLimit,
};

/// The stability metrics (verl's names) and each one's absolute floor.
pub(crate) const METRICS: &[(&str, f64)] = &[
    ("actor/entropy", 0.02),
    ("actor/grad_norm", 0.0),
    ("actor/ppo_kl", 0.01),
    ("actor/kl_loss", 0.01),
    // The sampler-vs-trainer mismatch (`driver::mismatch`): numerical noise when the sampler
    // holds the trainer's weights; a skipped weight sync or a sampler in bf16 opens it past
    // these floors from its first affected step (docs/verdicts.md, "Sampler-vs-trainer
    // mismatch").
    ("training/rollout_probs_diff_mean", 1e-5),
    ("rollout_corr/k3_kl", 1e-8),
    // The engine's peak memory over a step (the CPU torch engine's peak resident set): judged
    // one-sided, see [`ONE_SIDED`].
    ("perf/max_memory_allocated_gb", 0.05),
];

/// Stability metrics judged on one side only: more is the regression, less is never flagged
/// (a step that needs less memory is not too good to be true).
pub(crate) const ONE_SIDED: &[&str] = &["perf/max_memory_allocated_gb"];

/// A stability band of a metric that is positive in a healthy run never reaches below this
/// fraction of the golden's window median: a vanished gradient or a collapsed entropy fails
/// even where the calibration's noise would put the edge at or below 0.
pub(crate) const KEEP_ABOVE: f64 = 0.1;

/// Stability metrics judged on the log scale: positive and heavy-tailed (a gradient norm's
/// window median over seeds spans a factor of 10 in a healthy real-verl run), so a band in
/// linear units is too narrow above and reaches through 0 below; on the log scale it is a
/// factor either way.
pub(crate) const LOG_SCALE: &[&str] = &["actor/grad_norm"];

/// Steps per compared window.
pub(crate) const WINDOW: u64 = 5;
/// The hand-set band without a calibration: ± this fraction of the golden's window mean.
pub(crate) const REL: f64 = 0.4;

/// The rule id of a default stability rule.
pub(crate) fn rule_id(metric: &str) -> String {
    format!("stability:{metric}")
}

#[cfg(test)]
use crate::model::checks::stability_enabled_for as enabled_for;

/// The default stability rules of `checks` over a golden with these `columns`: calibrated
/// where `calibrated(metric)` (the golden's calibration measured it), hand-set elsewhere.
/// Empty when the scenario has them off.
pub(crate) fn rules(
    checks: &ChecksSpec,
    columns: &[String],
    calibrated: impl Fn(&str) -> bool,
) -> GoldenRules {
    if checks.stability != Some(true) {
        return GoldenRules::default();
    }
    GoldenRules(
        METRICS
            .iter()
            .filter(|(m, _)| columns.iter().any(|c| c == m))
            .filter(|(m, _)| checks.golden.get(m).is_none())
            .map(|(m, floor)| {
                let one_sided = ONE_SIDED.contains(m);
                let rule = GoldenRule {
                    window: Some(WINDOW),
                    direction: Some(if one_sided {
                        Direction::LowerIsBetter
                    } else {
                        Direction::TwoSided
                    }),
                    improvement_limit: one_sided.then_some(ImprovementLimit::Unlimited),
                    // A gradient-norm spike at one step of a healthy run is common; a
                    // regression moves the whole window.
                    median: true,
                    keep_above: crate::model::checks::domain::positive(m).then_some(KEEP_ABOVE),
                    ..GoldenRule::default()
                };
                // Peak memory is a resource of the host's allocator, not a seed's noise: its
                // band stays hand-set (+40 %) even where a calibration measured it, so a
                // calibration on one machine does not hold another to that machine's bytes.
                let rule = if calibrated(m) && !one_sided {
                    GoldenRule {
                        calibrated: Some(Calibrated {
                            k: None,
                            floor: *floor,
                            log: LOG_SCALE.contains(m),
                        }),
                        ..rule
                    }
                } else {
                    GoldenRule {
                        abs: Some(*floor),
                        rel: Some(REL),
                        ..rule
                    }
                };
                (m.to_string(), rule)
            })
            .collect(),
    )
}

/// What a stability rule's evidence adds: that it is a default, and how to change it.
pub(crate) fn note(calibrated: bool) -> String {
    format!(
        "a default stability rule of a learning scenario (medians of windows of {WINDOW} steps, two-sided \
         (peak memory: only an increase fails), \
         {}, the lower edge of a positive metric never under {KEEP_ABOVE} × the golden; name the metric in `checks.golden` to set your own, or `checks.stability: false`)",
        if calibrated {
            "k × the calibration's σ, k sized by the run's false-alarm budget (the gradient norm \
             on the log scale)"
                .to_string()
        } else {
            format!("± {}% of the golden, no calibration of it", REL * 100.0)
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(json: &str) -> ChecksSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn peak_memory_is_judged_on_one_side() {
        let cols = vec!["perf/max_memory_allocated_gb".to_string()];
        let on = checks(r#"{"stability": true}"#);
        let r = rules(&on, &cols, |_| false);
        let (_, rule) = &r.0[0];
        assert_eq!(rule.direction, Some(Direction::LowerIsBetter));
        assert_eq!(rule.improvement_limit, Some(ImprovementLimit::Unlimited));
        // Half the memory passes; 1.5 times the golden's fails.
        let band = rule.band(2.0);
        assert!(band.lo.is_some_and(|lo| lo < 0.0) || band.lo.is_none());
        assert_eq!(band.hi, Some(2.0 + 2.0 * REL));
        // A calibration that measured it changes nothing: the band stays hand-set.
        let r = rules(&on, &cols, |_| true);
        assert_eq!(r.0[0].1.calibrated, None);
        assert_eq!(r.0[0].1.rel, Some(REL));
    }

    #[test]
    fn only_for_learning_scenarios_and_only_unnamed_metrics() {
        let cols: Vec<String> = ["actor/entropy", "actor/grad_norm", "critic/rewards/mean"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(rules(&checks("{}"), &cols, |_| false).is_empty());
        let on = checks(r#"{"stability": true, "golden": {"actor/grad_norm": {"rel": 0.1}}}"#);
        let r = rules(&on, &cols, |_| false);
        assert_eq!(r.0.len(), 1, "{r:?}");
        let (m, rule) = &r.0[0];
        assert_eq!(m, "actor/entropy");
        assert_eq!(
            (rule.abs, rule.rel, rule.window),
            (Some(0.02), Some(REL), Some(WINDOW))
        );
        let c = rules(&on, &cols, |_| true);
        assert_eq!(
            c.0[0].1.calibrated,
            Some(Calibrated {
                k: None,
                floor: 0.02,
                log: false
            })
        );
        assert!(enabled_for(None, &["convergence".into()]));
        assert!(!enabled_for(Some(false), &["convergence".into()]));
        assert!(!enabled_for(None, &["smoke".into()]));
    }
}
