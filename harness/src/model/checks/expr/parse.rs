//! Parsing: the pest grammar (`expr.pest`) to the syntax tree, validating all that is known
//! without data (window sizes, step ranges), with the column of each error.

use pest::iterators::Pair;
use pest::Parser;

use super::{AggFn, ArithOp, CmpOp, Expr, Num, Pred, Selection};
use crate::model::metrics::StepRange;

#[derive(pest_derive::Parser)]
#[grammar = "model/checks/expr/expr.pest"]
struct ExprParser;

/// A parse error with the 1-based column in the expression source.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ExprError {
    pub(crate) column: usize,
    pub(crate) message: String,
}

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
