//! The rules a run's own record decides, beside its series: sanity (values the runner dropped
//! as insane), the replay's account of its requests, and the watchdog's stop.

use super::RunRecord;
use crate::judge::verdict::{Evidence, RuleStatus, RuleVerdict};
use crate::model::golden::Golden;
use crate::model::metrics::{MetricTable, StepMetrics};
use crate::model::rundir::{DroppedValue, ReplayRecord, RunStatus};

/// The rule id of a replay.
pub const REPLAY_RULE: &str = "replay:requests match the cassette";

/// The series with the dropped values put back: what expectations read.
pub(super) fn with_dropped(metrics: &MetricTable, dropped: &[DroppedValue]) -> MetricTable {
    let mut rows: Vec<StepMetrics> = metrics.rows().to_vec();
    for d in dropped {
        match rows.iter_mut().find(|r| r.step == d.step) {
            Some(r) => r.insert(d.metric.clone(), d.value()),
            None => {
                let mut m = StepMetrics::new(d.step);
                m.insert(d.metric.clone(), d.value());
                rows.push(m);
            }
        }
    }
    rows.sort_by_key(|r| r.step);
    let mut t = MetricTable::new();
    for r in rows {
        t.push(r);
    }
    t
}

/// `sanity:0 < {metric} <= 1`, failed once per dropped value.
pub(super) fn sanity_rules(run: &RunRecord<'_>, _: Option<&Golden>) -> Vec<RuleVerdict> {
    run.dropped.iter().map(sanity_rule).collect()
}

fn sanity_rule(d: &DroppedValue) -> RuleVerdict {
    let (step, metric, value) = (d.step, &d.metric, d.value());
    RuleVerdict {
        rule: format!("sanity:0 < {metric} <= 1"),
        status: RuleStatus::Regressed,
        evidence: Evidence {
            step_or_window: Some(format!("step {step}")),
            value: Some(value),
            message: format!(
                "{metric} = {value} at step {step} is outside (0, 1]; dropped from the series"
            ),
            ..Evidence::default()
        },
        metrics: vec![metric.clone()],
        failing_steps: vec![step],
        points: Vec::new(),
        fail_fast: None,
    }
}

/// The verdict's rule for a replay: passes when every request matched the cassette.
pub(crate) fn replay_rule(replay: &ReplayRecord) -> RuleVerdict {
    RuleVerdict {
        rule: REPLAY_RULE.to_string(),
        status: if replay.passed() {
            RuleStatus::Pass
        } else {
            RuleStatus::Regressed
        },
        evidence: Evidence {
            value: Some(replay.mismatches.len() as f64),
            message: replay.summary(),
            ..Evidence::default()
        },
        metrics: Vec::new(),
        failing_steps: Vec::new(),
        points: Vec::new(),
        fail_fast: None,
    }
}

/// The rule id of the watchdog's verdict on a run it stopped.
fn watchdog_rule_id(status: RunStatus) -> String {
    format!("watchdog:{}", status.as_str())
}

/// `watchdog:<status>` for a run the watchdog stopped.
pub(super) fn watchdog_rule(run: &RunRecord<'_>) -> Option<RuleVerdict> {
    if !matches!(run.status, RunStatus::Aborted | RunStatus::TimedOut) {
        return None;
    }
    let reason = run.reason.unwrap_or("stopped by the watchdog");
    Some(RuleVerdict {
        rule: watchdog_rule_id(run.status),
        status: RuleStatus::Regressed,
        evidence: Evidence {
            step_or_window: run.failed_step.map(|s| format!("step {s}")),
            message: format!(
                "the run was stopped at step {}: {reason}",
                run.failed_step
                    .map_or_else(|| "?".to_string(), |s| s.to_string())
            ),
            ..Evidence::default()
        },
        metrics: Vec::new(),
        failing_steps: run.failed_step.into_iter().collect(),
        points: Vec::new(),
        fail_fast: None,
    })
}

#[cfg(test)]
mod tests {
    use crate::model::checks::domain::is_insane;

    #[test]
    fn an_mfu_outside_zero_one_is_insane() {
        for v in [0.0, -0.1, 1.0001, 7.0, f64::NAN, f64::INFINITY] {
            assert!(is_insane("perf/mfu/actor", v), "{v}");
        }
        for v in [1e-9, 0.25, 1.0] {
            assert!(!is_insane("perf/mfu/actor", v), "{v}");
        }
        // Other metrics are not fractions of a peak.
        assert!(!is_insane("perf/throughput", 5000.0));
    }
}
