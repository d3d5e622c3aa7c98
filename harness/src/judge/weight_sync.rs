//! `weight_sync:match`, a default rule of a learning scenario with a sampler: after every
//! weight sync the sampler holds the trainer's weights bit for bit. The builtin driver checks
//! each sync with the backend's weight digests (`/weight-digest`) and logs `weight_sync/match`
//! (1 or 0); the rule fails at the first step whose sync did not match, and its evidence names
//! that step and the first tensor that differs (dtype, shape and SHA-256 on both sides, from
//! `run.json`'s `weight_sync`).
//!
//! Where the stability rules on the sampler-vs-trainer mismatch see a change only once it moves
//! a window's median past a floor (a sampler of 10 mantissa bits, two stale steps of five pass
//! them), this one has no threshold: one bit of one weight fails it. It judges against nothing
//! but the run itself, so it holds on any host and needs no golden. The mismatch rules stay,
//! for what a digest cannot see (a sampler that holds the right weights and computes with them
//! differently).
//!
//! It is on where the default stability rules are (`checks.stability`, by default for a
//! scenario tagged `convergence`) and the run logged the metric: not for a backend without the
//! route (a real Arctic server) nor a command trainer, whose runs hold no such series.

use super::verdict::{Evidence, RuleStatus, RuleVerdict};
use crate::model::checks::expr::fmt_num;
use crate::model::checks::ChecksSpec;
use crate::model::metrics::MetricTable;
use crate::model::rundir::WeightSyncRecord;

/// The rule's id.
pub(crate) const RULE: &str = "weight_sync:match";
/// The series it judges (`driver::builtin::digest`).
pub(crate) const METRIC: &str = "weight_sync/match";

/// What the evidence adds: that it is a default, and how to turn it off.
const NOTE: &str = "a default rule of a learning scenario: the weight digests of both jobs \
                    after each sync (`/weight-digest`), equal bit for bit; `checks.stability: \
                    false` turns it off";

/// The rule for a run of these `checks`, series and `run.json` record, or `None` where it is
/// off or the run has no such series.
pub(crate) fn rule(
    checks: &ChecksSpec,
    metrics: &MetricTable,
    record: Option<&WeightSyncRecord>,
) -> Option<RuleVerdict> {
    if checks.stability != Some(true) {
        return None;
    }
    let series = metrics.series(METRIC);
    if series.is_empty() {
        return None;
    }
    let failing: Vec<(u64, f64)> = series.iter().copied().filter(|(_, v)| *v != 1.0).collect();
    let mut v = RuleVerdict {
        rule: RULE.to_string(),
        status: RuleStatus::Pass,
        evidence: Evidence::default(),
        metrics: vec![METRIC.to_string()],
        failing_steps: failing.iter().map(|(s, _)| *s).collect(),
        points: Vec::new(),
        fail_fast: None,
    };
    let Some(&(step, value)) = failing.first() else {
        v.evidence = Evidence {
            value: Some(1.0),
            message: format!(
                "the sampler held the trainer's weights bit for bit after each of the {} weight \
                 syncs checked; {NOTE}",
                series.len()
            ),
            ..Evidence::default()
        };
        return Some(v);
    };
    let what = match record.and_then(|w| w.at(step)) {
        Some(m) => match &m.first {
            Some(first) => format!(
                "{} of {} tensors differ, the first {}",
                m.differing,
                m.tensors,
                first.describe()
            ),
            None => format!("{} of {} tensors differ", m.differing, m.tensors),
        },
        None => "run.json records no tensor of it".to_string(),
    };
    let steps = if failing.len() == 1 {
        format!("only step {step}")
    } else {
        format!(
            "{} of the {} syncs checked: steps {}",
            failing.len(),
            series.len(),
            super::tables::ranges(&v.failing_steps)
        )
    };
    v.status = RuleStatus::Regressed;
    v.evidence = Evidence {
        step_or_window: Some(format!("step {step}")),
        value: Some(value),
        message: format!(
            "after the weight sync of step {step} the sampler does not hold the trainer's weights \
             (`{METRIC}` = {}): {what}; mismatched at {steps}; {NOTE}",
            fmt_num(value)
        ),
        ..Evidence::default()
    };
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::events::WeightSyncCheck;
    use crate::model::metrics::StepMetrics;
    use rlharness_arctic::wire::digest::{SyncComparison, TensorDifference, TensorDigest};

    fn series(values: &[f64]) -> MetricTable {
        let mut t = MetricTable::new();
        for (i, v) in values.iter().enumerate() {
            let mut m = StepMetrics::new(i as u64 + 1);
            m.insert(METRIC, *v);
            m.insert("critic/rewards/mean", 0.5);
            t.push(m);
        }
        t
    }

    fn learning() -> ChecksSpec {
        serde_json::from_str(r#"{"stability": true}"#).unwrap()
    }

    fn digest(sha: &str) -> TensorDigest {
        TensorDigest {
            name: "model.embed_tokens.weight".into(),
            dtype: "F32".into(),
            shape: vec![32, 64],
            numel: 2048,
            sha256: sha.repeat(64 / sha.len()),
        }
    }

    /// A record of syncs that mismatched at `steps`, 3 of 20 tensors each.
    fn record(steps: &[u64]) -> WeightSyncRecord {
        let mut r = WeightSyncRecord::default();
        for &step in steps {
            r.add(WeightSyncCheck::Checked {
                step,
                comparison: Box::new(SyncComparison {
                    tensors: 20,
                    differing: 3,
                    first: Some(TensorDifference {
                        name: "model.embed_tokens.weight".into(),
                        training: Some(digest("ab")),
                        sampling: Some(digest("cd")),
                    }),
                }),
            });
        }
        r
    }

    fn judged(
        values: &[f64],
        checks: &ChecksSpec,
        rec: Option<&WeightSyncRecord>,
    ) -> Option<RuleVerdict> {
        rule(checks, &series(values), rec)
    }

    #[test]
    fn every_sync_matched_passes() {
        let v = judged(&[1.0; 5], &learning(), None).unwrap();
        assert_eq!((v.rule.as_str(), v.status), (RULE, RuleStatus::Pass));
        assert!(v.failing_steps.is_empty());
        assert!(
            v.evidence.message.contains("each of the 5 weight syncs"),
            "{}",
            v.evidence.message
        );
    }

    #[test]
    fn the_first_mismatched_step_fails_and_its_first_tensor_is_named() {
        let rec = record(&[2, 3, 5]);
        let v = judged(&[1.0, 0.0, 0.0, 1.0, 0.0], &learning(), Some(&rec)).unwrap();
        assert_eq!(v.status, RuleStatus::Regressed);
        assert_eq!(v.failing_steps, [2, 3, 5]);
        assert_eq!(v.evidence.step_or_window.as_deref(), Some("step 2"));
        assert_eq!(v.evidence.value, Some(0.0));
        let m = &v.evidence.message;
        assert!(
            m.starts_with("after the weight sync of step 2 the sampler does not hold"),
            "{m}"
        );
        assert!(m.contains("3 of 20 tensors differ, the first `model.embed_tokens.weight`: training F32 [32, 64] sha256 abababababab, sampling F32 [32, 64] sha256 cdcdcdcdcdcd"), "{m}");
        assert!(m.contains("3 of the 5 syncs checked: steps 2..3, 5"), "{m}");
        assert_eq!(v.metrics, [METRIC]);
    }

    #[test]
    fn a_mismatch_without_its_record_still_fails() {
        let v = judged(&[0.0, 1.0], &learning(), None).unwrap();
        assert_eq!(v.status, RuleStatus::Regressed);
        assert!(
            v.evidence.message.contains("run.json records no tensor"),
            "{}",
            v.evidence.message
        );
        assert!(
            v.evidence.message.contains("only step 1"),
            "{}",
            v.evidence.message
        );
        // Not a number is no match either.
        let v = judged(&[1.0, f64::NAN], &learning(), None).unwrap();
        assert_eq!(v.failing_steps, [2]);
    }

    #[test]
    fn off_outside_learning_scenarios_and_without_the_series() {
        assert!(judged(&[0.0], &ChecksSpec::default(), None).is_none());
        let off: ChecksSpec = serde_json::from_str(r#"{"stability": false}"#).unwrap();
        assert!(judged(&[0.0], &off, None).is_none());
        // A backend without `/weight-digest` logs no series: no rule.
        let mut t = MetricTable::new();
        let mut m = StepMetrics::new(1);
        m.insert("critic/rewards/mean", 0.5);
        t.push(m);
        assert!(rule(&learning(), &t, None).is_none());
    }

    #[test]
    fn the_record_keeps_only_the_mismatches_and_says_why_none_were_checked() {
        let mut r = record(&[4]);
        r.add(WeightSyncCheck::Checked {
            step: 5,
            comparison: Box::new(SyncComparison {
                tensors: 20,
                differing: 0,
                first: None,
            }),
        });
        assert_eq!((r.checked, r.mismatches.len()), (2, 1));
        assert!(r.at(4).is_some() && r.at(5).is_none());
        let mut none = WeightSyncRecord::default();
        for why in ["no route", "said twice"] {
            none.add(WeightSyncCheck::Unavailable { reason: why.into() });
        }
        assert_eq!(
            (none.checked, none.unavailable.as_deref()),
            (0, Some("no route"))
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(serde_json::from_value::<WeightSyncRecord>(json).unwrap(), r);
    }
}
