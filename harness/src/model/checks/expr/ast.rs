//! The expression's syntax tree: comparisons, predicates, numbers, aggregates and their step
//! selections, each written back as the source it parses from (`Display`).

use std::fmt;

use crate::model::metrics::StepRange;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl CmpOp {
    pub(super) fn parse(s: &str) -> CmpOp {
        match s {
            "<" => CmpOp::Lt,
            "<=" => CmpOp::Le,
            ">" => CmpOp::Gt,
            ">=" => CmpOp::Ge,
            "==" => CmpOp::Eq,
            _ => CmpOp::Ne,
        }
    }

    pub(crate) fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        }
    }

    /// IEEE says `NaN != x` is true; a harness must never let a NaN pass, so any comparison
    /// that involves a NaN is false.
    pub(crate) fn holds(self, a: f64, b: f64) -> bool {
        if a.is_nan() || b.is_nan() {
            return false;
        }
        match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFn {
    Mean,
    Min,
    Max,
    Last,
    First,
    Sum,
    /// Population standard deviation (numpy's default, ddof=0).
    Std,
}

impl AggFn {
    fn name(self) -> &'static str {
        match self {
            AggFn::Mean => "mean",
            AggFn::Min => "min",
            AggFn::Max => "max",
            AggFn::Last => "last",
            AggFn::First => "first",
            AggFn::Sum => "sum",
            AggFn::Std => "std",
        }
    }
}

/// Which of a metric's steps a function looks at. `Last`/`First` count steps that have the
/// metric; `Steps` is an inclusive range of step numbers, open at either end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Selection {
    #[default]
    All,
    Last(u64),
    First(u64),
    /// `steps a..b`, either end open.
    Steps(StepRange),
}

impl Selection {
    pub(crate) fn apply(self, series: &[(u64, f64)]) -> &[(u64, f64)] {
        match self {
            Selection::All => series,
            Selection::Last(n) => &series[series.len().saturating_sub(n as usize)..],
            Selection::First(n) => &series[..series.len().min(n as usize)],
            Selection::Steps(r) => {
                let lo = series.partition_point(|(s, _)| r.from.is_some_and(|a| *s < a));
                let hi = series.partition_point(|(s, _)| r.to.is_none_or(|b| *s <= b));
                if lo >= hi {
                    &series[0..0]
                } else {
                    &series[lo..hi]
                }
            }
        }
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selection::All => Ok(()),
            Selection::Last(n) => write!(f, "last {n}"),
            Selection::First(n) => write!(f, "first {n}"),
            Selection::Steps(r) => write!(f, "steps {}", r.bounds()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Pred {
    Finite,
    Cmp(CmpOp, Box<Num>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Num {
    Const(f64),
    Neg(Box<Num>),
    Bin(ArithOp, Box<Num>, Box<Num>),
    Agg {
        func: AggFn,
        metric: String,
        sel: Selection,
    },
    Count {
        metric: String,
        pred: Option<Pred>,
        sel: Selection,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Or(Vec<Expr>),
    And(Vec<Expr>),
    Not(Box<Expr>),
    Cmp(Num, CmpOp, Num),
    Quant {
        all: bool,
        metric: String,
        pred: Pred,
        sel: Selection,
    },
}

fn fmt_metric(f: &mut fmt::Formatter<'_>, m: &str) -> fmt::Result {
    let bare = m
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && m.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/@-_.".contains(c));
    if bare {
        f.write_str(m)
    } else {
        write!(f, "\"{m}\"")
    }
}

fn fmt_args(f: &mut fmt::Formatter<'_>, sel: &Selection) -> fmt::Result {
    if *sel != Selection::All {
        write!(f, ", {sel}")?;
    }
    Ok(())
}

impl fmt::Display for Pred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pred::Finite => f.write_str("finite"),
            Pred::Cmp(op, n) => write!(f, "{} {n}", op.symbol()),
        }
    }
}

impl Num {
    fn prec(&self) -> u8 {
        match self {
            Num::Bin(ArithOp::Add | ArithOp::Sub, ..) => 1,
            Num::Bin(..) => 2,
            _ => 3,
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::Const(v) => write!(f, "{v}"),
            Num::Neg(n) if n.prec() < 3 => write!(f, "-({n})"),
            Num::Neg(n) => write!(f, "-{n}"),
            Num::Bin(op, a, b) => {
                let (sym, p) = match op {
                    ArithOp::Add => ("+", 1),
                    ArithOp::Sub => ("-", 1),
                    ArithOp::Mul => ("*", 2),
                    ArithOp::Div => ("/", 2),
                };
                if a.prec() < p {
                    write!(f, "({a})")?;
                } else {
                    write!(f, "{a}")?;
                }
                write!(f, " {sym} ")?;
                // Left-associative: a right operand of equal precedence needs parentheses.
                if b.prec() <= p {
                    write!(f, "({b})")
                } else {
                    write!(f, "{b}")
                }
            }
            Num::Agg { func, metric, sel } => {
                write!(f, "{}(", func.name())?;
                fmt_metric(f, metric)?;
                fmt_args(f, sel)?;
                f.write_str(")")
            }
            Num::Count { metric, pred, sel } => {
                f.write_str("count(")?;
                fmt_metric(f, metric)?;
                if let Some(p) = pred {
                    write!(f, ", {p}")?;
                }
                fmt_args(f, sel)?;
                f.write_str(")")
            }
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Or(items) | Expr::And(items) => {
                let kw = if matches!(self, Expr::Or(_)) {
                    " or "
                } else {
                    " and "
                };
                for (i, e) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(kw)?;
                    }
                    if matches!(e, Expr::Or(_) | Expr::And(_)) {
                        write!(f, "({e})")?;
                    } else {
                        write!(f, "{e}")?;
                    }
                }
                Ok(())
            }
            Expr::Not(e) => match **e {
                Expr::Or(_) | Expr::And(_) => write!(f, "not ({e})"),
                _ => write!(f, "not {e}"),
            },
            Expr::Cmp(a, op, b) => write!(f, "{a} {} {b}", op.symbol()),
            Expr::Quant {
                all,
                metric,
                pred,
                sel,
            } => {
                f.write_str(if *all { "all(" } else { "any(" })?;
                fmt_metric(f, metric)?;
                write!(f, ", {pred}")?;
                fmt_args(f, sel)?;
                f.write_str(")")
            }
        }
    }
}
