//! `rlharness run` for one scenario, as named stages (`stages`): prepare the run directory,
//! start the backend, start the recording proxy, start the driver; then the event loop
//! (`drive`) feeds the observers of the run's events (`observe`: sanity filter, progress,
//! watchdog, TensorBoard event files (`tensorboard`), CSV sink, stop-on-purpose, request
//! time-out) until the run's end is decided; the watchdog's fail-fast rules are judged by the
//! judge the caller hands in (`live`: `RunOptions::live_judge`);
//! then finish: stop the driver, the proxy and the backend, and write `run.json`. Whatever
//! happens, the run directory is left valid: `run.json` says how the run ended and
//! `metrics.csv` holds every finished step. Judging and reporting come after (`app`).

mod drive;
pub(crate) mod env;
mod error;
mod live;
mod observe;
mod stages;
mod tensorboard;

use std::path::PathBuf;
use std::time::Duration;

use crate::model::events;
use crate::model::metrics::MetricTable;
use crate::model::rundir::{RunManifest, RunStatus};
use crate::run::driver::DriverSpec;
use crate::run::plan::RunPlan;

pub(crate) use env::RunEnv;
pub use error::RunError;
pub use live::{LiveJudge, LiveRules};
pub(crate) use stages::create_run_dir;
pub use tensorboard::TensorBoard;

/// Options of `rlharness run` that apply to every scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub out: PathBuf,
    pub golden: PathBuf,
    pub seed: Option<u64>,
    pub steps: Option<u64>,
    pub set: Vec<String>,
    pub update_golden: bool,
    pub hardware: Option<String>,
    /// A progress bar on a terminal (`--no-progress` turns it off).
    pub progress: bool,
    /// One plain line per step on stderr where no bar is drawn (a CI log, `--no-progress`);
    /// off under `-q` and for runs inside another command's progress (propagation trials).
    pub step_lines: bool,
    /// What the progress bar or line names instead of the scenario (`NAME seed 3`).
    pub progress_label: Option<String>,
    /// `CI=true`: never write a golden.
    pub ci: bool,
    /// Put the run exactly here instead of `OUT/<scenario>/<run-id>/` (propagation runs).
    pub run_dir: Option<PathBuf>,
    /// Stop the run on purpose, as completed, once the wire shows this (propagation trials).
    pub stop_at: Option<StopAt>,
    /// The experiment name a command trainer gets (`trainer.experiment_name`), instead of one
    /// made from the run directory: propagation trials share one, so the paths verl derives
    /// from it (the checkpoint directory) do not differ between a trial and its baseline.
    pub experiment_name: Option<String>,
    /// `run --direct`: the builtin driver talks to the backend without the recording proxy
    /// (no `wire.jsonl`, `server_config.json` or cassette), to measure what the proxy costs
    /// inside a real step. The run is judged as usual; its report says the wire was not seen.
    pub direct: bool,
    /// `run --label`: what the run's `run.json` names the code under test (a history orders
    /// and attributes runs by it).
    pub label: Option<String>,
    /// A command trainer on a fixed address runs in a network namespace of its own (runs of
    /// one such scenario side by side; netns.rs).
    pub netns: Option<crate::run::netns::Netns>,
    /// A calibration run (`golden calibrate`): written under `OUT/<scenario>/calibrations/`,
    /// never moving `OUT/<scenario>/latest`, and marked in `run.json` so that no history
    /// counts it as a run of the scenario.
    pub calibration: bool,
    /// `run --tensorboard DIR`: the series also as TensorBoard event files under
    /// `DIR/<scenario>/<run-id>/` (a seed's under its multi-seed run's folder).
    pub tensorboard: Option<PathBuf>,
    /// A single-run self-test's reference, made already on this host by the caller (the
    /// scenario as written, its seed and steps): the planted run is judged against it instead of
    /// a reference made again. The test suite shares one among the self-tests of one scenario;
    /// the command line never sets it.
    pub reference_run: Option<PathBuf>,
    /// The judge the watchdog asks after every step whether a `fail_fast` rule can no longer
    /// pass (the runner judges no rule itself): `judge::FailFast`, which `app` hands in for
    /// every run it executes. `None`: no rule fails fast.
    pub live_judge: Option<std::sync::Arc<dyn LiveJudge>>,
}

impl RunOptions {
    /// Runs into `out`, goldens read from `golden`; everything else off (the scenario's own
    /// seed and steps, no overrides, no progress bar or step lines, never writing a golden, no
    /// stop on purpose, no live judge).
    pub fn new(out: PathBuf, golden: PathBuf) -> Self {
        Self {
            out,
            golden,
            seed: None,
            steps: None,
            set: Vec::new(),
            update_golden: false,
            hardware: None,
            progress: false,
            step_lines: false,
            progress_label: None,
            ci: true,
            run_dir: None,
            stop_at: None,
            experiment_name: None,
            direct: false,
            label: None,
            netns: None,
            calibration: false,
            tensorboard: None,
            reference_run: None,
            live_judge: None,
        }
    }
}

/// A point on the wire after which a propagation trial has seen what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAt {
    /// Every job is initialized: the first request after at least one answered `/initialize`.
    Initialized,
    /// Training step `n` is over on the wire: the first `/generate` after the `n`-th step's
    /// `/step` calls (the next step began, so the update and the weight sync are done).
    Steps(u64),
}

/// A `--stop-at` that names no stopping point.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("`{0}`: expected initialize or steps:N (N >= 1)")]
pub struct UnknownStopAt(String);

impl std::str::FromStr for StopAt {
    type Err = UnknownStopAt;
    fn from_str(s: &str) -> Result<Self, UnknownStopAt> {
        match s {
            "initialize" => Ok(StopAt::Initialized),
            _ => match s.strip_prefix("steps:").map(str::parse::<u64>) {
                Some(Ok(n)) if n >= 1 => Ok(StopAt::Steps(n)),
                _ => Err(UnknownStopAt(s.to_string())),
            },
        }
    }
}

impl std::fmt::Display for StopAt {
    /// The form [`StopAt::from_str`] reads back (`run --stop-at`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopAt::Initialized => f.write_str("initialize"),
            StopAt::Steps(n) => write!(f, "steps:{n}"),
        }
    }
}

/// How the run itself ended (before judging).
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    Completed,
    /// Driver or backend failure: the reason, the step and the route if known.
    Failed {
        reason: String,
        step: Option<u64>,
        route: Option<String>,
    },
    /// A watchdog fired: no step within `timeouts.step`, or past `timeouts.run`.
    Hang {
        reason: String,
        step: u64,
    },
    /// Ctrl-C (SIGINT) or SIGTERM: the run stops, its finished steps and reports are kept.
    Interrupted {
        step: u64,
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
    },
    /// Stopped on purpose by the watchdog: a non-finite watched metric, or a fail-fast rule
    /// that can no longer pass.
    Aborted {
        reason: String,
        step: u64,
    },
}

impl RunEnd {
    pub(crate) fn status(&self) -> &'static str {
        match self {
            RunEnd::Completed => "completed",
            RunEnd::Failed { .. } => "failed",
            RunEnd::Hang { .. } => "hang",
            RunEnd::Interrupted { .. } => "interrupted",
            RunEnd::Aborted { .. } => "aborted",
        }
    }
    pub(crate) fn run_status(&self) -> RunStatus {
        match self {
            RunEnd::Completed => RunStatus::Completed,
            RunEnd::Failed { .. } => RunStatus::Failed,
            RunEnd::Hang { .. } => RunStatus::TimedOut,
            RunEnd::Interrupted { .. } => RunStatus::Interrupted,
            RunEnd::Aborted { .. } => RunStatus::Aborted,
        }
    }
    pub(crate) fn step(&self) -> Option<u64> {
        match self {
            RunEnd::Completed => None,
            RunEnd::Failed { step, .. } => *step,
            RunEnd::Hang { step, .. }
            | RunEnd::Interrupted { step, .. }
            | RunEnd::Aborted { step, .. } => Some(*step),
        }
    }
    pub fn reason(&self) -> Option<String> {
        match self {
            RunEnd::Completed => None,
            RunEnd::Failed { reason, .. }
            | RunEnd::Hang { reason, .. }
            | RunEnd::Aborted { reason, .. } => Some(reason.clone()),
            RunEnd::Interrupted { step, signal } => Some(match *signal {
                "SIGINT" => format!("interrupted (Ctrl-C, SIGINT) during step {step}"),
                other => format!("stopped by {other} during step {step}"),
            }),
        }
    }
}

/// What one executed scenario produced.
#[derive(Debug)]
pub struct Executed {
    pub(crate) manifest: RunManifest,
    pub(crate) env: RunEnv,
    pub(crate) plan: RunPlan,
    pub(crate) run_dir: PathBuf,
    pub end: RunEnd,
    pub metrics: MetricTable,
    /// A replay backend's account of the requests it was sent.
    pub replay: Option<crate::run::backend::replay::ReplayOutcome>,
    pub(crate) ended: chrono::DateTime<chrono::Utc>,
    /// An external trainer's last output lines, when the run did not complete.
    pub(crate) trainer_tail: Option<String>,
    /// The run's TensorBoard event files, still open: the judge's golden and bands go there
    /// too.
    pub tensorboard: TensorBoard,
}

/// Run one planned scenario to its end (not judged yet).
pub async fn execute(plan: RunPlan, opts: &RunOptions) -> Result<Executed, RunError> {
    execute_with(plan, opts, false).await
}

/// [`execute`], keeping the whole wire traffic as a cassette in `<run dir>/cassette/`
/// (`rlharness record`).
pub async fn execute_recording(plan: RunPlan, opts: &RunOptions) -> Result<Executed, RunError> {
    execute_with(plan, opts, true).await
}

/// How long an external trainer's process group gets between TERM and KILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

async fn execute_with(
    plan: RunPlan,
    opts: &RunOptions,
    record: bool,
) -> Result<Executed, RunError> {
    let started = chrono::Utc::now();
    let timeouts = plan.scenario.timeouts.clone();
    let request_timeout = timeouts.request.unwrap_or(Duration::from_secs(1800));

    let mut p = stages::prepare(&plan, opts, started)?;
    tracing::info!("stage prepare: run directory {}", p.run_dir.display());
    let backend = stages::start_backend_stage(&plan, opts, started, &mut p).await?;
    tracing::info!(
        "stage backend: {}",
        backend
            .as_ref()
            .map_or("none (the trainer brings its own)".to_string(), |b| b
                .url
                .clone())
    );
    let (tx, mut rx) = events::channel();
    let wire = stages::start_proxy(
        &plan,
        opts,
        record,
        backend.as_ref(),
        &mut p,
        request_timeout,
        &tx,
    )
    .await?;
    tracing::info!(
        "stage proxy: {}",
        wire.proxy_url
            .as_deref()
            .unwrap_or("none (--direct, or no backend to record)")
    );
    let (mut driver_task, trainer) =
        stages::start_driver(&plan, opts, &mut p, &wire, request_timeout, tx)?;
    tracing::info!(
        "stage driver: {}",
        match &trainer {
            Some(_) => "the trainer's command started",
            None => "the builtin driver started",
        }
    );

    let stages::Prepared {
        run_dir,
        env,
        mut manifest,
        csv,
        ..
    } = p;
    let tensorboard = TensorBoard::open(&plan, opts, &run_dir);
    let mut observers = observe::Observers::new(
        &plan,
        opts,
        &env.hardware,
        csv,
        tensorboard,
        request_timeout,
    );
    let limits = drive::Limits {
        step: timeouts.step,
        run: timeouts.run,
    };
    let driven = drive::drive(
        &mut rx,
        &mut driver_task,
        &mut observers,
        limits,
        wire.proxy.as_ref(),
        trainer.as_ref(),
    )
    .await;
    let silent_wire = || {
        wire.proxy_url.is_some()
            && std::fs::metadata(run_dir.join("wire.jsonl")).is_ok_and(|m| m.len() == 0)
    };
    tracing::info!("stage drive: ended ({:?})", driven.end);
    let strays = stages::stop_driver(trainer.as_ref(), &mut driver_task, driven.driver_done).await;
    let trainer_tail = trainer
        .as_ref()
        .filter(|_| driven.end != RunEnd::Completed || silent_wire())
        .map(|t| t.tail())
        .filter(|t| !t.is_empty());
    // Steps the driver finished while it was being stopped are kept.
    while let Ok(ev) = rx.try_recv() {
        observers.late_event(ev);
    }
    observers.finished();
    let (end, replay) = stages::stop_servers(wire.proxy, backend, driven.end).await;
    tracing::info!("stage stop: driver, proxy and backend stopped");
    let silent = silent_wire();

    if silent && matches!(plan.scenario.driver, DriverSpec::Command(_)) && manifest.notes.is_empty()
    {
        manifest.notes.push(format!(
            "no wire observed: the trainer sent no request through the recording proxy at {}",
            wire.proxy_url.as_deref().unwrap_or("?")
        ));
    }
    if let (DriverSpec::Command(_), (_, Some(note))) = (
        &plan.scenario.driver,
        crate::run::plan::launch::trainer_loggers(&plan),
    ) {
        manifest.notes.push(note);
    }
    let observe::Observers {
        csv,
        mut tensorboard,
        sanity,
        stop_at,
        weight_sync,
        ..
    } = observers;
    manifest.notes.append(&mut tensorboard.notes);
    if let Some(why) = stop_at.why {
        manifest.notes.push(why);
    }
    if let Some(why) = weight_sync.as_ref().and_then(|w| w.unavailable.as_ref()) {
        manifest.notes.push(why.clone());
    }
    manifest.weight_sync = weight_sync;
    record_strays(&mut manifest, strays);
    for n in trainer.as_ref().map(|t| t.notes()).unwrap_or_default() {
        tracing::warn!("{n}");
        manifest.notes.push(n);
    }
    let ended = chrono::Utc::now();
    let metrics = csv.into_table();
    env::finalize_manifest(&mut manifest, &end, &sanity.dropped, replay.as_ref(), ended);
    env::write_manifest(&run_dir, &manifest)?;
    Ok(Executed {
        manifest,
        env,
        plan,
        run_dir,
        end,
        metrics,
        replay,
        ended,
        trainer_tail,
        tensorboard,
    })
}

/// Processes the trainer left outside its process group and the harness stopped: in
/// `run.json` (`strays`), and as a note of the report and a warning of the log.
fn record_strays(manifest: &mut RunManifest, strays: Vec<crate::run::driver::strays::Stray>) {
    if let Some(n) = crate::run::driver::strays::note(&strays) {
        tracing::warn!("{n}");
        manifest.notes.push(n);
    }
    manifest.strays = strays;
}
