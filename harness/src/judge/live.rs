//! The judge's answer to the runner's live question (`runner::LiveJudge`): the scenario's
//! `fail_fast` rules, calibrated bands resolved against the golden's calibration
//! (`live_checks`), judged on the steps so far (`first_settled_failure`).

use std::sync::Arc;

use crate::model::checks::ChecksSpec;
use crate::model::golden::GoldenStore;
use crate::model::metrics::MetricTable;
use crate::run::plan::RunPlan;
use crate::run::runner::{LiveJudge, LiveRules, RunOptions};

/// Fail fast: a run stops at the first step after which a `fail_fast` rule can no longer pass,
/// judged against the golden of the run's store (`RunOptions::golden`).
#[derive(Debug, Clone, Copy, Default)]
pub struct FailFast;

impl FailFast {
    /// The judge as the runner's options take it (`RunOptions::live_judge`).
    pub fn handed() -> Arc<dyn LiveJudge> {
        Arc::new(FailFast)
    }
}

impl LiveJudge for FailFast {
    fn watch(&self, plan: &RunPlan, opts: &RunOptions, hardware: &str) -> Box<dyn LiveRules> {
        let checks = &plan.scenario.checks;
        // The golden series, loaded only when a golden rule is marked `fail_fast`.
        let golden = checks
            .golden
            .iter()
            .any(|(_, r)| r.fail_fast)
            .then(|| {
                GoldenStore::with_ci(&opts.golden, opts.ci)
                    .load(&plan.scenario.name, hardware)
                    .ok()
                    .flatten()
            })
            .flatten();
        let checks = super::live_checks(checks, golden.as_ref());
        Box::new(Watched {
            checks,
            golden: golden.map(|g| g.table),
        })
    }
}

/// One run's rules watched live, calibrated bands resolved, and the golden series they judge
/// against.
struct Watched {
    checks: ChecksSpec,
    golden: Option<MetricTable>,
}

impl LiveRules for Watched {
    fn first_settled_failure(&self, table: &MetricTable, total_steps: u64) -> Option<String> {
        super::first_settled_failure(&self.checks, self.golden.as_ref(), table, total_steps)
    }
}
