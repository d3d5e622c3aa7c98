//! The stages of one run, in order: prepare the run directory, start the backend, start the
//! recording proxy, start the driver; after the event loop (`drive`), stop the driver. Each
//! stage leaves the run directory valid if the next one fails.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::env::{manifest_for, trainer_device, wire_notes, write_manifest, RunEnv};
use super::{RunEnd, RunError, RunOptions, TERM_GRACE};
use crate::model::metrics::{promised_peak_flops, MetricsCsvWriter};
use crate::model::{events::EventSender, rundir::RunManifest};
use crate::run::driver::builtin::{self, DriverError, DriverRun};
use crate::run::driver::client::ArcticClient;
use crate::run::driver::command::{self, Trainer};
use crate::run::driver::DriverSpec;
use crate::run::plan::{RunPlan, ServerPlan};
use crate::run::{backend::BackendSpec, proxy::ProxyHandle};
use rlharness_arctic::fsx;

/// The driver's task: the builtin driver, or the watcher of an external trainer.
pub(super) type DriverTask = tokio::task::JoinHandle<Result<(), DriverError>>;

/// What the first stage made: the run directory with its manifest and its (empty) series.
pub(super) struct Prepared {
    pub(crate) run_dir: PathBuf,
    pub(crate) env: RunEnv,
    pub(crate) manifest: RunManifest,
    pub(crate) csv: MetricsCsvWriter,
}

/// Stage 1: make the run directory, write `run.json` and an empty `metrics.csv` (the plan
/// already holds the builtin driver's translation, so input errors came before anything).
pub(super) fn prepare(
    plan: &RunPlan,
    opts: &RunOptions,
    started: chrono::DateTime<chrono::Utc>,
) -> Result<Prepared, RunError> {
    if matches!(plan.scenario.driver, DriverSpec::Command(_)) && opts.direct {
        return Err(RunError::Unrunnable(format!(
            "{}: --direct is for the builtin driver: a command trainer reaches its backend \
             through the recording proxy or over its own transport",
            plan.scenario.path.display()
        )));
    }
    let env = RunEnv::new(trainer_device(plan), opts.hardware.as_deref());
    let manifest = manifest_for(plan, &env, started, opts);
    let run_dir = match &opts.run_dir {
        Some(d) => {
            fsx::create_dir_all(d)?;
            write_manifest(d, &manifest)?;
            d.clone()
        }
        // A calibration's runs go apart, with a `latest` of their own.
        None if opts.calibration => create_run_dir(
            &opts.out.join(&plan.scenario.name),
            "calibrations",
            &plan.plan_hash,
            |d| write_manifest(d, &manifest),
        )?,
        None => create_run_dir(&opts.out, &plan.scenario.name, &plan.plan_hash, |d| {
            write_manifest(d, &manifest)
        })?,
    };
    let csv = MetricsCsvWriter::create(&run_dir.join("metrics.csv"))?;
    Ok(Prepared {
        run_dir,
        env,
        manifest,
        csv,
    })
}

/// Stage 2: start the backend (none for `backend: none`: the trainer brings its own), record
/// the start-up flags of one the harness starts for the builtin driver (`server_flags.json`),
/// and where it computes (`run.json`).
pub(super) async fn start_backend_stage(
    plan: &RunPlan,
    opts: &RunOptions,
    started: chrono::DateTime<chrono::Utc>,
    p: &mut Prepared,
) -> Result<Option<RunningBackend>, RunError> {
    let backend = match &plan.scenario.backend {
        BackendSpec::None => return Ok(None),
        _ => start_backend(plan, &p.run_dir).await?,
    };
    if let Some(flags) = backend
        .flags
        .as_ref()
        .filter(|_| matches!(plan.scenario.driver, DriverSpec::Builtin(_)))
    {
        fsx::write_atomic(
            &p.run_dir.join("server_flags.json"),
            flags.to_string().as_bytes(),
        )?;
    }
    if let Some(mut runtime) = backend.runtime.clone() {
        // An external trainer is not deterministic even against a deterministic backend (real
        // verl batches samples in the order concurrent answers arrive): no exact lane.
        if matches!(plan.scenario.driver, DriverSpec::Command(_)) {
            runtime.numerics = None;
        }
        p.env = RunEnv::new(Some(runtime), opts.hardware.as_deref());
        p.manifest = manifest_for(plan, &p.env, started, opts);
        write_manifest(&p.run_dir, &p.manifest)?;
    }
    Ok(Some(backend))
}

/// Where the driver's requests go, and the proxy that records them.
pub(super) struct Wire {
    pub(crate) proxy: Option<ProxyHandle>,
    /// The proxy's URL (what a command trainer is told).
    pub(crate) proxy_url: Option<String>,
    /// Where the builtin driver sends: the proxy, or the backend itself under `--direct`.
    pub(crate) driver_url: Option<String>,
    /// A command trainer in a network namespace of its own: its fixed address, and the
    /// bridge carrying its connections to the proxy (netns.rs).
    pub(crate) netns: Option<(String, crate::run::netns::Bridge)>,
}

/// Stage 3: the recording proxy in front of the backend (a fixed address for a command
/// trainer's client, an ephemeral one for the builtin driver; none under `--direct`), and the
/// report's notes about what the wire shows.
pub(super) async fn start_proxy(
    plan: &RunPlan,
    opts: &RunOptions,
    record: bool,
    backend: Option<&RunningBackend>,
    p: &mut Prepared,
    request_timeout: Duration,
    tx: &EventSender,
) -> Result<Wire, RunError> {
    let proxy = match backend {
        None => None,
        Some(_) if opts.direct => None,
        Some(backend) => {
            let listen = match &plan.scenario.driver {
                DriverSpec::Builtin(_) => "127.0.0.1:0".to_string(),
                DriverSpec::Command(c) => c
                    .proxy_listen
                    .clone()
                    .unwrap_or_else(|| command::ARCTIC_CLIENT_ADDR.to_string()),
            };
            let (listen, fixed) = crate::run::netns::proxy_listen(opts.netns.as_ref(), listen);
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .map_err(|e| RunError::Start(bind_error(&listen, &e)))?;
            let cfg = crate::run::proxy::ProxyConfig {
                upstream: backend.url.clone(),
                record_dir: p.run_dir.clone(),
                body_limit: 4 << 30,
                request_timeout,
            };
            let started = if record {
                let writer = crate::run::backend::replay::CassetteWriter::create(
                    &p.run_dir.join("cassette"),
                )
                .map_err(|e| RunError::Start(e.to_string()))?;
                crate::run::proxy::start_recording(listener, cfg, Some(tx.clone()), writer).await
            } else {
                crate::run::proxy::start(listener, cfg, Some(tx.clone())).await
            };
            let started = started
                .map_err(|e| RunError::Start(format!("cannot start the recording proxy: {e}")))?;
            let bridge = fixed
                .map(|f| crate::run::netns::Bridge::start(started.addr).map(|b| (f, b)))
                .transpose()
                .map_err(|e| RunError::Start(format!("cannot start the netns bridge: {e}")))?;
            Some((started, bridge))
        }
    };
    let (proxy, netns) = match proxy {
        Some((proxy, bridge)) => (Some(proxy), bridge),
        None => (None, None),
    };
    // The trainer in a namespace dials its fixed address there.
    let proxy_url = match &netns {
        Some((fixed, _)) => Some(format!("http://{fixed}")),
        None => proxy.as_ref().map(|p| format!("http://{}", p.addr)),
    };
    p.manifest.notes = wire_notes(plan, proxy.is_some());
    if let (Some(ns), Some((fixed, _))) = (&opts.netns, &netns) {
        p.manifest.notes.push(ns.note(fixed));
    }
    let driver_url = match backend {
        Some(b) if opts.direct => {
            p.manifest.notes.push(format!(
                "direct: the driver talked to the backend at {} without the recording proxy \
                 (`run --direct`), so no wire.jsonl or server_config.json was written",
                b.url
            ));
            Some(b.url.clone())
        }
        _ => proxy_url.clone(),
    };
    write_manifest(&p.run_dir, &p.manifest)?;
    Ok(Wire {
        proxy,
        proxy_url,
        driver_url,
        netns,
    })
}

/// Why the proxy cannot listen where the trainer's client connects, naming who holds the port.
fn bind_error(listen: &str, e: &std::io::Error) -> String {
    let mut msg = format!("cannot bind the proxy port {listen}: {e}");
    if e.kind() == std::io::ErrorKind::AddrInUse {
        let port = listen
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok());
        if let Some(holder) = port.and_then(crate::run::driver::strays::port_holder) {
            msg.push_str(&format!("; it is held by {holder}"));
        }
        msg.push_str(
            ". The trainer's Arctic client connects to this fixed address, so only one such run \
             can go at a time on a host: stop the holder (an earlier run's leftover, or another \
             run; `rlharness run --jobs` runs such scenarios one after another)",
        );
    }
    msg
}

/// Stage 4: the builtin driver as a task, or the external trainer as a process group and the
/// task that watches it. A trainer that cannot start is a failed run with a report, like one
/// that crashes at once.
pub(super) fn start_driver(
    plan: &RunPlan,
    opts: &RunOptions,
    p: &mut Prepared,
    wire: &Wire,
    request_timeout: Duration,
    tx: EventSender,
) -> Result<(DriverTask, Option<Trainer>), RunError> {
    match (&plan.scenario.driver, &plan.translation) {
        (DriverSpec::Builtin(spec), Some(translation)) => {
            let Some(driver_url) = &wire.driver_url else {
                return Err(RunError::Unrunnable(
                    "the builtin driver needs a backend (`backend: none` is for command drivers)"
                        .into(),
                ));
            };
            let metrics = &plan.scenario.metrics;
            let run = DriverRun {
                seed: plan.scenario.seed,
                steps: plan.scenario.steps,
                spec: spec.clone(),
                translation: translation.clone(),
                model: metrics.model.as_ref().and_then(|m| m.shape()),
                peak_flops: metrics.device.as_deref().and_then(promised_peak_flops),
            };
            let mut client = ArcticClient::new(driver_url, request_timeout)
                .map_err(|e| RunError::Start(e.to_string()))?;
            if let Some(retry) = &spec.retry {
                client = client.with_retry(retry.policy());
            }
            Ok((
                tokio::spawn(async move { builtin::run(&client, &run, &tx).await }),
                None,
            ))
        }
        (DriverSpec::Builtin(_), None) => Err(RunError::Unrunnable(
            "internal: the plan has no translation for the builtin driver".into(),
        )),
        (DriverSpec::Command(spec), _) => {
            // The file logger runs in a Ray actor with another working directory.
            let abs_dir = std::path::absolute(&p.run_dir).map_err(|e| {
                RunError::Start(format!("cannot resolve {}: {e}", p.run_dir.display()))
            })?;
            let mut launch = crate::run::plan::launch::launch_for(
                spec,
                plan,
                &abs_dir,
                wire.proxy_url.as_deref(),
            );
            if let Some(name) = &opts.experiment_name {
                command::set_experiment_name(&mut launch, name);
            }
            p.manifest.trainer_command = Some(launch.recorded());
            if let (Some(ns), Some((fixed, bridge))) = (&opts.netns, &wire.netns) {
                ns.wrap(&mut launch, fixed, &bridge.path);
            }
            Ok(match command::start(&launch, tx) {
                Ok((t, task)) => (task, Some(t)),
                Err(e) => (
                    tokio::spawn(async move {
                        Err(DriverError::Trainer {
                            step: 1,
                            message: e.to_string(),
                        })
                    }),
                    None,
                ),
            })
        }
    }
}

/// After the loop: stop the driver whatever ended the run. An external trainer's whole
/// process group goes (Ray workers may linger); the builtin task is aborted.
pub(super) async fn stop_driver(
    trainer: Option<&Trainer>,
    driver_task: &mut DriverTask,
    driver_done: bool,
) -> Vec<crate::run::driver::strays::Stray> {
    let Some(t) = trainer else {
        driver_task.abort();
        return Vec::new();
    };
    let strays = t.terminate(TERM_GRACE).await;
    if !driver_done
        && tokio::time::timeout(Duration::from_secs(5), &mut *driver_task)
            .await
            .is_err()
    {
        driver_task.abort();
    }
    strays
}

/// Last: stop the proxy and the backend. A replay backend says what it was sent; a torch
/// backend process that died mid-run gets named in the failure, with its last lines (the
/// driver only saw a refused connection).
pub(super) async fn stop_servers(
    proxy: Option<ProxyHandle>,
    backend: Option<RunningBackend>,
    end: RunEnd,
) -> (RunEnd, Option<crate::run::backend::replay::ReplayOutcome>) {
    if let Some(proxy) = proxy {
        proxy.shutdown().await;
    }
    let Some(mut backend) = backend else {
        return (end, None);
    };
    let replay = backend.replay.as_ref().map(|h| h.outcome());
    let end = match (end, backend.child.as_mut()) {
        (
            RunEnd::Failed {
                reason,
                step,
                route,
            },
            Some(child),
        ) => {
            let reason = match child.exited(Duration::from_millis(500)).await {
                Some(why) => format!("{reason}; {why}"),
                None => reason,
            };
            RunEnd::Failed {
                reason,
                step,
                route,
            }
        }
        (end, _) => end,
    };
    backend.shutdown().await;
    (end, replay)
}

/// A backend running in-process, with what stops it.
pub(super) struct RunningBackend {
    pub(crate) url: String,
    /// Where an in-process backend computes, and its numeric identity when deterministic.
    pub(crate) runtime: Option<rlharness_arctic::engine::Runtime>,
    /// The start-up flags of an in-process server (what `--training-gpus` etc. would be), so
    /// the propagation check sees them (`srv.*`).
    pub(crate) flags: Option<Value>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub(crate) replay: Option<crate::run::backend::replay::ReplayHandle>,
    /// The torch backend's process, killed and reaped at shutdown (and when dropped).
    pub(crate) child: Option<crate::run::backend::child::TorchChild>,
}

impl RunningBackend {
    pub(super) async fn shutdown(mut self) {
        if let Some(c) = self.child.take() {
            c.shutdown().await;
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

/// The server options the plan computed (a mock or torch backend has them).
fn server_plan(plan: &RunPlan) -> Result<&ServerPlan, RunError> {
    plan.server
        .as_ref()
        .ok_or_else(|| RunError::Unrunnable("internal: the plan has no server options".into()))
}

async fn start_backend(plan: &RunPlan, run_dir: &Path) -> Result<RunningBackend, RunError> {
    let runtime: Option<rlharness_arctic::engine::Runtime>;
    let engine: Arc<dyn rlharness_arctic::engine::Engine> = match &plan.scenario.backend {
        BackendSpec::Mock(script) => {
            runtime = Some(rlharness_arctic::engine::Runtime {
                device: "cpu".into(),
                threads: None,
                torch_version: None,
                numerics: Some(rlharness_arctic::mock::MockEngine::numerics()),
            });
            Arc::new(
                rlharness_arctic::mock::MockEngine::new(script.clone(), plan.scenario.seed)
                    .map_err(|e| RunError::BackendInput(e.to_string()))?,
            )
        }
        BackendSpec::Torch(spec) => return start_torch_child(plan, spec, run_dir).await,
        BackendSpec::Remote { url } => {
            return Ok(RunningBackend {
                url: url.trim_end_matches('/').to_string(),
                runtime: None,
                flags: None,
                stop: None,
                task: None,
                replay: None,
                child: None,
            })
        }
        BackendSpec::Replay { cassette } => return start_replay(plan, cassette).await,
        BackendSpec::None => {
            return Err(RunError::Unrunnable(format!(
                "backend kind {:?} is not supported by `run` yet",
                plan.scenario.backend
            )))
        }
    };
    let server = server_plan(plan)?;
    let (router, handle) = rlharness_arctic::server::router(engine, server.options.clone());
    let router = match &plan.scenario.backend {
        BackendSpec::Mock(script) => rlharness_arctic::mock::faults::inject(
            router,
            handle,
            &script.faults,
            script.seed.unwrap_or(plan.scenario.seed),
        ),
        _ => router,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| RunError::Start(format!("cannot bind the backend port: {e}")))?;
    let addr: SocketAddr = listener
        .local_addr()
        .map_err(|e| RunError::Start(e.to_string()))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = rlharness_arctic::server::serve(listener, router, async move {
            let _ = rx.await;
        })
        .await;
    });
    Ok(RunningBackend {
        url: format!("http://{addr}"),
        runtime,
        flags: Some(server.flags.clone()),
        stop: Some(tx),
        task: Some(task),
        replay: None,
        child: None,
    })
}

/// The torch backend, a process of its own (`rlharness-torch`): only it loads libtorch.
async fn start_torch_child(
    plan: &RunPlan,
    spec: &rlharness_arctic::torch_spec::TorchSpec,
    run_dir: &Path,
) -> Result<RunningBackend, RunError> {
    let server = server_plan(plan)?;
    let spec = spec.beside(&plan.scenario.path);
    let ready_limit = plan
        .scenario
        .timeouts
        .run
        .unwrap_or(Duration::from_secs(600));
    let layout = crate::run::backend::child::ChildLayout {
        colocate: server.colocate,
        record: Some(run_dir.join("backend_layout.json")),
    };
    let child = crate::run::backend::child::TorchChild::start(
        &spec,
        plan.scenario.seed,
        &server.options,
        &layout,
        ready_limit,
    )
    .await?;
    Ok(RunningBackend {
        url: child.url().to_string(),
        runtime: Some(child.runtime().clone()),
        flags: Some(server.flags.clone()),
        stop: None,
        task: None,
        replay: None,
        child: Some(child),
    })
}

/// A recorded cassette served back in order (loaded off the async threads).
async fn start_replay(plan: &RunPlan, cassette: &str) -> Result<RunningBackend, RunError> {
    let dir = crate::run::backend::replay::resolve_cassette(&plan.scenario.path, cassette);
    let cassette =
        tokio::task::spawn_blocking(move || crate::run::backend::replay::Cassette::load(&dir))
            .await
            .map_err(|e| RunError::Start(format!("loading the cassette crashed: {e}")))?
            .map_err(|e| RunError::BackendInput(e.to_string()))?;
    let r = crate::run::backend::replay::start(cassette)
        .await
        .map_err(|e| RunError::BackendInput(e.to_string()))?;
    Ok(RunningBackend {
        url: r.url,
        runtime: None,
        flags: None,
        stop: Some(r.stop),
        task: Some(r.task),
        replay: Some(r.handle),
        child: None,
    })
}

/// Create `OUT/<scenario>/<run-id>/` and point `OUT/<scenario>/latest` at it.
pub(crate) fn create_run_dir<E: From<fsx::FsError>>(
    out: &Path,
    scenario: &str,
    plan_hash: &str,
    init: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<PathBuf, E> {
    let base = out.join(scenario);
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let short = &plan_hash[..plan_hash.len().min(8)];
    let mut dir = base.join(format!("{stamp}-{short}"));
    let mut k = 1;
    while dir.exists() {
        k += 1;
        dir = base.join(format!("{stamp}-{short}-{k}"));
    }
    // Made under a hidden name with its first file (`run.json`, `seeds.json`) written, then
    // renamed: a harness killed at any point leaves no run folder without its manifest.
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = base.join(format!(
        ".tmp-{}-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let made = fsx::create_dir_all(&tmp)
        .map_err(E::from)
        .and_then(|()| init(&tmp))
        .and_then(|()| fsx::rename(&tmp, &dir).map_err(E::from));
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let latest = base.join("latest");
    let _ = std::fs::remove_file(&latest);
    #[cfg(unix)]
    if let Some(name) = dir.file_name() {
        let _ = std::os::unix::fs::symlink(name, &latest);
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::create_run_dir;
    use crate::run::runner::RunError;

    /// A run folder appears whole, its first file in it, or not at all; `latest` follows it.
    #[test]
    fn a_run_folder_appears_with_its_manifest_or_not_at_all() {
        let out = tempfile::tempdir().unwrap();
        let dir = create_run_dir(out.path(), "s", "abcdef0123", |d| {
            std::fs::write(d.join("run.json"), b"{}").map_err(|e| RunError::Start(e.to_string()))
        })
        .unwrap();
        assert!(dir.join("run.json").is_file());
        assert_eq!(
            std::fs::canonicalize(out.path().join("s/latest")).unwrap(),
            std::fs::canonicalize(&dir).unwrap()
        );
        let err = create_run_dir(out.path(), "s", "abcdef0123", |_| {
            Err(RunError::Start("disk full".into()))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk full"));
        let names: Vec<String> = std::fs::read_dir(out.path().join("s"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "the first run and `latest` only: {names:?}");
    }
}
