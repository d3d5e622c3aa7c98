//! `rlharness run` for one scenario: plan, start the backend and the recording proxy, drive,
//! stream metrics, watch for hangs, then judge and report. Whatever happens, the run directory
//! is left valid: `run.json` says how the run ended and `metrics.csv` holds every finished step.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::backend::BackendSpec;
use crate::compare::RunStatus;
use crate::driver::builtin::{self, DriverRun};
use crate::driver::client::ArcticClient;
use crate::driver::command::{self, Trainer};
use crate::driver::{translate, DriverSpec};
use crate::error::{CommandError, ExitStatus};
use crate::events::{self, RunEvent};
use crate::fsx;
use crate::metrics::{promised_peak_flops, MetricTable, MetricsCsvWriter, StepMetrics};
use crate::plan::RunPlan;
use crate::report::{KnobDiff, RunManifest};

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
    pub progress: bool,
    /// `CI=true`: never write a golden.
    pub ci: bool,
    /// Put the run exactly here instead of `OUT/<scenario>/<run-id>/` (propagation runs).
    pub run_dir: Option<PathBuf>,
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
    /// Ctrl-C.
    Interrupted {
        step: u64,
    },
    /// Stopped on purpose by the watchdog: a non-finite watched metric, or a fail-fast rule
    /// that can no longer pass.
    Aborted {
        reason: String,
        step: u64,
    },
}

impl RunEnd {
    pub fn status(&self) -> &'static str {
        match self {
            RunEnd::Completed => "completed",
            RunEnd::Failed { .. } => "failed",
            RunEnd::Hang { .. } => "hang",
            RunEnd::Interrupted { .. } => "interrupted",
            RunEnd::Aborted { .. } => "aborted",
        }
    }
    pub fn run_status(&self) -> RunStatus {
        match self {
            RunEnd::Completed => RunStatus::Completed,
            RunEnd::Failed { .. } => RunStatus::Failed,
            RunEnd::Hang { .. } => RunStatus::TimedOut,
            RunEnd::Interrupted { .. } => RunStatus::Interrupted,
            RunEnd::Aborted { .. } => RunStatus::Aborted,
        }
    }
    pub fn step(&self) -> Option<u64> {
        match self {
            RunEnd::Completed => None,
            RunEnd::Failed { step, .. } => *step,
            RunEnd::Hang { step, .. }
            | RunEnd::Interrupted { step }
            | RunEnd::Aborted { step, .. } => Some(*step),
        }
    }
    pub fn reason(&self) -> Option<String> {
        match self {
            RunEnd::Completed => None,
            RunEnd::Failed { reason, .. }
            | RunEnd::Hang { reason, .. }
            | RunEnd::Aborted { reason, .. } => Some(reason.clone()),
            RunEnd::Interrupted { step } => {
                Some(format!("interrupted (Ctrl-C) during step {step}"))
            }
        }
    }
}

/// What one executed scenario produced.
#[derive(Debug)]
pub struct Executed {
    pub manifest: RunManifest,
    pub env: RunEnv,
    pub plan: RunPlan,
    pub run_dir: PathBuf,
    pub end: RunEnd,
    pub metrics: MetricTable,
    /// Built-in sanity failures (e.g. an MFU outside (0, 1]) as (step, metric, value).
    pub insane: Vec<(u64, String, f64)>,
    /// A replay backend's account of the requests it was sent.
    pub replay: Option<crate::backend::replay::ReplayOutcome>,
    pub started: chrono::DateTime<chrono::Utc>,
    pub ended: chrono::DateTime<chrono::Utc>,
    /// An external trainer's last output lines, when the run did not complete.
    pub trainer_tail: Option<String>,
}

/// A backend running in-process, with what stops it.
struct RunningBackend {
    url: String,
    /// Where an in-process backend computes, and its numeric identity when deterministic.
    runtime: Option<crate::backend::Runtime>,
    /// The start-up flags of an in-process server (what `--training-gpus` etc. would be), so
    /// the propagation check sees them (`srv.*`).
    flags: Option<Value>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    replay: Option<crate::backend::replay::ReplayHandle>,
}

impl RunningBackend {
    async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

async fn start_backend(plan: &RunPlan) -> Result<RunningBackend, CommandError> {
    let runtime: Option<crate::backend::Runtime>;
    let engine: Arc<dyn crate::backend::Engine> = match &plan.scenario.backend {
        BackendSpec::Mock(script) => {
            runtime = Some(crate::backend::Runtime {
                device: "cpu".into(),
                threads: None,
                torch_version: None,
                numerics: Some(crate::backend::mock::MockEngine::numerics()),
            });
            Arc::new(
                crate::backend::mock::MockEngine::new(script.clone(), plan.scenario.seed)
                    .map_err(|e| CommandError::invalid(format!("backend: {e}")))?,
            )
        }
        #[cfg(feature = "torch")]
        BackendSpec::Torch(spec) => {
            // Building the model (and a warm start) is CPU-heavy: off the async threads.
            let (spec, seed) = (spec.beside(&plan.scenario.path), plan.scenario.seed);
            let engine = tokio::task::spawn_blocking(move || {
                crate::backend::torch::TorchEngine::new(&spec, seed)
            })
            .await
            .map_err(|e| CommandError::run_failed(format!("torch backend crashed: {e}")))?
            .map_err(|e| CommandError::run_failed(format!("torch backend: {e}")))?;
            runtime = Some(engine.runtime());
            Arc::new(engine)
        }
        #[cfg(not(feature = "torch"))]
        BackendSpec::Torch(_) => {
            return Err(CommandError::invalid(
                "backend `torch` needs a build with the cargo feature `torch`",
            ))
        }
        BackendSpec::Remote { url } => {
            return Ok(RunningBackend {
                url: url.trim_end_matches('/').to_string(),
                runtime: None,
                flags: None,
                stop: None,
                task: None,
                replay: None,
            })
        }
        BackendSpec::Replay { cassette } => {
            let dir = crate::backend::replay::resolve_cassette(&plan.scenario.path, cassette);
            let cassette =
                tokio::task::spawn_blocking(move || crate::backend::replay::Cassette::load(&dir))
                    .await
                    .map_err(|e| {
                        CommandError::run_failed(format!("loading the cassette crashed: {e}"))
                    })?
                    .map_err(|e| CommandError::invalid(format!("backend: {e}")))?;
            let r = crate::backend::replay::start(cassette)
                .await
                .map_err(|e| CommandError::invalid(format!("backend: {e}")))?;
            return Ok(RunningBackend {
                url: r.url,
                runtime: None,
                flags: None,
                stop: Some(r.stop),
                task: Some(r.task),
                replay: Some(r.handle),
            });
        }
        BackendSpec::None => {
            return Err(CommandError::invalid(format!(
                "backend kind {:?} is not supported by `run` yet",
                plan.scenario.backend
            )))
        }
    };
    let cfg = plan.scenario.config.to_json();
    let gpus = |k: &str, d: u32| {
        translate::lookup(&cfg, &format!("remote_backend.{k}"))
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(d)
    };
    let opts = crate::backend::server::ServerOptions {
        training_gpus: gpus("training_gpus", 1),
        sampling_gpus: gpus("sampling_gpus", 1),
        log_prob_gpus: gpus("log_prob_gpus", 0),
        ..Default::default()
    };
    let flags = serde_json::json!({
        "training_gpus": opts.training_gpus,
        "sampling_gpus": opts.sampling_gpus,
        "log_prob_gpus": opts.log_prob_gpus,
    });
    let (router, handle) = crate::backend::server::router(engine, opts);
    let router = match &plan.scenario.backend {
        BackendSpec::Mock(script) => crate::backend::mock::faults::inject(
            router,
            handle,
            &script.faults,
            script.seed.unwrap_or(plan.scenario.seed),
        ),
        _ => router,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CommandError::run_failed(format!("cannot bind the backend port: {e}")))?;
    let addr: SocketAddr = listener
        .local_addr()
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = crate::backend::server::serve(listener, router, async move {
            let _ = rx.await;
        })
        .await;
    });
    Ok(RunningBackend {
        url: format!("http://{addr}"),
        runtime,
        flags: Some(flags),
        stop: Some(tx),
        task: Some(task),
        replay: None,
    })
}

/// Create `OUT/<scenario>/<run-id>/` and point `OUT/<scenario>/latest` at it.
pub fn create_run_dir(
    out: &Path,
    scenario: &str,
    plan_hash: &str,
) -> Result<PathBuf, CommandError> {
    let base = out.join(scenario);
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let short = &plan_hash[..plan_hash.len().min(8)];
    let mut dir = base.join(format!("{stamp}-{short}"));
    let mut k = 1;
    while dir.exists() {
        k += 1;
        dir = base.join(format!("{stamp}-{short}-{k}"));
    }
    fsx::create_dir_all(&dir).map_err(|e| CommandError::run_failed(e.to_string()))?;
    let latest = base.join("latest");
    let _ = std::fs::remove_file(&latest);
    #[cfg(unix)]
    if let Some(name) = dir.file_name() {
        let _ = std::os::unix::fs::symlink(name, &latest);
    }
    Ok(dir)
}

/// Progress: a bar on a terminal, one plain line per step otherwise (CI logs).
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    name: String,
}

impl Progress {
    fn new(name: &str, total: u64, enabled: bool) -> Self {
        let tty = std::io::stderr().is_terminal();
        let bar = (enabled && tty).then(|| {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{bar:30}] step {pos}/{len} {msg} (ETA {eta})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(name.to_string());
            b
        });
        Self {
            bar,
            plain: enabled && !tty,
            name: name.to_string(),
        }
    }

    fn step(&self, m: &StepMetrics, total: u64) {
        let reward = m.get("critic/rewards/mean");
        let msg = match reward {
            Some(r) => format!("reward {r:.3}"),
            None => String::new(),
        };
        if let Some(b) = &self.bar {
            b.set_position(m.step);
            b.set_message(msg);
        } else if self.plain {
            let mfu = m
                .get("perf/mfu/actor")
                .map(|v| format!(" mfu {v:.3}"))
                .unwrap_or_default();
            eprintln!("{}: step {}/{} {msg}{mfu}", self.name, m.step, total);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Run one planned scenario to its end (not judged yet).
pub async fn execute(plan: RunPlan, opts: &RunOptions) -> Result<Executed, CommandError> {
    execute_with(plan, opts, false).await
}

/// [`execute`], keeping the whole wire traffic as a cassette in `<run dir>/cassette/`
/// (`rlharness record`).
pub async fn execute_recording(plan: RunPlan, opts: &RunOptions) -> Result<Executed, CommandError> {
    execute_with(plan, opts, true).await
}

async fn execute_with(
    plan: RunPlan,
    opts: &RunOptions,
    record: bool,
) -> Result<Executed, CommandError> {
    let started = chrono::Utc::now();
    let name = plan.scenario.name.clone();
    // Translation errors are input errors: found before anything starts. Only the builtin
    // driver translates; an external trainer reads the config itself.
    let translation = match &plan.scenario.driver {
        DriverSpec::Builtin(_) => Some(
            translate::translate(&plan.scenario.config.to_json(), plan.scenario.steps).map_err(
                |e| CommandError::invalid(format!("{}: {e}", plan.scenario.path.display())),
            )?,
        ),
        DriverSpec::Command(_) => None,
    };
    let run_dir = match &opts.run_dir {
        Some(d) => {
            fsx::create_dir_all(d).map_err(|e| CommandError::run_failed(e.to_string()))?;
            d.clone()
        }
        None => create_run_dir(&opts.out, &name, &plan.plan_hash)?,
    };
    let mut env = RunEnv::new(trainer_device(&plan), opts.hardware.as_deref());
    let mut manifest = manifest_for(&plan, &env, started);
    write_manifest(&run_dir, &manifest)?;

    let mut csv = MetricsCsvWriter::create(&run_dir.join("metrics.csv"))
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    let steps = plan.scenario.steps;
    let timeouts = plan.scenario.timeouts.clone();

    // `backend: none`: the trainer brings its own; no proxy, nothing on the wire to observe.
    let backend = match &plan.scenario.backend {
        BackendSpec::None => None,
        _ => Some(start_backend(&plan).await?),
    };
    if let Some(flags) = backend.as_ref().and_then(|b| b.flags.as_ref()) {
        fsx::write_atomic(
            &run_dir.join("server_flags.json"),
            flags.to_string().as_bytes(),
        )
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    }
    if let Some(runtime) = backend.as_ref().and_then(|b| b.runtime.clone()) {
        env = RunEnv::new(Some(runtime), opts.hardware.as_deref());
        manifest = manifest_for(&plan, &env, started);
        write_manifest(&run_dir, &manifest)?;
    }
    let (tx, mut rx) = events::channel();
    let request_timeout = timeouts.request.unwrap_or(Duration::from_secs(1800));
    let proxy = match &backend {
        None => None,
        Some(backend) => {
            let listen = match &plan.scenario.driver {
                DriverSpec::Builtin(_) => "127.0.0.1:0".to_string(),
                DriverSpec::Command(c) => c
                    .proxy_listen
                    .clone()
                    .unwrap_or_else(|| command::ARCTIC_CLIENT_ADDR.to_string()),
            };
            let proxy_listener = tokio::net::TcpListener::bind(&listen).await.map_err(|e| {
                CommandError::run_failed(format!("cannot bind the proxy port {listen}: {e}"))
            })?;
            let proxy_cfg = crate::proxy::ProxyConfig {
                upstream: backend.url.clone(),
                record_dir: run_dir.clone(),
                body_limit: 4 << 30,
                request_timeout,
            };
            let started = if record {
                let writer =
                    crate::backend::replay::CassetteWriter::create(&run_dir.join("cassette"))
                        .map_err(|e| CommandError::run_failed(e.to_string()))?;
                crate::proxy::start_recording(proxy_listener, proxy_cfg, Some(tx.clone()), writer)
                    .await
            } else {
                crate::proxy::start(proxy_listener, proxy_cfg, Some(tx.clone())).await
            };
            Some(started.map_err(|e| {
                CommandError::run_failed(format!("cannot start the recording proxy: {e}"))
            })?)
        }
    };
    let proxy_url = proxy.as_ref().map(|p| format!("http://{}", p.addr));
    manifest.notes = wire_notes(&plan, proxy.is_some());
    write_manifest(&run_dir, &manifest)?;

    let mut trainer: Option<Trainer> = None;
    let driver_task = match (&plan.scenario.driver, translation) {
        (DriverSpec::Builtin(spec), Some(translation)) => {
            let Some(proxy_url) = &proxy_url else {
                return Err(CommandError::invalid(
                    "the builtin driver needs a backend (`backend: none` is for command drivers)",
                ));
            };
            let cfg = plan.scenario.config.to_json();
            let metrics = &plan.scenario.metrics;
            let n_gpus = translate::Cfg(&cfg)
                .f64_or("trainer.n_gpus_per_node", 1.0)
                .unwrap_or(1.0)
                * translate::Cfg(&cfg)
                    .f64_or("trainer.nnodes", 1.0)
                    .unwrap_or(1.0);
            let run = DriverRun {
                seed: plan.scenario.seed,
                steps,
                spec: spec.clone(),
                translation,
                model: metrics.model.as_ref().and_then(|m| m.shape()),
                peak_flops: metrics.device.as_deref().and_then(promised_peak_flops),
                n_gpus,
            };
            let mut client = ArcticClient::new(proxy_url, request_timeout)
                .map_err(|e| CommandError::run_failed(e.to_string()))?;
            if let Some(retry) = &spec.retry {
                client = client.with_retry(retry.policy());
            }
            let tx = tx.clone();
            tokio::spawn(async move { builtin::run(&client, &run, &tx).await })
        }
        (DriverSpec::Builtin(_), None) => {
            return Err(CommandError::invalid(
                "internal: the builtin driver has no translation",
            ))
        }
        (DriverSpec::Command(spec), _) => {
            // The file logger runs in a Ray actor with another working directory.
            let abs_dir = std::path::absolute(&run_dir).map_err(|e| {
                CommandError::run_failed(format!("cannot resolve {}: {e}", run_dir.display()))
            })?;
            let launch = command::launch_for(spec, &plan, &abs_dir, proxy_url.as_deref());
            match command::start(&launch, tx.clone()) {
                Ok((t, task)) => {
                    trainer = Some(t);
                    task
                }
                // A trainer that cannot start is a failed run with a report, like one that
                // crashes at once.
                Err(e) => tokio::spawn(async move {
                    Err(builtin::DriverError::Trainer {
                        step: 1,
                        message: e.to_string(),
                    })
                }),
            }
        }
    };
    drop(tx);

    let progress = Progress::new(&name, steps, opts.progress);
    let run_started = Instant::now();
    let mut last_activity = Instant::now();
    let mut current_step = 1u64;
    let mut insane = Vec::new();
    let mut driver_task = driver_task;
    // Set once the loop has awaited the driver's task (a JoinHandle is polled to completion
    // only once).
    let mut driver_done = false;
    let step_limit = timeouts.step;
    let run_limit = timeouts.run;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let watch = Watchdog::new(&plan, opts, &env.hardware);
    let last_activity_text = |trainer: Option<&Trainer>| {
        proxy
            .as_ref()
            .and_then(|p| p.last_activity())
            .or_else(|| {
                trainer
                    .and_then(|t| t.last_line())
                    .map(|l| format!("trainer printed `{l}`"))
            })
            .unwrap_or_else(|| "none".into())
    };

    let end = loop {
        let now = Instant::now();
        let step_deadline = step_limit.map(|d| last_activity + d);
        let run_deadline = run_limit.map(|d| run_started + d);
        let deadline = match (step_deadline, run_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = tokio::time::sleep_until(
            deadline
                .unwrap_or(now + Duration::from_secs(3600 * 24 * 365))
                .into(),
        );
        // Events first: a step or a stalled request the driver reported before it ended
        // decides over its exit.
        tokio::select! {
            biased;
            ev = rx.recv() => match ev {
                Some(RunEvent::StepStarted { step, .. }) => {
                    current_step = step;
                }
                Some(RunEvent::Step(mut m)) => {
                    last_activity = Instant::now();
                    // An MFU outside (0, 1] is a failed check, never a plotted number; the
                    // judge decides what is insane (`compare::is_insane`) and reads it back
                    // from run.json.
                    for metric in crate::compare::FRACTION_METRICS {
                        let value = m.get(metric);
                        if let Some(v) = value.filter(|v| crate::compare::is_insane(metric, *v)) {
                            m.values.remove(*metric);
                            insane.push((m.step, metric.to_string(), v));
                        }
                    }
                    plan.scenario.metrics.suppress_in(&mut m);
                    progress.step(&m, steps);
                    let step = m.step;
                    let watched = watch.non_finite(&m);
                    if let Err(e) = csv.push(m) {
                        break RunEnd::Failed { reason: e.to_string(), step: Some(current_step), route: None };
                    }
                    if let Some(end) = watched.or_else(|| watch.settled_failure(csv.table(), step, steps)) {
                        break end;
                    }
                }
                Some(RunEvent::Request { route, status, duration_s }) => {
                    last_activity = Instant::now();
                    // The proxy answers 504 itself when the backend stalls past the limit.
                    if status == 504 && duration_s + 0.05 >= request_timeout.as_secs_f64() {
                        break RunEnd::Hang {
                            reason: format!(
                                "hang at step {current_step} (a request stalled past timeouts.request = {request_timeout:?}; last activity: {route})"
                            ),
                            step: current_step,
                        };
                    }
                }
                Some(RunEvent::Warning(w)) => {
                    tracing::warn!("{w}");
                }
                None => {
                    // Every sender is gone: the driver ended; its result decides.
                    driver_done = true;
                    break match (&mut driver_task).await {
                        Ok(Ok(())) => RunEnd::Completed,
                        Ok(Err(e)) => RunEnd::Failed { reason: e.to_string(), step: e.step(), route: e.route().map(str::to_string) },
                        Err(e) => RunEnd::Failed { reason: format!("the driver crashed: {e}"), step: Some(current_step), route: None },
                    };
                }
            },
            res = &mut driver_task => {
                driver_done = true;
                // Drain metrics the driver sent before it ended.
                while let Ok(ev) = rx.try_recv() {
                    if let RunEvent::Step(m) = ev {
                        progress.step(&m, steps);
                        let _ = csv.push(m);
                    }
                }
                break match res {
                    Ok(Ok(())) => RunEnd::Completed,
                    Ok(Err(e)) => RunEnd::Failed { reason: e.to_string(), step: e.step(), route: e.route().map(str::to_string) },
                    Err(e) => RunEnd::Failed { reason: format!("the driver crashed: {e}"), step: Some(current_step), route: None },
                };
            }
            _ = sleep => {
                let activity = last_activity_text(trainer.as_ref());
                let why = if run_deadline.is_some_and(|d| Instant::now() >= d) {
                    format!("run exceeded timeouts.run = {:?}", run_limit.unwrap_or_default())
                } else {
                    format!("no new step within timeouts.step = {:?}", step_limit.unwrap_or_default())
                };
                break RunEnd::Hang { reason: format!("hang at step {current_step} ({why}; last activity: {activity})"), step: current_step };
            }
            _ = &mut ctrl_c => {
                break RunEnd::Interrupted { step: current_step };
            }
        }
    };
    // Stop the driver whatever ended the run: an external trainer's whole process group goes
    // (even after a clean exit, Ray workers may linger); the builtin task is aborted.
    let mut trainer_tail = None;
    match &trainer {
        Some(t) => {
            t.terminate(TERM_GRACE).await;
            if !driver_done
                && tokio::time::timeout(Duration::from_secs(5), &mut driver_task)
                    .await
                    .is_err()
            {
                driver_task.abort();
            }
            if end != RunEnd::Completed {
                trainer_tail = Some(t.tail()).filter(|t| !t.is_empty());
            }
        }
        None => driver_task.abort(),
    }
    // Steps the driver finished while it was being stopped are kept.
    while let Ok(ev) = rx.try_recv() {
        if let RunEvent::Step(m) = ev {
            let _ = csv.push(m);
        }
    }
    progress.finish();
    if let Some(proxy) = proxy {
        proxy.shutdown().await;
    }
    let replay = backend
        .as_ref()
        .and_then(|b| b.replay.as_ref())
        .map(|h| h.outcome());
    if let Some(backend) = backend {
        backend.shutdown().await;
    }
    if proxy_url.is_some()
        && matches!(plan.scenario.driver, DriverSpec::Command(_))
        && manifest.notes.is_empty()
        && std::fs::metadata(run_dir.join("wire.jsonl")).is_ok_and(|m| m.len() == 0)
    {
        manifest.notes.push(format!(
            "no wire observed: the trainer sent no request through the recording proxy at {}",
            proxy_url.as_deref().unwrap_or("?")
        ));
    }
    let ended = chrono::Utc::now();
    let metrics = csv.into_table();
    manifest.status = end.run_status();
    manifest.reason = end.reason();
    manifest.failed_step = end.step();
    // What the judge needs besides the series, so `compare` judges the run as `run` does.
    manifest.dropped = insane
        .iter()
        .map(|(step, metric, value)| {
            crate::compare::DroppedValue::new(*step, metric.clone(), *value)
        })
        .collect();
    manifest.replay = replay.as_ref().map(|r| r.record());
    manifest.ended = Some(ended.to_rfc3339());
    write_manifest(&run_dir, &manifest)?;
    Ok(Executed {
        manifest,
        env,
        plan,
        run_dir,
        end,
        metrics,
        insane,
        replay,
        started,
        ended,
        trainer_tail,
    })
}

/// How long an external trainer's process group gets between TERM and KILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// The watchdog's per-step checks, for every driver: a non-finite value in a watched metric,
/// and fail-fast rules that can no longer pass.
struct Watchdog<'a> {
    plan: &'a RunPlan,
    /// The golden series, loaded only when a golden rule is marked `fail_fast`.
    golden: Option<MetricTable>,
}

impl<'a> Watchdog<'a> {
    fn new(plan: &'a RunPlan, opts: &RunOptions, hardware: &str) -> Self {
        let checks = &plan.scenario.checks;
        let golden = checks
            .golden
            .iter()
            .any(|(_, r)| r.fail_fast)
            .then(|| {
                crate::golden::GoldenStore::with_ci(&opts.golden, opts.ci)
                    .load(&plan.scenario.name, hardware)
                    .ok()
                    .flatten()
                    .map(|g| g.table)
            })
            .flatten();
        Self { plan, golden }
    }

    /// NaN or infinity in a metric of `metrics.watch`: stop at this step.
    fn non_finite(&self, m: &StepMetrics) -> Option<RunEnd> {
        self.plan.scenario.metrics.watch.iter().find_map(|name| {
            let v = m.get(name)?;
            (!v.is_finite()).then(|| RunEnd::Aborted {
                reason: format!(
                    "watched metric {name} is {} at step {}",
                    crate::metrics::format_value(v),
                    m.step
                ),
                step: m.step,
            })
        })
    }

    /// Fail fast: the first `fail_fast` rule that the steps so far already fail.
    fn settled_failure(&self, table: &MetricTable, step: u64, total: u64) -> Option<RunEnd> {
        let rule = crate::compare::first_settled_failure(
            &self.plan.scenario.checks,
            self.golden.as_ref(),
            table,
            total,
        )?;
        Some(RunEnd::Aborted {
            reason: format!(
                "fail fast: rule `{rule}` can no longer pass after step {step} of {total}"
            ),
            step,
        })
    }
}

/// The device an external trainer computes on: the first GPU `nvidia-smi` lists when the
/// scenario requires one (its golden then lives under that GPU's key), else none.
fn trainer_device(plan: &RunPlan) -> Option<crate::backend::Runtime> {
    let DriverSpec::Command(_) = plan.scenario.driver else {
        return None;
    };
    let r = &plan.scenario.requires;
    if r.gpus == 0 && r.gpu_name.is_none() {
        return None;
    }
    let names = crate::spec::detect_gpus().ok()?;
    names
        .into_iter()
        .next()
        .map(|device| crate::backend::Runtime {
            device,
            threads: None,
            torch_version: None,
            numerics: None,
        })
}

/// What the report must say about the wire when the proxy cannot see the trainer's traffic.
fn wire_notes(plan: &RunPlan, proxied: bool) -> Vec<String> {
    let DriverSpec::Command(_) = plan.scenario.driver else {
        return Vec::new();
    };
    if !proxied {
        return vec![
            "no wire observed: the trainer brings its own backend (`backend: none`), so no \
             request passed through the recording proxy"
                .into(),
        ];
    }
    let protocol = plan
        .scenario
        .config
        .get("remote_backend.comms.protocol")
        .and_then(|r| r.value.as_str().map(str::to_string));
    match protocol.as_deref() {
        Some("http") | None => Vec::new(),
        Some(other) => vec![format!(
            "no wire observed: remote_backend.comms.protocol is `{other}`, so the trainer \
             reaches its Arctic backend over {other} transport, not through the recording proxy"
        )],
    }
}

/// Facts about where a run ran, for `run.json` and the golden provenance.
#[derive(Debug, Clone)]
pub struct RunEnv {
    pub device: String,
    pub hardware: String,
    pub threads: Option<u64>,
    pub torch_version: Option<String>,
    /// A deterministic backend's numeric identity (the exact lane's key).
    pub numerics: Option<crate::backend::Numerics>,
}

impl RunEnv {
    /// The device a run computes on: what an in-process backend reports (torch), else this
    /// machine's CPU (the mock's simulated device only shapes the numbers it reports).
    pub fn new(
        runtime: Option<crate::backend::Runtime>,
        hardware_override: Option<&str>,
    ) -> RunEnv {
        let crate::backend::Runtime {
            device,
            threads,
            torch_version,
            numerics,
        } = runtime.unwrap_or_else(|| crate::backend::Runtime {
            device: "cpu".into(),
            threads: None,
            torch_version: None,
            numerics: None,
        });
        // The torch backend knows its GPU only as `cuda:N`; the golden key comes from its name.
        let device = crate::golden::name_cuda_device(&device);
        RunEnv {
            hardware: crate::golden::hardware_key(&device, hardware_override),
            device,
            threads,
            torch_version,
            numerics,
        }
    }
}

/// Build `run.json` for a plan; the runner writes it at start (status `running` is not a
/// `RunStatus`, so a run in progress reads as `interrupted` until it ends: exactly what a
/// killed run should say).
pub fn manifest_for(
    plan: &RunPlan,
    env: &RunEnv,
    started: chrono::DateTime<chrono::Utc>,
) -> RunManifest {
    RunManifest {
        scenario: plan.scenario.name.clone(),
        scenario_path: plan.scenario.path.display().to_string(),
        hardware: env.hardware.clone(),
        status: RunStatus::Interrupted,
        reason: Some("the run did not finish (the harness was stopped or killed)".into()),
        failed_step: None,
        seed: plan.scenario.seed,
        steps: plan.scenario.steps,
        checks: plan.scenario.checks.clone(),
        expected_verdict: plan.scenario.expected_verdict.clone(),
        harness_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: git_commit(),
        build_commit: option_env!("RLHARNESS_BUILD_COMMIT").map(str::to_string),
        host: hostname(),
        device: env.device.clone(),
        threads: env.threads,
        torch_version: env.torch_version.clone(),
        numerics: env.numerics.clone(),
        started: started.to_rfc3339(),
        ended: None,
        plan_hash: plan.plan_hash.clone(),
        scenario_hash: plan.scenario_hash.clone(),
        knobs: plan
            .knobs_differing_from_defaults()
            .into_iter()
            .map(|(key, default, value, origin)| KnobDiff {
                key,
                default: (!default.is_null()).then(|| default.to_string()),
                value: value.to_string(),
                origin: origin.to_string(),
            })
            .collect(),
        pending_golden: None,
        reference_run: None,
        notes: Vec::new(),
        dropped: Vec::new(),
        replay: None,
    }
}

fn write_manifest(dir: &Path, m: &RunManifest) -> Result<(), CommandError> {
    m.write(dir)
        .map_err(|e| CommandError::run_failed(e.to_string()))
}

pub fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // `-dirty`: tracked files (scenarios, goldens, code) differ from the commit.
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The exit status a finished run maps to before judging.
pub fn end_status(end: &RunEnd) -> ExitStatus {
    match end {
        RunEnd::Completed => ExitStatus::Passed,
        _ => ExitStatus::RunFailed,
    }
}
