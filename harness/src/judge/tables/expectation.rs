//! An expression over the run judged, and whether a `fail_fast` rule can still pass.

use crate::judge::verdict::{Band, Evidence, RuleStatus, RuleVerdict};
use crate::model::checks::expr::{CmpOp, EvalIssue, Expr};
use crate::model::checks::{ChecksSpec, Expectation, RuleRef};
use crate::model::metrics::MetricTable;

pub(crate) fn judge_expectation(e: &Expectation, run: &MetricTable) -> RuleVerdict {
    let mut v = RuleVerdict {
        rule: e.id(),
        status: RuleStatus::Pass,
        evidence: Evidence::default(),
        metrics: e.expr.metrics(),
        failing_steps: vec![],
        points: vec![],
        fail_fast: e.fail_fast.then_some(true),
    };
    match e.expr.evaluate(run) {
        Err(EvalIssue::Missing(m)) => {
            v.status = RuleStatus::Missing;
            v.evidence.message = m;
        }
        Ok(ev) => {
            v.status = if ev.holds {
                RuleStatus::Pass
            } else {
                RuleStatus::Regressed
            };
            if let (Expr::Cmp(_, op, _), Some(l), Some(r)) = (&e.expr, ev.lhs, ev.rhs) {
                v.evidence.value = Some(l);
                v.evidence.band = Some(match op {
                    CmpOp::Lt | CmpOp::Le => Band {
                        lo: None,
                        hi: Some(r),
                    },
                    CmpOp::Gt | CmpOp::Ge => Band {
                        lo: Some(r),
                        hi: None,
                    },
                    CmpOp::Eq | CmpOp::Ne => Band::new(r, r),
                });
                v.evidence.margin = Some(match op {
                    CmpOp::Lt | CmpOp::Le => r - l,
                    CmpOp::Gt | CmpOp::Ge => l - r,
                    CmpOp::Eq => -(l - r).abs(),
                    CmpOp::Ne => (l - r).abs(),
                });
            }
            if let Some(s) = ev.step {
                v.evidence.step_or_window = Some(format!("step {s}"));
                if !ev.holds {
                    v.failing_steps.push(s);
                }
            }
            let verb = if ev.holds { "holds" } else { "does not hold" };
            v.evidence.message = if ev.trace.is_empty() {
                verb.to_string()
            } else {
                format!("{verb}: {}", ev.trace.join("; "))
            };
        }
    }
    v
}

/// Fail fast: can `rule` still pass when the run reaches `total_steps`, given its steps so far?
/// `false` only when the steps already seen decide the failure, so the runner may stop.
pub(super) fn can_still_pass(
    rule: RuleRef<'_>,
    golden: Option<&MetricTable>,
    partial: &MetricTable,
    total_steps: u64,
) -> bool {
    match rule {
        RuleRef::Expect(e) => e.expr.can_still_hold(partial, total_steps),
        RuleRef::Golden(metric, r) => {
            let Some(g) = golden else { return true };
            let r = &r.resolved(metric);
            let done = partial.last_step().unwrap_or(0);
            let points = r.points(metric, partial, g, Some(done));
            let count = |s: RuleStatus| points.iter().filter(|p| p.status == s).count() as u64;
            count(RuleStatus::Regressed) <= r.budget && count(RuleStatus::Improved) <= r.budget
        }
    }
}

/// The first rule marked `fail_fast` that can no longer pass, if any: the runner's stop signal.
pub(crate) fn first_settled_failure(
    checks: &ChecksSpec,
    golden: Option<&MetricTable>,
    partial: &MetricTable,
    total_steps: u64,
) -> Option<String> {
    checks
        .rules()
        .into_iter()
        .filter(|r| r.fail_fast())
        .find(|r| !can_still_pass(*r, golden, partial, total_steps))
        .map(|r| r.id())
}
