//! Whether an expectation holds for every value its metrics can take (`rlharness check`
//! refuses it: it cannot fail), by interval arithmetic over the metrics' domains.

use crate::checks::domain::domain;
use crate::checks::expr::{AggFn, ArithOp, CmpOp, Expr, Num, Pred};

/// The values an expectation can see of `metric`: its domain, except a metric whose insane
/// values the runner drops and puts back for expectations (an MFU outside (0, 1]), which can
/// be anything there.
pub(crate) fn expect_domain(metric: &str) -> (f64, f64) {
    if crate::compare::FRACTION_METRICS.contains(&metric) {
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
    use crate::checks::expr::parse_expr;

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
