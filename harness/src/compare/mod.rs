//! Golden rules, convergence expressions and verdicts.
//!
//! `judge` takes a finished (or stopped) run's `MetricTable`, the golden (if any) and the
//! scenario's `ChecksSpec`, and returns a `Verdict`: one `RuleVerdict` per rule, each with the
//! evidence that decided it (the step or window, the value, the golden, the band, the margin).
//! Nothing here reads or writes files.

mod direction;
pub mod exact;
mod judge;
mod loosened;
mod presence;
mod run;
pub mod seeds;
pub mod stability;

pub use crate::checks::expr;
pub use crate::checks::{parse_expr, Expr, ExprError};
pub use crate::checks::{
    Calibrated, ChecksSpec, Direction, Expectation, ExpectedOutcome, ExpectedVerdict, GoldenRule,
    GoldenRules, ImprovementLimit, RuleRef, StepRange,
};
pub use direction::default_direction;
pub use judge::{
    can_still_pass, first_settled_failure, judge, judge_tables, match_expected, Band, Evidence,
    Outcome, PointCheck, RuleStatus, RuleVerdict, RunOutcome, RunStatus, Verdict,
};
pub use loosened::loosened_rules;
pub use presence::judge_presence;
pub use run::{
    is_insane, judge_run, watchdog_rule_id, DroppedValue, ReplayRecord, RunRecord,
    FRACTION_METRICS, REPLAY_RULE,
};
