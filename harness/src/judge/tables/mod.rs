//! Judging: golden rules point by point, expressions over the run, the overall outcome, and
//! the strict match against a scenario's expected verdict.
//!
//! `golden_rule` judges a golden rule point by point, `expectation` an expression over the run,
//! `expected` matches the result against `expected_verdict`.

mod expectation;
mod expected;
mod golden_rule;

pub(crate) use expectation::{first_settled_failure, judge_expectation};
pub(crate) use expected::{match_expected, ExpectedMismatch};
use golden_rule::judge_golden_rule;
pub(crate) use golden_rule::DEFAULT_IMPROVEMENT_FACTOR;

use super::verdict::{Evidence, RuleStatus, RuleVerdict};
use crate::model::checks::{ChecksSpec, GoldenRule};
use crate::model::metrics::MetricTable;

/// One golden rule judged against the reference series, or `missing` without one.
pub(crate) fn judge_golden(
    metric: &str,
    rule: &GoldenRule,
    run: &MetricTable,
    golden: Option<&MetricTable>,
) -> RuleVerdict {
    match golden {
        Some(g) => judge_golden_rule(metric, rule, run, g),
        None => RuleVerdict {
            rule: format!("golden:{metric}"),
            status: RuleStatus::Missing,
            evidence: Evidence {
                message: "no golden for this scenario and hardware yet".into(),
                ..Evidence::default()
            },
            metrics: vec![metric.to_string()],
            failing_steps: vec![],
            points: vec![],
            fail_fast: rule.fail_fast.then_some(true),
        },
    }
}

/// How the run's steps and the reference's differ, when golden rules compare them.
pub(crate) fn grid_mismatch_of(
    run: &MetricTable,
    golden: Option<&MetricTable>,
    checks: &ChecksSpec,
) -> Option<String> {
    match golden {
        Some(g) if !checks.golden.is_empty() => grid_mismatch(run, g),
        _ => None,
    }
}

/// `1..5, 7, 9..10`: step lists stay readable in messages.
pub(crate) fn ranges(steps: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            steps[i].to_string()
        } else {
            format!("{}..{}", steps[i], steps[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

fn grid_mismatch(run: &MetricTable, golden: &MetricTable) -> Option<String> {
    let (r, g) = (run.steps(), golden.steps());
    if r == g {
        return None;
    }
    let only_g: Vec<u64> = g.iter().copied().filter(|s| !r.contains(s)).collect();
    let only_r: Vec<u64> = r.iter().copied().filter(|s| !g.contains(s)).collect();
    let mut msg = format!(
        "the golden has {} steps ({}), the run has {} ({})",
        g.len(),
        ranges(&g),
        r.len(),
        ranges(&r)
    );
    if !only_g.is_empty() {
        msg.push_str(&format!("; not in the run: {}", ranges(&only_g)));
    }
    if !only_r.is_empty() {
        msg.push_str(&format!("; not in the golden: {}", ranges(&only_r)));
    }
    msg.push_str("; rules compare the common steps");
    Some(msg)
}

#[cfg(test)]
mod expected_tests;
#[cfg(test)]
mod tests;
