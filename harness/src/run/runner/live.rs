//! The judge a run consults while it runs, handed in by its caller (`RunOptions::live_judge`):
//! the runner judges no rule itself. The watchdog asks it, after every step, whether a rule
//! marked `fail_fast` can no longer pass; the judge's answer is `judge::FailFast`, which `app`
//! and `propagate` hand in.

use crate::model::metrics::MetricTable;
use crate::run::plan::RunPlan;

use super::RunOptions;

/// What a run asks the judge while it runs.
pub trait LiveJudge: std::fmt::Debug + Send + Sync {
    /// The rules one run of `plan` watches, ready to judge its steps: `opts` says where its
    /// golden store is (`golden`, `ci`), `hardware` the key its golden is kept under.
    fn watch(&self, plan: &RunPlan, opts: &RunOptions, hardware: &str) -> Box<dyn LiveRules>;
}

/// The rules one run watches live.
pub trait LiveRules: Send + Sync {
    /// The first rule marked `fail_fast` that the steps so far (`table`, of `total_steps`)
    /// already fail, by its id; `None` while every one can still pass.
    fn first_settled_failure(&self, table: &MetricTable, total_steps: u64) -> Option<String>;
}
