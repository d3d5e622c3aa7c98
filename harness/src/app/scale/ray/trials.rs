//! Another command's runs as Ray jobs over several calls: a propagation matrix's trials
//! (`propagate`, `bisect --propagate`; each round of the matrix one call) and a bisect's seeds
//! (each commit's batch one call), with one Ctrl-C for the whole command.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::job_plan::{JobBatch, JobRun, OnDone};
use crate::app::cli::{RayArgs, RunArgs};
use crate::app::scale::index::Entry;
use crate::model::error::CommandError;
use crate::tools::propagate::command::{
    RemoteEnd, RemoteError, RemoteTrial, TrialDone, TrialExecutor,
};
use crate::tools::propagate::PropagateError;

/// A command's Ray jobs: the cluster's options, and whether Ctrl-C came (then no later call
/// submits anything; the calls under way stop their jobs themselves).
pub(crate) struct RayJobs {
    pub(crate) ray: RayArgs,
    interrupted: Arc<AtomicBool>,
    listener: tokio::task::JoinHandle<()>,
}

impl RayJobs {
    /// Checks that `--executor ray` has its `--address` (exit 2 naming the flag, before
    /// anything runs). Inside the runtime: it listens for Ctrl-C until dropped.
    pub(crate) fn new(ray: RayArgs) -> Result<RayJobs, CommandError> {
        if ray.address.as_deref().is_none_or(str::is_empty) {
            return Err(CommandError::invalid(
                "--executor ray needs --address http://HEAD:8265 (or RAY_ADDRESS)",
            ));
        }
        let interrupted = Arc::new(AtomicBool::new(false));
        let flag = interrupted.clone();
        let listener = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                flag.store(true, Ordering::SeqCst);
            }
        });
        Ok(RayJobs {
            ray,
            interrupted,
            listener,
        })
    }

    /// Ctrl-C came.
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// The options of runs of `scenario` as this command's jobs: collected under `out`, their
    /// goldens read from `golden`, with `hardware` and `set`. Like the local runs of
    /// `propagate` and `bisect`, they never write a golden (`CI=true` in the job).
    pub(crate) fn args(
        &self,
        scenario: &Path,
        out: &Path,
        golden: &Path,
        hardware: Option<String>,
        set: &[String],
    ) -> RunArgs {
        let mut args = RunArgs::for_jobs(
            scenario,
            self.ray.clone(),
            out.to_path_buf(),
            golden,
            hardware,
            set,
        );
        args.ray.ray_env.push("CI=true".into());
        args
    }

    /// A call's batch: at most `in_flight` jobs at once, `sources` shipped with them.
    pub(crate) fn batch(
        &self,
        in_flight: usize,
        sources: &[(String, PathBuf)],
        on_done: Option<OnDone>,
    ) -> JobBatch {
        JobBatch {
            in_flight,
            sources: sources.to_vec(),
            on_done,
            interrupted: self.interrupted.clone(),
        }
    }

    /// The executor of a matrix's trials, each one Ray job with `sources` shipped.
    pub(crate) fn trials<'a>(&'a self, sources: &[(String, PathBuf)]) -> RayTrials<'a> {
        RayTrials {
            jobs: self,
            sources: sources.to_vec(),
        }
    }
}

impl Drop for RayJobs {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// A propagation matrix's trials as Ray jobs: each runs `rlharness run` of the matrix's
/// scenario with the trial's overrides, steps, stop point and experiment name, and its run
/// directory comes back for the matrix to judge as a local trial's.
pub(crate) struct RayTrials<'a> {
    jobs: &'a RayJobs,
    /// Trainer sources shipped with every trial (a bisect's worktree of one commit).
    sources: Vec<(String, PathBuf)>,
}

impl TrialExecutor for RayTrials<'_> {
    fn run<'a>(
        &'a self,
        scenario: &'a Path,
        trials: Vec<RemoteTrial>,
        jobs: usize,
        out: &'a Path,
        done: TrialDone,
    ) -> BoxFuture<'a, Result<(), PropagateError>> {
        Box::pin(async move {
            // A local trial reads `golden/` here (a fail-fast rule's golden): the job reads the
            // package's copy of it.
            let args = self
                .jobs
                .args(scenario, out, Path::new("golden"), None, &[]);
            let runs: Vec<JobRun> = trials
                .into_iter()
                .map(|t| JobRun {
                    set: t.set,
                    steps: t.steps,
                    stop_at: t.stop_at,
                    experiment_name: Some(t.experiment_name),
                    label: Some(t.label),
                    ..JobRun::of(scenario, None)
                })
                .collect();
            let on_done: OnDone = Arc::new(move |i, e: &Entry| done(i, remote_end(e), e.seconds));
            let batch = self.jobs.batch(jobs, &self.sources, Some(on_done));
            super::run_jobs(&runs, &args, &batch)
                .await
                .map_err(PropagateError::Executor)?;
            Ok(())
        })
    }
}

/// A trial job's end as the matrix takes it: the run directory it brought back, or why none
/// came (the job's own words and where it ran).
fn remote_end(e: &Entry) -> RemoteEnd {
    match &e.run_dir {
        Some(d) if d.join("run.json").is_file() => Ok(d.clone()),
        _ => Err(RemoteError::NoRunDir {
            summary: e.summary.clone(),
            placement: e.placement.clone(),
        }),
    }
}
