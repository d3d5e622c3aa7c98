//! Convergence expressions: a pest grammar (`expr.pest`), an AST, and its evaluation over one
//! run's series. Parsing validates everything that can be known without data (window sizes,
//! step ranges), so a bad expression fails when the scenario is loaded, not after a long run.

use std::fmt;

use pest::iterators::Pair;
use pest::Parser;

use crate::metrics::{MetricTable, StepRange};

#[derive(pest_derive::Parser)]
#[grammar = "checks/expr.pest"]
struct ExprParser;

/// A parse error with the 1-based column in the expression source.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ExprError {
    pub(crate) column: usize,
    pub(crate) message: String,
}

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
    fn parse(s: &str) -> CmpOp {
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

// ---------------------------------------------------------------------------------------------
// Parsing

fn col(pair: &Pair<'_, Rule>) -> usize {
    pair.as_span().start_pos().line_col().1
}

fn rule_name(r: &Rule) -> Option<&'static str> {
    Some(match r {
        Rule::cmp_op => "a comparison (<, <=, >, >=, ==, !=)",
        Rule::add_op | Rule::mul_op => "an operator",
        Rule::number => "a number",
        Rule::integer => "a whole number",
        Rule::metric | Rule::bare_metric | Rule::quoted_metric => "a metric name",
        Rule::agg_fn => "a function (mean, min, max, last, first, sum, std)",
        Rule::count | Rule::kw_count => "count(...)",
        Rule::quant_fn | Rule::kw_all | Rule::kw_any => "all(...) or any(...)",
        Rule::kw_and => "`and`",
        Rule::kw_or => "`or`",
        Rule::kw_not => "`not`",
        Rule::kw_finite | Rule::predicate => "a predicate (finite, or a comparison such as `> 0`)",
        Rule::selection | Rule::sel_last | Rule::sel_first | Rule::sel_steps => {
            "a selection (last N, first N, steps A..B)"
        }
        Rule::kw_last => "`last`",
        Rule::kw_first => "`first`",
        Rule::kw_steps => "`steps`",
        Rule::EOI => "the end of the expression",
        Rule::sum | Rule::product | Rule::factor | Rule::neg | Rule::aggregate => "a value",
        Rule::comparison | Rule::boolean | Rule::unary | Rule::quantifier => "a condition",
        _ => return None,
    })
}

fn pest_error(e: pest::error::Error<Rule>, src: &str) -> ExprError {
    let column = match e.line_col {
        pest::error::LineColLocation::Pos((_, c)) => c,
        pest::error::LineColLocation::Span((_, c), _) => c,
    };
    // Rule-level positions stop where the last rule began (`all(x)` fails "at column 1");
    // the token attempts know the furthest point the parser reached, which is where the
    // user's mistake is.
    if let Some(attempts) = e.parse_attempts() {
        let at = attempts.max_position;
        let far = src
            .get(..at)
            .map(|p| p.chars().count() + 1)
            .unwrap_or(column);
        let mut tokens: Vec<String> = attempts
            .expected_tokens()
            .iter()
            .map(|t| format!("`{t}`"))
            .collect();
        tokens.sort();
        tokens.dedup();
        if far > column && !tokens.is_empty() {
            return ExprError {
                column: far,
                message: format!("expected {}", tokens.join(" or ")),
            };
        }
    }
    let message = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            let mut names: Vec<&str> = positives.iter().filter_map(rule_name).collect();
            names.dedup();
            let mut seen = std::collections::BTreeSet::new();
            names.retain(|n| seen.insert(*n));
            if names.is_empty() {
                "unexpected input".to_string()
            } else {
                format!("expected {}", names.join(" or "))
            }
        }
        pest::error::ErrorVariant::CustomError { message } => message.clone(),
    };
    ExprError { column, message }
}

/// Parse and validate one expression. Errors carry the column so a spec loader can point at
/// the character inside the YAML string.
pub fn parse_expr(src: &str) -> Result<Expr, ExprError> {
    // Token-level attempts make errors point at the furthest character reached.
    pest::set_error_detail(true);
    let mut pairs = ExprParser::parse(Rule::expr, src).map_err(|e| pest_error(e, src))?;
    let top = pairs
        .next()
        .ok_or_else(|| expr_err(1, "empty expression"))?;
    let or = first_child(top, 1, "empty expression")?;
    build_or(or)
}

/// A parse error at `column`.
fn expr_err(column: usize, message: impl Into<String>) -> ExprError {
    ExprError {
        column,
        message: message.into(),
    }
}

/// The first child of `pair`, or a parse error at `column` saying `what` was expected.
fn first_child<'i>(
    pair: Pair<'i, Rule>,
    column: usize,
    what: &str,
) -> Result<Pair<'i, Rule>, ExprError> {
    inner(pair).next().ok_or_else(|| expr_err(column, what))
}

fn inner(pair: Pair<'_, Rule>) -> pest::iterators::Pairs<'_, Rule> {
    pair.into_inner()
}

fn build_or(pair: Pair<'_, Rule>) -> Result<Expr, ExprError> {
    build_chain_of(pair, Rule::and_expr, build_and, Expr::Or)
}

fn build_and(pair: Pair<'_, Rule>) -> Result<Expr, ExprError> {
    build_chain_of(pair, Rule::unary, build_unary, Expr::And)
}

/// `a or b or c` / `a and b and c`: the operands (the children of rule `item`), one alone as
/// itself, several joined by `join`.
fn build_chain_of(
    pair: Pair<'_, Rule>,
    item: Rule,
    build: fn(Pair<'_, Rule>) -> Result<Expr, ExprError>,
    join: fn(Vec<Expr>) -> Expr,
) -> Result<Expr, ExprError> {
    let mut items = inner(pair)
        .filter(|p| p.as_rule() == item)
        .map(build)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(if items.len() == 1 {
        items.remove(0)
    } else {
        join(items)
    })
}

fn build_unary(pair: Pair<'_, Rule>) -> Result<Expr, ExprError> {
    let mut it = inner(pair);
    let mut negations = 0usize;
    for p in it.by_ref() {
        match p.as_rule() {
            Rule::kw_not => negations += 1,
            Rule::unary => {
                let e = build_unary(p)?;
                return Ok(wrap_not(e, negations));
            }
            Rule::boolean => {
                let e = build_boolean(p)?;
                return Ok(wrap_not(e, negations));
            }
            _ => {}
        }
    }
    Err(expr_err(1, "expected a condition"))
}

fn wrap_not(mut e: Expr, n: usize) -> Expr {
    for _ in 0..n {
        e = Expr::Not(Box::new(e));
    }
    e
}

fn build_boolean(pair: Pair<'_, Rule>) -> Result<Expr, ExprError> {
    let c = col(&pair);
    let p = first_child(pair, c, "expected a condition")?;
    match p.as_rule() {
        Rule::comparison => {
            let mut it = inner(p);
            let (a, op, b) = (it.next(), it.next(), it.next());
            match (a, op, b) {
                (Some(a), Some(op), Some(b)) => Ok(Expr::Cmp(
                    build_sum(a)?,
                    CmpOp::parse(op.as_str()),
                    build_sum(b)?,
                )),
                _ => Err(expr_err(c, "incomplete comparison")),
            }
        }
        Rule::quantifier => {
            let mut it = inner(p);
            let f = it
                .next()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default();
            let metric = it.next().map(metric_name).unwrap_or_default();
            let pred = match it.next() {
                Some(p) => build_pred(p)?,
                None => return Err(expr_err(c, "expected a predicate")),
            };
            let sel = match it.next() {
                Some(s) => build_selection(s)?,
                None => Selection::All,
            };
            Ok(Expr::Quant {
                all: f == "all",
                metric,
                pred,
                sel,
            })
        }
        Rule::or_expr => build_or(p),
        _ => Err(expr_err(col(&p), "expected a condition")),
    }
}

fn metric_name(p: Pair<'_, Rule>) -> String {
    let s = p.as_str();
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
        .to_string()
}

fn build_pred(pair: Pair<'_, Rule>) -> Result<Pred, ExprError> {
    let c = col(&pair);
    let mut it = inner(pair);
    match it.next() {
        Some(p) if p.as_rule() == Rule::kw_finite => Ok(Pred::Finite),
        Some(p) if p.as_rule() == Rule::cmp_op => {
            let op = CmpOp::parse(p.as_str());
            let rhs = it
                .next()
                .ok_or_else(|| expr_err(c, "expected a value after the comparison"))?;
            Ok(Pred::Cmp(op, Box::new(build_sum(rhs)?)))
        }
        _ => Err(expr_err(
            c,
            "expected a predicate (finite, or a comparison such as `> 0`)",
        )),
    }
}

fn parse_int(p: &Pair<'_, Rule>) -> Result<u64, ExprError> {
    p.as_str()
        .parse()
        .map_err(|_| expr_err(col(p), format!("`{}` is too large", p.as_str())))
}

fn build_selection(pair: Pair<'_, Rule>) -> Result<Selection, ExprError> {
    let c = col(&pair);
    let p = first_child(pair, c, "expected a selection")?;
    let rule = p.as_rule();
    let ints: Vec<Pair<'_, Rule>> = inner(p.clone())
        .filter(|q| q.as_rule() == Rule::integer)
        .collect();
    match rule {
        Rule::sel_last | Rule::sel_first => {
            let n = ints
                .first()
                .ok_or_else(|| expr_err(c, "expected a count"))?;
            let v = parse_int(n)?;
            if v == 0 {
                return Err(expr_err(col(n), "a window of 0 steps selects nothing"));
            }
            Ok(if rule == Rule::sel_last {
                Selection::Last(v)
            } else {
                Selection::First(v)
            })
        }
        _ => {
            // `steps A..B`, `steps A..`, `steps ..B`: find which side each integer is on.
            let dots = p.as_str().find("..").unwrap_or(0) + p.as_span().start();
            let mut a = None;
            let mut b = None;
            for i in &ints {
                if i.as_span().start() < dots {
                    a = Some(parse_int(i)?);
                } else {
                    b = Some(parse_int(i)?);
                }
            }
            if let (Some(x), Some(y)) = (a, b) {
                if x > y {
                    return Err(expr_err(
                        c,
                        format!("empty step range {x}..{y}: the start is after the end"),
                    ));
                }
            }
            Ok(Selection::Steps(StepRange { from: a, to: b }))
        }
    }
}

fn build_sum(pair: Pair<'_, Rule>) -> Result<Num, ExprError> {
    build_chain(pair)
}

/// `sum` and `product` are both `operand (op operand)*`, folded left-associatively.
fn build_chain(pair: Pair<'_, Rule>) -> Result<Num, ExprError> {
    let mut acc: Option<Num> = None;
    let mut pending: Option<ArithOp> = None;
    for p in inner(pair) {
        match p.as_rule() {
            Rule::add_op | Rule::mul_op => {
                pending = Some(match p.as_str() {
                    "+" => ArithOp::Add,
                    "-" => ArithOp::Sub,
                    "*" => ArithOp::Mul,
                    _ => ArithOp::Div,
                })
            }
            Rule::product => {
                let n = build_chain(p)?;
                acc = Some(fold(acc, pending.take(), n));
            }
            Rule::factor => {
                let n = build_factor(p)?;
                acc = Some(fold(acc, pending.take(), n));
            }
            _ => {}
        }
    }
    acc.ok_or_else(|| expr_err(1, "expected a value"))
}

fn fold(acc: Option<Num>, op: Option<ArithOp>, n: Num) -> Num {
    match (acc, op) {
        (Some(a), Some(op)) => Num::Bin(op, Box::new(a), Box::new(n)),
        (_, _) => n,
    }
}

fn build_factor(pair: Pair<'_, Rule>) -> Result<Num, ExprError> {
    let c = col(&pair);
    let p = first_child(pair, c, "expected a value")?;
    match p.as_rule() {
        Rule::neg => {
            let f = first_child(p, c, "expected a value after `-`")?;
            Ok(Num::Neg(Box::new(build_factor(f)?)))
        }
        Rule::number => p
            .as_str()
            .parse()
            .map(Num::Const)
            .map_err(|_| expr_err(col(&p), format!("`{}` is not a number", p.as_str()))),
        Rule::sum => build_sum(p),
        Rule::aggregate => {
            let mut it = inner(p);
            let func = match it.next().map(|f| f.as_str().to_string()).as_deref() {
                Some("mean") => AggFn::Mean,
                Some("min") => AggFn::Min,
                Some("max") => AggFn::Max,
                Some("last") => AggFn::Last,
                Some("first") => AggFn::First,
                Some("sum") => AggFn::Sum,
                _ => AggFn::Std,
            };
            let metric = it.next().map(metric_name).unwrap_or_default();
            let sel = match it.next() {
                Some(s) => build_selection(s)?,
                None => Selection::All,
            };
            Ok(Num::Agg { func, metric, sel })
        }
        Rule::count => {
            let mut it = inner(p).filter(|q| q.as_rule() != Rule::kw_count);
            let metric = it.next().map(metric_name).unwrap_or_default();
            let mut pred = None;
            let mut sel = Selection::All;
            for q in it {
                match q.as_rule() {
                    Rule::predicate => pred = Some(build_pred(q)?),
                    Rule::selection => sel = build_selection(q)?,
                    _ => {}
                }
            }
            Ok(Num::Count { metric, pred, sel })
        }
        _ => Err(expr_err(col(&p), "expected a value")),
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation

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
        return crate::metrics::format_value(v);
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

    fn test(&self, v: f64, threshold: f64) -> bool {
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

// ---------------------------------------------------------------------------------------------
// Fail fast: can the expression still hold once the run reaches `total_steps`?

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

#[cfg(test)]
mod tests {
    use super::*;

    fn table(metric: &str, values: &[f64]) -> MetricTable {
        MetricTable::from_columns(&[(metric, values)])
    }

    #[test]
    fn parses_the_documented_examples() {
        for src in [
            "mean(critic/rewards/mean, last 5) >= mean(critic/rewards/mean, first 5) + 0.2",
            "max(perf/mfu/actor) <= 1",
            "all(actor/grad_norm, finite)",
            "all(perf/mfu/actor, > 0, steps 2..)",
            "any(val-core/openai/gsm8k/acc/mean@1, >= 0.5)",
            "count(actor/grad_norm, > 10) <= 1 and std(x, steps 1..4) < 0.1 or not last(y) == 2",
            "(min(a) > -1e-3) and (sum(b) / 2 - -3 * (first(c)) != 0.5)",
            "mean(\"weird name:with colon\") > .5",
        ] {
            let e = parse_expr(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            // The canonical form parses back to the same tree.
            let again = parse_expr(&e.to_string()).unwrap();
            assert_eq!(e, again, "{src} -> {e}");
        }
    }

    #[test]
    fn precedence_and_associativity() {
        let e = parse_expr("1 - 2 - 3 == 1 - (2 - 3) * 2 / 4").unwrap();
        assert_eq!(e.to_string(), "1 - 2 - 3 == 1 - (2 - 3) * 2 / 4");
        let t = MetricTable::new();
        // -4 == 1.5 is false.
        assert!(!e.evaluate(&t).unwrap().holds);
        let e = parse_expr("1 < 2 or 1 > 2 and 3 > 4").unwrap();
        assert!(matches!(e, Expr::Or(_)));
        assert!(e.evaluate(&t).unwrap().holds);
        let e = parse_expr("not 1 < 2").unwrap();
        assert!(!e.evaluate(&t).unwrap().holds);
    }

    #[test]
    fn bad_expressions_name_the_column() {
        let cases = [
            ("max(perf/mfu/actor) <=", 23, "expected a value"),
            ("mean(x, last 0) > 1", 14, "0 steps"),
            ("mean(x, steps 5..2) > 1", 9, "empty step range"),
            ("median(x) > 1", 1, "expected"),
            ("max(x) <= 1 andd min(x) > 0", 13, "expected"),
            ("all(x) ", 6, "expected"),
            ("mean(x, last 5)", 16, "comparison"),
            ("", 1, "expected"),
        ];
        for (src, column, needle) in cases {
            let e = parse_expr(src).expect_err(src);
            assert_eq!(e.column, column, "{src}: {e}");
            assert!(e.message.contains(needle), "{src}: {e}");
        }
    }

    #[test]
    fn evaluates_windows_and_quantifiers() {
        let t = table("r", &[0.0, 0.1, 0.2, 0.5, 0.6, 0.7]);
        let e = parse_expr("mean(r, last 2) >= mean(r, first 2) + 0.5").unwrap();
        let ev = e.evaluate(&t).unwrap();
        assert!(ev.holds);
        assert!((ev.lhs.unwrap() - 0.65).abs() < 1e-12);
        assert!((ev.rhs.unwrap() - 0.55).abs() < 1e-12);
        assert_eq!(fmt_num(1e-7), "1.0000e-7");
        assert_eq!(fmt_num(-2.5), "-2.5");
        assert!(ev.trace[0].starts_with("mean(r, last 2) = 0.65"));
        assert!(
            parse_expr("sum(r, steps 2..3) > 0.29")
                .unwrap()
                .evaluate(&t)
                .unwrap()
                .holds
        );
        assert!(
            parse_expr("count(r, > 0.4) == 3")
                .unwrap()
                .evaluate(&t)
                .unwrap()
                .holds
        );
        let ev = parse_expr("all(r, < 0.55)").unwrap().evaluate(&t).unwrap();
        assert!(!ev.holds);
        assert_eq!(ev.step, Some(5));
        assert!(
            parse_expr("any(r, > 0.65)")
                .unwrap()
                .evaluate(&t)
                .unwrap()
                .holds
        );
        let std = parse_expr("std(r, first 2) == 0.05")
            .unwrap()
            .evaluate(&t)
            .unwrap();
        assert!(std.holds, "{std:?}");
    }

    #[test]
    fn nan_never_passes() {
        let t = table("g", &[1.0, f64::NAN, 2.0]);
        for src in [
            "max(g) <= 100",
            "max(g) != 5",
            "mean(g) > -1",
            "all(g, finite)",
            "all(g, > 0)",
            "not min(g) < 0 and min(g) >= 0",
        ] {
            let ev = parse_expr(src).unwrap().evaluate(&t).unwrap();
            assert!(!ev.holds, "{src}");
        }
    }

    #[test]
    fn missing_metric_or_empty_selection_is_missing() {
        let t = table("g", &[1.0]);
        let e = parse_expr("max(h) < 1").unwrap();
        assert!(
            matches!(e.evaluate(&t), Err(EvalIssue::Missing(m)) if m.contains("`h`")),
            "missing metric"
        );
        let e = parse_expr("mean(g, steps 5..) < 1").unwrap();
        assert!(matches!(e.evaluate(&t), Err(EvalIssue::Missing(_))));
        assert_eq!(e.metrics(), vec!["g".to_string()]);
    }

    #[test]
    fn fail_fast_decides_only_what_is_settled() {
        let partial = table("x", &[0.5, 1.5]);
        let nan = table("x", &[0.5, f64::NAN]);
        for (src, t, can_hold) in [
            // max can only grow: already above the limit.
            ("max(x) <= 1", &partial, false),
            // min can only shrink: still undecided.
            ("min(x) >= 1", &partial, false),
            ("min(x) <= 0", &partial, true),
            // a mean over the whole run is undecided until the end.
            ("mean(x) > 5", &partial, true),
            // a finished window is final.
            ("mean(x, first 2) > 5", &partial, false),
            // a NaN is final for all(.., finite) and for any aggregate over it.
            ("all(x, finite)", &nan, false),
            ("max(x) <= 1", &nan, false),
            // a NaN outside the final `last 3` window does not decide it.
            ("all(x, finite, last 3)", &nan, true),
            // or: one undecided side keeps it alive.
            ("max(x) <= 1 or mean(x) > 0", &partial, true),
        ] {
            assert_eq!(
                parse_expr(src).unwrap().can_still_hold(t, 10),
                can_hold,
                "{src}"
            );
        }
    }
    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn metric() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("critic/rewards/mean".to_string()),
                Just("val-core/openai/gsm8k/acc/mean@1".to_string()),
                Just("timing_s/step".to_string()),
                Just("odd name:1".to_string()),
            ]
        }

        fn selection() -> impl Strategy<Value = Selection> {
            prop_oneof![
                Just(Selection::All),
                (1u64..50).prop_map(Selection::Last),
                (1u64..50).prop_map(Selection::First),
                (
                    proptest::option::of(0u64..20),
                    proptest::option::of(20u64..40)
                )
                    .prop_map(|(from, to)| Selection::Steps(StepRange { from, to })),
            ]
        }

        fn cmp_op() -> impl Strategy<Value = CmpOp> {
            prop_oneof![
                Just(CmpOp::Lt),
                Just(CmpOp::Le),
                Just(CmpOp::Gt),
                Just(CmpOp::Ge),
                Just(CmpOp::Eq),
                Just(CmpOp::Ne),
            ]
        }

        fn num() -> impl Strategy<Value = Num> {
            let agg = prop_oneof![
                Just(AggFn::Mean),
                Just(AggFn::Min),
                Just(AggFn::Max),
                Just(AggFn::Last),
                Just(AggFn::First),
                Just(AggFn::Sum),
                Just(AggFn::Std),
            ];
            let leaf = prop_oneof![
                (0u32..1000).prop_map(|v| Num::Const(f64::from(v) / 8.0)),
                (agg, metric(), selection()).prop_map(|(func, metric, sel)| Num::Agg {
                    func,
                    metric,
                    sel
                }),
                (metric(), selection()).prop_map(|(metric, sel)| Num::Count {
                    metric,
                    pred: Some(Pred::Finite),
                    sel
                }),
            ];
            leaf.prop_recursive(3, 16, 2, |inner| {
                let op = prop_oneof![
                    Just(ArithOp::Add),
                    Just(ArithOp::Sub),
                    Just(ArithOp::Mul),
                    Just(ArithOp::Div),
                ];
                prop_oneof![
                    inner.clone().prop_map(|n| Num::Neg(Box::new(n))),
                    (op, inner.clone(), inner).prop_map(|(op, a, b)| Num::Bin(
                        op,
                        Box::new(a),
                        Box::new(b)
                    )),
                ]
            })
        }

        fn expr() -> impl Strategy<Value = Expr> {
            let leaf = prop_oneof![
                (num(), cmp_op(), num()).prop_map(|(a, op, b)| Expr::Cmp(a, op, b)),
                (any::<bool>(), metric(), selection()).prop_map(|(all, metric, sel)| {
                    Expr::Quant {
                        all,
                        metric,
                        pred: Pred::Finite,
                        sel,
                    }
                }),
            ];
            leaf.prop_recursive(3, 12, 3, |inner| {
                prop_oneof![
                    inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
                    proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
                    proptest::collection::vec(inner, 2..4).prop_map(Expr::Or),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]

            /// The printer and the grammar agree: what is displayed parses back to the tree.
            #[test]
            fn display_parses_back(e in expr()) {
                let text = e.to_string();
                let back = parse_expr(&text).map_err(|err| TestCaseError::fail(format!("{text}: {err}")))?;
                prop_assert_eq!(back, e, "{}", text);
            }

            /// Arbitrary input never panics, and an error points inside (or just past) it.
            #[test]
            fn garbage_is_an_error_not_a_panic(src in "[ -~]{0,40}") {
                if let Err(e) = parse_expr(&src) {
                    prop_assert!(e.column >= 1 && e.column <= src.chars().count() + 1);
                }
            }
        }
    }
}
