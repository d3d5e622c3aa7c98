//! Golden rules, convergence expressions and verdicts.
//!
//! `judge` takes a finished (or stopped) run's `MetricTable`, the golden (if any) and the
//! scenario's `ChecksSpec`, and returns a `Verdict`: one `RuleVerdict` per rule, each with the
//! evidence that decided it (the step or window, the value, the golden, the band, the margin).
//! Nothing here reads or writes files.

mod direction;
pub(crate) use direction::default_direction;
pub mod exact;
mod judge;
mod loosened;
mod presence;
mod run;
pub(crate) mod seeds;
pub(crate) mod stability;

pub use crate::checks::expr;
pub(crate) use crate::checks::{ChecksSpec, ExpectedOutcome, ExpectedVerdict, GoldenRule};
#[cfg(test)]
pub(crate) use judge::judge_tables;
pub(crate) use judge::{first_settled_failure, match_expected};
pub use judge::{
    judge, Band, Evidence, Outcome, PointCheck, RuleStatus, RuleVerdict, RunOutcome, RunStatus,
    Verdict,
};
pub(crate) use run::{
    band_widths, is_insane, judged_against, live_checks, FRACTION_METRICS, REPLAY_RULE,
};
pub use run::{judge_run, DroppedValue, ReplayRecord, RunRecord};
