//! Convergence expressions: a pest grammar (`expr/expr.pest`), an AST, and its evaluation over one
//! run's series. Parsing validates everything that can be known without data (window sizes,
//! step ranges), so a bad expression fails when the scenario is loaded, not after a long run.
//!
//! By part: `ast.rs` the syntax tree, `parse.rs` the parser and its errors, `eval.rs` the
//! evaluation and the aggregates, `bounds.rs` the fail-fast check of a run still going.

mod ast;
mod bounds;
mod eval;
mod parse;
#[cfg(test)]
mod tests;

pub use ast::{AggFn, ArithOp, CmpOp, Expr, Num, Pred, Selection};
pub(crate) use eval::{aggregate, fmt_num, EvalIssue};
pub use parse::{parse_expr, ExprError};
