//! The judge: golden rules, convergence expressions, the exact lane, stability, the exact check
//! of each weight sync, presence, multi-seed statistics, and the verdict they make.
//!
//! `tables` takes a finished (or stopped) run's `MetricTable`, the golden (if any) and the
//! scenario's `ChecksSpec`, and returns a `Verdict`: one `RuleVerdict` per rule, each with the
//! evidence that decided it (the step or window, the value, the golden, the band, the margin).
//! `judge_run` judges a whole run from what its directory stores (`run::RunRecord`);
//! `stored` reads a run directory and its golden back for it, and `combined` judges a
//! multi-seed run's directory. Only those two read files, and `live`, the rules a run watches
//! while it runs (`FailFast`, the runner's `LiveJudge`), reads the golden it watches against;
//! nothing here writes or renders.

pub(crate) mod audit;
pub(crate) mod budget;
mod calibrated;
pub(crate) mod calibrating;
mod combined;
pub(crate) use crate::model::checks::direction::default_direction;
pub mod exact;
mod headline;
pub(crate) mod lint;
mod live;
mod loosened;
mod presence;
mod run;
pub(crate) mod seeds;
pub(crate) mod stability;
mod stored;
mod tables;
mod verdict;
pub(crate) mod weight_sync;

pub use crate::model::checks::expr;
#[cfg(test)]
pub(crate) use crate::model::checks::ChecksSpec;
pub(crate) use crate::model::checks::{ExpectedVerdict, GoldenRule};
pub(crate) use calibrated::{band_widths, judged_against, live_checks};
pub use combined::CombinedError;
pub(crate) use combined::{judge_combined, Combined};
pub(crate) use headline::{Decision, Headline, Judged};
pub use live::FailFast;
pub use run::{judge_run, RunRecord, REPLAY_RULE};
pub use stored::StoredError;
pub(crate) use stored::{provenance_of_run, reference_golden, StoredRun};
pub(crate) use tables::{first_settled_failure, ExpectedMismatch};
pub use verdict::{
    Band, Evidence, Outcome, PointCheck, RuleStatus, RuleVerdict, RunOutcome, Verdict,
};

/// The one judge (`judge_run`) of a completed run of the series `run` against a reference
/// series, for the unit tests that judge tables.
#[cfg(test)]
pub(crate) fn judge_tables(
    run: &crate::model::metrics::MetricTable,
    reference: Option<&crate::model::metrics::MetricTable>,
    checks: &ChecksSpec,
) -> Verdict {
    let golden = reference.map(|t| crate::model::golden::Golden::of_table(t.clone()));
    judge_run(&RunRecord::completed(run, checks, 1), golden.as_ref())
        .expect("a completed run is judged")
}
