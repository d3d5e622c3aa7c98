//! Golden rules, convergence expressions and verdicts.
//!
//! `judge` takes a finished (or stopped) run's `MetricTable`, the golden (if any) and the
//! scenario's `ChecksSpec`, and returns a `Verdict`: one `RuleVerdict` per rule, each with the
//! evidence that decided it (the step or window, the value, the golden, the band, the margin).
//! Nothing here reads or writes files.

pub mod exact;
pub mod expr;
mod judge;
mod spec;

pub use expr::{parse_expr, Expr, ExprError};
pub use judge::{
    can_still_pass, first_settled_failure, judge, judge_run, judge_tables, match_expected, Band,
    Evidence, Outcome, PointCheck, RuleStatus, RuleVerdict, RunOutcome, RunStatus, Verdict,
};
pub use spec::{
    ChecksSpec, Direction, Expectation, ExpectedOutcome, ExpectedVerdict, GoldenRule, GoldenRules,
    RuleRef, StepRange,
};
