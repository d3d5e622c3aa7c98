//! Rule shapes that cannot fail whatever the run and the golden (`rlharness check` refuses
//! them at the rule's line), and whether an expectation holds for every value its metrics can
//! take, by interval arithmetic over the metrics' domains.

use std::path::Path;

use super::error::SpecError;
use super::located::{error_at, fmt, line_of};
use crate::model::checks::domain::{domain, positive};
use crate::model::checks::expr::{AggFn, ArithOp, CmpOp, Expr, Num, Pred};
use crate::model::checks::ChecksSpec;

/// The rule shapes that cannot fail whatever the run and the golden, for every scenario (with a
/// golden or without, self-tests included), at the rule's line: a budget as large as the rule's
/// windows; a positive metric whose band reaches 0 on its bad side (`rel` >= 1 without
/// `keep_above`); a direction written against the metric's own with an unlimited good side (a
/// regression reads as an unlimited improvement); an expectation true for every value its
/// metrics can take.
pub(crate) fn lint_shapes(file: &Path, checks: &ChecksSpec, steps: u64) -> Vec<SpecError> {
    use crate::model::checks::{Direction, ImprovementLimit};
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let at = |line: usize, key: String, message: String| error_at(file, line, key, message);
    let mut out = Vec::new();
    for (metric, rule) in checks.golden.iter() {
        let line = line_of(&text, Some("golden:"), metric);
        let key = format!("checks.golden.{metric}");
        let range = rule.steps.unwrap_or_default();
        let compared = (1..=steps).filter(|s| range.contains(*s)).count() as u64;
        let windows = compared.div_ceil(rule.window.unwrap_or(1).max(1));
        if windows > 0 && rule.budget >= windows {
            out.push(at(
                line,
                key.clone(),
                format!(
                    "`golden:{metric}` cannot fail: its budget {} is as large as its {windows} \
                     window(s) over {compared} step(s); a budget must leave a window to fail",
                    rule.budget
                ),
            ));
        }
        let resolved = rule.resolved(metric);
        let low_is_bad = resolved.direction() != Direction::LowerIsBetter;
        if positive(metric)
            && low_is_bad
            && rule.keep_above.is_none()
            && rule.calibrated.is_none()
            && rule.rel.is_some_and(|r| r >= 1.0)
        {
            out.push(at(
                line,
                key.clone(),
                format!(
                    "`golden:{metric}`: `rel: {}` puts the lower edge of its band at or below 0, \
                     so a vanished `{metric}` (positive in a healthy run) passes; add \
                     `keep_above: 0.1` or narrow `rel`",
                    rule.rel.unwrap_or_default()
                ),
            ));
        }
        let own = crate::model::checks::direction::default_direction(metric);
        if rule
            .direction
            .is_some_and(|d| d != own && own != Direction::TwoSided)
            && rule.improvement_limit == Some(ImprovementLimit::Unlimited)
        {
            out.push(at(
                line,
                key.clone(),
                format!(
                    "`golden:{metric}` cannot catch a regression: its direction is written \
                     against `{metric}`'s own ({}) and its good side is unlimited, so a move the \
                     bad way reads as an unlimited improvement",
                    match own {
                        Direction::HigherIsBetter => "higher is better",
                        _ => "lower is better",
                    }
                ),
            ));
        }
    }
    for (i, e) in checks.expect.iter().enumerate() {
        if always_true(&e.expr) {
            out.push(at(
                line_of(&text, Some("expect:"), &e.src),
                format!("checks.expect[{i}]"),
                format!(
                    "`{}` cannot fail: it holds for every value its metrics can take ({})",
                    e.name.as_deref().unwrap_or(&e.src),
                    e.expr
                        .metrics()
                        .iter()
                        .map(|m| {
                            let (lo, hi) = expect_domain(m);
                            format!("`{m}` in [{}, {}]", fmt(lo), fmt(hi))
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    out
}

/// The values an expectation can see of `metric`: its domain, except a metric whose insane
/// values the runner drops and puts back for expectations (an MFU outside (0, 1]), which can
/// be anything there.
pub(crate) fn expect_domain(metric: &str) -> (f64, f64) {
    if crate::model::checks::domain::FRACTION_METRICS.contains(&metric) {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else {
        domain(metric)
    }
}

const ANY: (f64, f64) = (f64::NEG_INFINITY, f64::INFINITY);

/// The interval a number can take.
fn range(n: &Num) -> (f64, f64) {
    match n {
        Num::Const(c) => (*c, *c),
        Num::Neg(a) => {
            let (lo, hi) = range(a);
            (-hi, -lo)
        }
        Num::Bin(op, a, b) => {
            let ((alo, ahi), (blo, bhi)) = (range(a), range(b));
            match op {
                ArithOp::Add => (alo + blo, ahi + bhi),
                ArithOp::Sub => (alo - bhi, ahi - blo),
                _ => ANY,
            }
        }
        // An aggregate that stays among the values it aggregates.
        Num::Agg { func, metric, .. } => match func {
            AggFn::Mean | AggFn::Min | AggFn::Max | AggFn::Last | AggFn::First => {
                expect_domain(metric)
            }
            AggFn::Sum | AggFn::Std => ANY,
        },
        Num::Count { .. } => (0.0, f64::INFINITY),
    }
}

/// Whether `a op b` holds for every pair of values in the two intervals (NaN aside).
fn cmp_always(a: (f64, f64), op: CmpOp, b: (f64, f64)) -> bool {
    match op {
        CmpOp::Ge => a.0 >= b.1,
        CmpOp::Gt => a.0 > b.1,
        CmpOp::Le => a.1 <= b.0,
        CmpOp::Lt => a.1 < b.0,
        CmpOp::Eq | CmpOp::Ne => false,
    }
}

/// Whether `e` holds for every value its metrics can take. A finiteness check can always fail
/// (a NaN is outside every domain).
pub(crate) fn always_true(e: &Expr) -> bool {
    match e {
        Expr::Or(xs) => xs.iter().any(always_true),
        Expr::And(xs) => !xs.is_empty() && xs.iter().all(always_true),
        Expr::Not(_) => false,
        Expr::Cmp(a, op, b) => cmp_always(range(a), *op, range(b)),
        Expr::Quant {
            all: true,
            metric,
            pred: Pred::Cmp(op, c),
            ..
        } => cmp_always(expect_domain(metric), *op, range(c)),
        Expr::Quant { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::checks::expr::parse_expr;

    #[test]
    fn expectations_true_over_the_domain_are_found() {
        let always = |src: &str| always_true(&parse_expr(src).unwrap());
        assert!(always("min(actor/entropy) >= 0"));
        assert!(always("mean(response_length/mean) > -1"));
        assert!(always("all(actor/grad_norm, >= 0)"));
        assert!(always("max(val-core/openai/gsm8k/acc/mean@1) <= 1"));
        // These can fail.
        assert!(!always("min(actor/entropy) >= 0.03"));
        assert!(!always("mean(critic/rewards/mean, last 5) >= 0.6"));
        assert!(!always("all(actor/grad_norm, finite)"));
        // The MFU's insane values reach expectations: a sanity bound can fail.
        assert!(!always("max(perf/mfu/actor) <= 1"));
        assert!(!always(
            "max(perf/mfu/actor) <= 1 and min(perf/mfu/actor) > 0"
        ));
    }
}
