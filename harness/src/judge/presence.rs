//! Presence: every metric the golden lists must be in the run at every golden step the run
//! reached, unless the scenario says otherwise (`checks.allow_missing`).
//!
//! Without this a metric no rule names could vanish from a run (a logger renamed, a backend
//! that stopped reporting it), or appear at 1 step of 20, and the run would still pass. A
//! value that is present but non-finite counts as present: the rules on it judge its value.
//! Steps the run never reached are the grid mismatch's business, not presence's.

use super::tables::ranges;
use super::verdict::{Evidence, RuleStatus, RuleVerdict};
use crate::model::checks::ChecksSpec;
use crate::model::metrics::MetricTable;

/// The rule id of a metric's presence check.
pub(crate) fn presence_rule_id(metric: &str) -> String {
    format!("presence:{metric}")
}

/// One failing rule per golden metric absent from the run at some golden step the run has;
/// nothing when every metric is present (or allowed to be missing).
pub(crate) fn judge_presence(
    run: &MetricTable,
    golden: &MetricTable,
    checks: &ChecksSpec,
) -> Vec<RuleVerdict> {
    let run_steps = run.steps();
    let steps: Vec<u64> = golden
        .steps()
        .into_iter()
        .filter(|s| run_steps.binary_search(s).is_ok())
        .collect();
    if steps.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for metric in golden.columns() {
        if checks.allow_missing.contains(&metric) {
            continue;
        }
        let golden_steps: Vec<u64> = golden
            .series(&metric)
            .into_iter()
            .map(|(s, _)| s)
            .filter(|s| steps.binary_search(s).is_ok())
            .collect();
        if golden_steps.is_empty() {
            continue;
        }
        let missing: Vec<u64> = golden_steps
            .iter()
            .copied()
            .filter(|s| run.row(*s).is_none_or(|r| r.get(&metric).is_none()))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let present = golden_steps.len() - missing.len();
        let message = if present == 0 {
            format!(
                "`{metric}` is in the golden but missing from the run at all {} golden steps \
                 ({}); list it in `checks.allow_missing` if that is intended",
                golden_steps.len(),
                ranges(&missing)
            )
        } else {
            format!(
                "`{metric}` is present at {present} of {} golden steps; missing at steps {}; \
                 list it in `checks.allow_missing` if that is intended",
                golden_steps.len(),
                ranges(&missing)
            )
        };
        out.push(RuleVerdict {
            rule: presence_rule_id(&metric),
            status: RuleStatus::Missing,
            evidence: Evidence {
                step_or_window: Some(format!("step {}", missing[0])),
                value: Some(present as f64),
                message,
                ..Evidence::default()
            },
            metrics: vec![metric.clone()],
            failing_steps: missing,
            points: Vec::new(),
            fail_fast: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::metrics::StepMetrics;

    fn table(cols: &[(&str, &[u64])], steps: u64) -> MetricTable {
        let mut t = MetricTable::new();
        for s in 1..=steps {
            let mut m = StepMetrics::new(s);
            for (name, at) in cols {
                if at.contains(&s) {
                    m.insert(*name, 1.0);
                }
            }
            t.push(m);
        }
        t
    }

    #[test]
    fn a_vanished_or_sparse_metric_fails_naming_the_missing_steps() {
        let all: Vec<u64> = (1..=20).collect();
        let golden = table(&[("a", &all), ("b", &all), ("c", &all)], 20);
        // `b` vanished, `c` is present at 1 step of 20.
        let run = table(&[("a", &all), ("c", &[1])], 20);
        let v = judge_presence(&run, &golden, &ChecksSpec::default());
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0].rule, "presence:b");
        assert_eq!(v[0].status, RuleStatus::Missing);
        assert!(
            v[0].evidence
                .message
                .contains("missing from the run at all 20 golden steps (1..20)"),
            "{}",
            v[0].evidence.message
        );
        assert_eq!(v[1].rule, "presence:c");
        assert_eq!(v[1].failing_steps, (2..=20).collect::<Vec<_>>());
        assert!(
            v[1].evidence.message.contains("present at 1 of 20")
                && v[1].evidence.message.contains("missing at steps 2..20"),
            "{}",
            v[1].evidence.message
        );
        // A complete run has no presence rule at all.
        assert!(judge_presence(&golden, &golden, &ChecksSpec::default()).is_empty());
    }

    #[test]
    fn allow_missing_and_unreached_steps_are_not_failures() {
        let all: Vec<u64> = (1..=20).collect();
        let golden = table(&[("a", &all), ("b", &all)], 20);
        let run = table(&[("a", &all)], 20);
        let c: ChecksSpec = serde_json::from_str(r#"{"allow_missing": ["b"]}"#).unwrap();
        assert!(judge_presence(&run, &golden, &c).is_empty());
        // A run stopped at step 5 is judged on its 5 steps (the grid mismatch says the rest).
        let short = table(&[("a", &all), ("b", &all)], 5);
        assert!(judge_presence(&short, &golden, &ChecksSpec::default()).is_empty());
    }
}
