//! `rlharness propagate SCENARIO`: the knob propagation matrix run, judged and reported.

use std::path::Path;

use crate::app::cli::{Executor, RayArgs};
use crate::app::scale::ray::RayJobs;
use crate::model::error::{CommandError, ExitStatus};
use crate::tools::propagate::command::{
    run_matrix_on, write_reports, MatrixOptions, TrialExecutor,
};

/// Run the matrix of `scenario` (each trial here, or one Ray job each with `--executor ray`)
/// and write `propagation.{md,html,junit.xml}` under `out/<scenario>/propagate-<stamp>/`.
/// Exit: 0 nothing flagged but known gaps, 1 a new flag or a known gap that closed, 2 a bad
/// manifest or scenario, 3 a run failed.
pub(crate) async fn propagate(
    scenario: &Path,
    out: &Path,
    set: &[String],
    options: &MatrixOptions,
    ray: RayArgs,
) -> Result<ExitStatus, CommandError> {
    let jobs = match ray.executor {
        Executor::Local => None,
        Executor::Ray => Some(RayJobs::new(ray)?),
    };
    let trials = jobs.as_ref().map(|j| j.trials(&[]));
    let remote = trials.as_ref().map(|t| t as &dyn TrialExecutor);
    let (report, dir, failed) = run_matrix_on(scenario, out, set, options, remote).await?;
    write_reports(&report, &dir)?;
    outln!("{}", report.terminal_summary());
    let mut status = if report.passed() {
        ExitStatus::Passed
    } else {
        ExitStatus::CheckFailed
    };
    if failed {
        status = status.worst(ExitStatus::RunFailed);
    }
    outln!("verdict: {} (exit {})", status.word(), status.code());
    outln!(
        "report: {}\n        {} (beside them: propagation.junit.xml, propagation.json)",
        dir.join("propagation.html").display(),
        dir.join("propagation.md").display()
    );
    Ok(status)
}
