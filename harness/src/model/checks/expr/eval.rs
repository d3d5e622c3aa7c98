//! Evaluation over one run's series: whether an expression holds, with the numbers that decided
//! it, and the aggregate functions.

use super::{AggFn, ArithOp, Expr, Num, Pred, Selection};
use crate::model::metrics::{format_value, MetricTable};

/// Why an expression could not be decided on this run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EvalIssue {
    /// A metric the expression needs is absent, or the selection holds no step.
    Missing(String),
}

/// The result of one expression on one run, with the numbers that decided it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Evaluation {
    pub(crate) holds: bool,
    /// For a top-level comparison: the left value, the right value.
    pub(crate) lhs: Option<f64>,
    pub(crate) rhs: Option<f64>,
    /// For a quantifier: the first step that broke `all` (or `None`).
    pub(crate) step: Option<u64>,
    /// Every aggregate's value, in order, e.g. `mean(x, last 5) = 0.41`.
    pub(crate) trace: Vec<String>,
}

struct Ctx<'a> {
    table: &'a MetricTable,
    trace: Vec<String>,
    step: Option<u64>,
}

impl Ctx<'_> {
    fn series(&self, metric: &str, sel: Selection) -> Result<Vec<(u64, f64)>, EvalIssue> {
        let all = self.table.series(metric);
        if all.is_empty() {
            return Err(EvalIssue::Missing(format!(
                "metric `{metric}` is not in the run"
            )));
        }
        Ok(sel.apply(&all).to_vec())
    }
}

/// Evidence text: six significant decimals are plenty to see why a check failed, and hide
/// binary noise such as `0.6499999999999999`.
pub(crate) fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() || a == 0.0 {
        return format_value(v);
    }
    if (1e-4..1e6).contains(&a) {
        let s = format!("{v:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        return s.to_string();
    }
    format!("{v:.4e}")
}

impl Expr {
    pub(crate) fn evaluate(&self, table: &MetricTable) -> Result<Evaluation, EvalIssue> {
        let mut ctx = Ctx {
            table,
            trace: Vec::new(),
            step: None,
        };
        let (holds, lhs, rhs) = match self {
            Expr::Cmp(a, op, b) => {
                let x = a.eval(&mut ctx)?;
                let y = b.eval(&mut ctx)?;
                (op.holds(x, y), Some(x), Some(y))
            }
            _ => (self.eval(&mut ctx)?, None, None),
        };
        Ok(Evaluation {
            holds,
            lhs,
            rhs,
            step: ctx.step,
            trace: ctx.trace,
        })
    }

    fn eval(&self, ctx: &mut Ctx<'_>) -> Result<bool, EvalIssue> {
        match self {
            Expr::Or(items) => {
                let mut any = false;
                for e in items {
                    any |= e.eval(ctx)?;
                }
                Ok(any)
            }
            Expr::And(items) => {
                let mut all = true;
                for e in items {
                    all &= e.eval(ctx)?;
                }
                Ok(all)
            }
            Expr::Not(e) => Ok(!e.eval(ctx)?),
            Expr::Cmp(a, op, b) => {
                let x = a.eval(ctx)?;
                let y = b.eval(ctx)?;
                Ok(op.holds(x, y))
            }
            Expr::Quant {
                all,
                metric,
                pred,
                sel,
            } => {
                let s = ctx.series(metric, *sel)?;
                if s.is_empty() {
                    return Err(EvalIssue::Missing(format!(
                        "no step of `{metric}` in {}",
                        sel_text(*sel)
                    )));
                }
                let threshold = pred.threshold(ctx)?;
                if *all {
                    if let Some((step, v)) = s.iter().find(|(_, v)| !pred.test(*v, threshold)) {
                        ctx.step.get_or_insert(*step);
                        ctx.trace
                            .push(format!("{metric} = {} at step {step}", fmt_num(*v)));
                        return Ok(false);
                    }
                    Ok(true)
                } else {
                    match s.iter().find(|(_, v)| pred.test(*v, threshold)) {
                        Some((step, v)) => {
                            ctx.trace
                                .push(format!("{metric} = {} at step {step}", fmt_num(*v)));
                            Ok(true)
                        }
                        None => Ok(false),
                    }
                }
            }
        }
    }

    /// Every metric the expression reads, in order of first use.
    pub(crate) fn metrics(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.visit_metrics(&mut |m| {
            if !out.iter().any(|x: &String| x == m) {
                out.push(m.to_string());
            }
        });
        out
    }

    fn visit_metrics(&self, f: &mut dyn FnMut(&str)) {
        match self {
            Expr::Or(v) | Expr::And(v) => v.iter().for_each(|e| e.visit_metrics(f)),
            Expr::Not(e) => e.visit_metrics(f),
            Expr::Cmp(a, _, b) => {
                a.visit_metrics(f);
                b.visit_metrics(f);
            }
            Expr::Quant { metric, pred, .. } => {
                f(metric);
                pred.visit_metrics(f);
            }
        }
    }
}

fn sel_text(sel: Selection) -> String {
    match sel {
        Selection::All => "the run".into(),
        s => s.to_string(),
    }
}

impl Pred {
    fn threshold(&self, ctx: &mut Ctx<'_>) -> Result<f64, EvalIssue> {
        match self {
            Pred::Finite => Ok(0.0),
            Pred::Cmp(_, n) => n.eval(ctx),
        }
    }

    pub(super) fn test(&self, v: f64, threshold: f64) -> bool {
        match self {
            Pred::Finite => v.is_finite(),
            Pred::Cmp(op, _) => op.holds(v, threshold),
        }
    }

    fn visit_metrics(&self, f: &mut dyn FnMut(&str)) {
        if let Pred::Cmp(_, n) = self {
            n.visit_metrics(f);
        }
    }
}

/// Aggregates propagate NaN: `f64::max` would silently drop it and let a NaN run pass.
pub(crate) fn aggregate(func: AggFn, values: &[f64]) -> f64 {
    if values.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    let n = values.len() as f64;
    match func {
        AggFn::Mean => values.iter().sum::<f64>() / n,
        AggFn::Sum => values.iter().sum(),
        AggFn::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        AggFn::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        AggFn::First => values.first().copied().unwrap_or(f64::NAN),
        AggFn::Last => values.last().copied().unwrap_or(f64::NAN),
        AggFn::Std => {
            let m = values.iter().sum::<f64>() / n;
            (values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n).sqrt()
        }
    }
}

impl Num {
    fn eval(&self, ctx: &mut Ctx<'_>) -> Result<f64, EvalIssue> {
        match self {
            Num::Const(v) => Ok(*v),
            Num::Neg(n) => Ok(-n.eval(ctx)?),
            Num::Bin(op, a, b) => {
                let x = a.eval(ctx)?;
                let y = b.eval(ctx)?;
                Ok(match op {
                    ArithOp::Add => x + y,
                    ArithOp::Sub => x - y,
                    ArithOp::Mul => x * y,
                    ArithOp::Div => x / y,
                })
            }
            Num::Agg { func, metric, sel } => {
                let s = ctx.series(metric, *sel)?;
                if s.is_empty() {
                    return Err(EvalIssue::Missing(format!(
                        "no step of `{metric}` in {}",
                        sel_text(*sel)
                    )));
                }
                let values: Vec<f64> = s.iter().map(|(_, v)| *v).collect();
                let v = aggregate(*func, &values);
                ctx.trace.push(format!("{self} = {}", fmt_num(v)));
                Ok(v)
            }
            Num::Count { metric, pred, sel } => {
                let s = ctx.series(metric, *sel)?;
                let v = match pred {
                    None => s.len(),
                    Some(p) => {
                        let t = p.threshold(ctx)?;
                        s.iter().filter(|(_, v)| p.test(*v, t)).count()
                    }
                } as f64;
                ctx.trace.push(format!("{self} = {}", fmt_num(v)));
                Ok(v)
            }
        }
    }

    fn visit_metrics(&self, f: &mut dyn FnMut(&str)) {
        match self {
            Num::Const(_) => {}
            Num::Neg(n) => n.visit_metrics(f),
            Num::Bin(_, a, b) => {
                a.visit_metrics(f);
                b.visit_metrics(f);
            }
            Num::Agg { metric, .. } => f(metric),
            Num::Count { metric, pred, .. } => {
                f(metric);
                if let Some(p) = pred {
                    p.visit_metrics(f);
                }
            }
        }
    }
}
