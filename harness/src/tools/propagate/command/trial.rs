//! One trial's run as the matrix sees it: how it ended, and what its wire shows, the same
//! whether it ran here or elsewhere; and what a trial executor elsewhere is told and answers
//! (`propagate --executor ray`: each trial one Ray job, its run directory brought back).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::RunResult;
use crate::run::runner::StopAt;
use crate::tools::propagate::observed::{WireCut, WireSnapshot};
use crate::tools::propagate::PropagateError;

/// One trial run to execute elsewhere: what a local trial's `RunOptions` hold, as a `run` of
/// the matrix's scenario takes them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RemoteTrial {
    /// The matrix's `--set` values, then the trial's overrides (`++config.path=value`).
    pub(crate) set: Vec<String>,
    /// Its steps (the builtin driver's reach), in place of the scenario's.
    pub(crate) steps: Option<u64>,
    /// Where it stops on purpose.
    pub(crate) stop_at: Option<StopAt>,
    /// The matrix's experiment name, shared by its trials.
    pub(crate) experiment_name: String,
    /// Its name in the lines printed.
    pub(crate) label: String,
}

/// What came back of a trial run elsewhere: its run directory here, or why there is none.
pub(crate) type RemoteEnd = Result<PathBuf, RemoteError>;

/// Why a trial run elsewhere gave no run to judge.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoteError {
    /// No run directory came back: what the executor says of the job, and where it ran.
    #[error("{summary} ({placement})")]
    NoRunDir { summary: String, placement: String },
    #[error("the run came back without its run.json: {0}")]
    NoManifest(crate::model::rundir::ManifestError),
}

/// Told of each trial as it ends: its index among the trials given, what came back, and its
/// seconds from submission to its end.
pub(crate) type TrialDone = Arc<dyn Fn(usize, RemoteEnd, f64) + Send + Sync>;

/// Runs a matrix's trials somewhere else than this host. The matrix plans, splits and judges
/// as it does locally; the executor only replaces "execute one trial run".
pub(crate) trait TrialExecutor: Send + Sync {
    /// Run every trial of `scenario`, at most `jobs` at once, their run directories collected
    /// under `out`; `done` is told of each as it ends. An error: the trials could not be run at
    /// all (the executor cannot be reached, or refuses).
    fn run<'a>(
        &'a self,
        scenario: &'a Path,
        trials: Vec<RemoteTrial>,
        jobs: usize,
        out: &'a Path,
        done: TrialDone,
    ) -> BoxFuture<'a, Result<(), PropagateError>>;
}

/// Why a trainer's run shows nothing on the wire, when it cannot: it talks over Ray.
pub(super) fn over_ray(config: &Value) -> Option<String> {
    let protocol = crate::run::knobs::lookup(config, crate::tools::propagate::group::TRANSPORT)?;
    (protocol.as_str() == Some("ray")).then(|| {
        "not observable over Ray: the trainer's Arctic client talks to the server over Ray, \
         which the recording proxy cannot see; run with remote_backend.comms.protocol=http"
            .to_string()
    })
}

/// How a trial's run ended, wherever it ran.
pub(super) struct Ended {
    /// Its run directory.
    pub(super) run_dir: PathBuf,
    /// It ran as far as it was asked (a stop on purpose included).
    pub(super) completed: bool,
    /// How it ended, in a word (`failed`, `hang`).
    pub(super) status: String,
    /// Why, when it did not complete (or exited without reaching the wire).
    pub(super) reason: Option<String>,
    /// The trainer's last lines, when it failed or never reached the wire.
    pub(super) trainer_tail: Option<String>,
}

/// What a trial's wire shows (cut where a stopped trial was stopped), or why it shows nothing.
pub(super) fn trial_result(
    ended: Ended,
    config: Value,
    label: &str,
    stop_at: Option<StopAt>,
    reach: WireCut,
) -> RunResult {
    let cut = match stop_at {
        Some(StopAt::Initialized) => Some(WireCut::Initialized),
        Some(StopAt::Steps(n)) => Some(WireCut::Steps(n)),
        None => None,
    };
    let ray = over_ray(&config);
    let tail = |t: &Option<String>| match t {
        Some(t) => format!("; the trainer's last lines:\n{t}"),
        None => String::new(),
    };
    let run_dir = &ended.run_dir;
    // A trainer that sent nothing through the proxy: over Ray, or broken.
    let silent = std::fs::metadata(run_dir.join("wire.jsonl")).map_or(true, |m| m.len() == 0);
    match (ended.completed, silent, ray) {
        (_, true, Some(why)) => RunResult::NotObservable(why),
        (_, true, None) => RunResult::Failed(format!(
            "the trainer never reached the wire in the run with {label} ({}, {}){}",
            ended
                .reason
                .clone()
                .unwrap_or_else(|| "it exited cleanly".into()),
            run_dir.display(),
            tail(&ended.trainer_tail)
        )),
        (true, false, _) => match WireSnapshot::load_run_until(run_dir, cut) {
            Ok(wire) => RunResult::Ran {
                wire,
                config,
                dir: run_dir.clone(),
                reach,
            },
            Err(e) => RunResult::Failed(e.to_string()),
        },
        (false, false, _) => RunResult::Failed(format!(
            "{} ({}){}",
            ended.reason.clone().unwrap_or(ended.status.clone()),
            run_dir.display(),
            tail(&ended.trainer_tail)
        )),
    }
}

/// How a trial run elsewhere ended, from the run directory it brought back (moved to `dir`,
/// the folder a local trial would have used), or why none came.
pub(super) fn remote_ended(end: RemoteEnd, dir: &Path) -> Result<Ended, RemoteError> {
    let came = end?;
    let run_dir = if came == dir {
        came
    } else {
        match std::fs::rename(&came, dir) {
            Ok(()) => dir.to_path_buf(),
            // Kept where it came back, and named there.
            Err(_) => came,
        }
    };
    let manifest =
        crate::model::rundir::RunManifest::read(&run_dir).map_err(RemoteError::NoManifest)?;
    let completed = manifest.status == crate::model::rundir::RunStatus::Completed;
    let tail = ["stderr.log", "stdout.log"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(run_dir.join(f)).ok())
        .map(|t| last_lines(&t, 20))
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join("");
    Ok(Ended {
        completed,
        status: manifest.status.as_str().to_string(),
        reason: manifest.reason.clone(),
        trainer_tail: (!completed && !tail.is_empty()).then_some(tail),
        run_dir,
    })
}

/// The last `n` lines of `text`, each ending in a newline.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect()
}
