//! Fail fast: whether an expression can still hold once a run that is part-way through reaches
//! its last step.

use super::{aggregate, AggFn, ArithOp, CmpOp, Expr, Num, Pred, Selection};
use crate::model::metrics::MetricTable;

/// The range a value can still take by the end of the run, given the steps seen so far.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    lo: f64,
    hi: f64,
    /// The final value is certainly NaN (a NaN already sits in a selection it must include).
    nan: bool,
}

impl Bounds {
    const UNKNOWN: Bounds = Bounds {
        lo: f64::NEG_INFINITY,
        hi: f64::INFINITY,
        nan: false,
    };
    fn point(v: f64) -> Bounds {
        if v.is_nan() {
            Bounds {
                lo: f64::NAN,
                hi: f64::NAN,
                nan: true,
            }
        } else {
            Bounds {
                lo: v,
                hi: v,
                nan: false,
            }
        }
    }
}

/// What is known about a selection part-way through a run whose steps are `1..=total`.
struct Partial<'a> {
    table: &'a MetricTable,
    total: u64,
}

impl Partial<'_> {
    fn done(&self) -> u64 {
        self.table.last_step().unwrap_or(0)
    }

    /// The values seen so far that the final selection certainly contains, and whether the
    /// selection is already complete (its final value is known).
    fn certain(&self, metric: &str, sel: Selection) -> (Vec<(u64, f64)>, bool) {
        let s = self.table.series(metric);
        let finished = self.done() >= self.total;
        match sel {
            Selection::All => (s, finished),
            Selection::First(n) => {
                let v = Selection::First(n).apply(&s).to_vec();
                let complete = v.len() as u64 >= n || finished;
                (v, complete)
            }
            Selection::Last(n) => {
                let from = self.total.saturating_sub(n) + 1;
                let v = s.into_iter().filter(|(st, _)| *st >= from).collect();
                (v, finished)
            }
            Selection::Steps(r) => {
                let v = sel.apply(&s).to_vec();
                let complete = finished || r.to.is_some_and(|b| self.done() >= b);
                (v, complete)
            }
        }
    }
}

impl Num {
    fn bounds(&self, p: &Partial<'_>) -> Bounds {
        match self {
            Num::Const(v) => Bounds::point(*v),
            Num::Neg(n) => {
                let b = n.bounds(p);
                Bounds {
                    lo: -b.hi,
                    hi: -b.lo,
                    nan: b.nan,
                }
            }
            Num::Bin(op, a, b) => {
                let (x, y) = (a.bounds(p), b.bounds(p));
                if x.nan || y.nan {
                    return Bounds::point(f64::NAN);
                }
                match op {
                    ArithOp::Add => Bounds {
                        lo: x.lo + y.lo,
                        hi: x.hi + y.hi,
                        nan: false,
                    },
                    ArithOp::Sub => Bounds {
                        lo: x.lo - y.hi,
                        hi: x.hi - y.lo,
                        nan: false,
                    },
                    _ if x.lo == x.hi && y.lo == y.hi => {
                        let v = if *op == ArithOp::Mul {
                            x.lo * y.lo
                        } else {
                            x.lo / y.lo
                        };
                        Bounds::point(v)
                    }
                    _ => Bounds::UNKNOWN,
                }
            }
            Num::Agg { func, metric, sel } => {
                let (vals, complete) = p.certain(metric, *sel);
                let v: Vec<f64> = vals.iter().map(|(_, v)| *v).collect();
                if v.iter().any(|x| x.is_nan()) {
                    return Bounds::point(f64::NAN);
                }
                if complete && !v.is_empty() {
                    return Bounds::point(aggregate(*func, &v));
                }
                match func {
                    AggFn::Max if !v.is_empty() => Bounds {
                        lo: aggregate(AggFn::Max, &v),
                        hi: f64::INFINITY,
                        nan: false,
                    },
                    AggFn::Min if !v.is_empty() => Bounds {
                        lo: f64::NEG_INFINITY,
                        hi: aggregate(AggFn::Min, &v),
                        nan: false,
                    },
                    AggFn::First if matches!(sel, Selection::All | Selection::First(_)) => {
                        match v.first() {
                            Some(x) => Bounds::point(*x),
                            None => Bounds::UNKNOWN,
                        }
                    }
                    _ => Bounds::UNKNOWN,
                }
            }
            Num::Count { .. } => Bounds::UNKNOWN,
        }
    }
}

impl Expr {
    /// `false` only when the run's steps so far already decide that the expression fails at the
    /// end of a run of `total_steps` steps (a NaN in an `all(.., finite)`, a `max` already above
    /// its limit, a finished window below its floor). Anything undecided can still pass.
    pub(crate) fn can_still_hold(&self, partial: &MetricTable, total_steps: u64) -> bool {
        let p = Partial {
            table: partial,
            total: total_steps,
        };
        !self.settled_false(&p)
    }

    fn settled_false(&self, p: &Partial<'_>) -> bool {
        match self {
            Expr::And(items) => items.iter().any(|e| e.settled_false(p)),
            Expr::Or(items) => items.iter().all(|e| e.settled_false(p)),
            Expr::Not(_) => false,
            Expr::Cmp(a, op, b) => {
                let (x, y) = (a.bounds(p), b.bounds(p));
                if x.nan || y.nan {
                    return true;
                }
                match op {
                    CmpOp::Lt => x.lo >= y.hi,
                    CmpOp::Le => x.lo > y.hi,
                    CmpOp::Gt => x.hi <= y.lo,
                    CmpOp::Ge => x.hi < y.lo,
                    CmpOp::Eq => x.lo > y.hi || x.hi < y.lo,
                    CmpOp::Ne => x.lo == x.hi && y.lo == y.hi && x.lo == y.lo,
                }
            }
            Expr::Quant {
                all: true,
                metric,
                pred,
                sel,
            } => {
                let t = match pred {
                    Pred::Finite => Some(0.0),
                    Pred::Cmp(_, n) => {
                        let b = n.bounds(p);
                        (b.lo == b.hi || b.nan).then_some(b.lo)
                    }
                };
                match t {
                    Some(t) => {
                        let (vals, _) = p.certain(metric, *sel);
                        vals.iter().any(|(_, v)| !pred.test(*v, t))
                    }
                    None => false,
                }
            }
            Expr::Quant { all: false, .. } => false,
        }
    }
}
