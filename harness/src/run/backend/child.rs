//! The torch backend as a child process: `rlharness run` starts the `rlharness-torch`
//! executable for a `backend: {kind: torch}` scenario and talks to it over HTTP like any
//! other Arctic server, so `rlharness` itself never loads libtorch (docs/architecture.md,
//! "The torch backend's process").
//!
//! The protocol and its types ([`Ready`], [`BUILD_HINT`]) live in `rlharness_arctic::child`,
//! which the child's crate shares; this file is the parent's side. The runner kills and reaps
//! the child when the run ends, whatever ended it; dropping a [`TorchChild`] kills it too (a panicking parent). Its stderr passes through to the
//! parent's, and the last lines are kept for the error message when it dies.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

pub use rlharness_arctic::child::{Ready, BUILD_HINT};
pub(crate) use rlharness_arctic::child::{EXE_ENV, EXE_NAME};
use rlharness_arctic::engine::Runtime;
use rlharness_arctic::server::ServerOptions;
use rlharness_arctic::torch_spec::{TorchDevice, TorchSpec};

/// Why the torch backend's process could not serve a run.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// `rlharness-torch` is not where it is looked for.
    #[error("{0}")]
    NotFound(String),
    /// The torch spec could not be handed to the child.
    #[error("backend: {0}")]
    Spec(#[from] serde_json::Error),
    /// The process could not be started.
    #[error("{0}")]
    Spawn(String),
    /// The process started but died, or hung, before it was ready.
    #[error("{0}")]
    Died(String),
}

/// How many of the child's last stderr lines an error message quotes.
const TAIL_LINES: usize = 20;

/// Where the executable is: `RLHARNESS_TORCH_BIN`, else beside the current executable, else
/// (a test binary in `target/<profile>/deps/`) in `target/<profile>/`.
pub(crate) fn locate() -> Result<PathBuf, ChildError> {
    if let Some(p) = std::env::var_os(EXE_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(ChildError::NotFound(format!(
                "the torch backend executable {} (from {EXE_ENV}) does not exist; {BUILD_HINT}",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(|e| {
        ChildError::NotFound(format!(
            "cannot find the current executable to look for {EXE_NAME} beside it: {e}"
        ))
    })?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let mut candidates = vec![dir.join(EXE_NAME)];
    if dir.file_name().is_some_and(|n| n == "deps") {
        if let Some(profile) = dir.parent() {
            candidates.push(profile.join(EXE_NAME));
        }
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            ChildError::NotFound(format!(
            "backend `torch` runs in the executable {EXE_NAME}, which is not built (looked at {}); \
             {BUILD_HINT}",
            looked.join(", ")
        ))
        })
}

/// The child's last stderr lines.
#[derive(Clone, Default)]
struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    fn push(&self, line: String) {
        let mut t = crate::model::util::lock(&self.0);
        if t.len() == TAIL_LINES {
            t.pop_front();
        }
        t.push_back(line);
    }
    fn text(&self) -> String {
        let t = crate::model::util::lock(&self.0);
        if t.is_empty() {
            return "(it wrote nothing on stderr)".into();
        }
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// The layout flags of the child beside the GPU counts: `--colocate` (from
/// `remote_backend.colocate`) and where it records what it did of the layout
/// (`backend_layout.json` of the run directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildLayout {
    pub colocate: bool,
    pub record: Option<PathBuf>,
}

impl Default for ChildLayout {
    fn default() -> Self {
        ChildLayout {
            colocate: true,
            record: None,
        }
    }
}

/// The command that starts `exe` as the backend of `spec`: its arguments, its CPU kernel
/// pinning, `env` (a matrix slot's) and its own process group.
fn command(
    exe: &Path,
    spec: &TorchSpec,
    seed: u64,
    opts: &ServerOptions,
    layout: &ChildLayout,
    env: &[(String, String)],
) -> Result<Command, ChildError> {
    let spec_json = serde_json::to_string(spec)?;
    let mut cmd = Command::new(exe);
    cmd.arg("--child")
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(["--backend-json", &spec_json])
        .args(["--seed", &seed.to_string()])
        .args(["--training-gpus", &opts.training_gpus.to_string()])
        .args(["--sampling-gpus", &opts.sampling_gpus.to_string()])
        .args(["--log-prob-gpus", &opts.log_prob_gpus.to_string()])
        .args(["--colocate", &layout.colocate.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(record) = &layout.record {
        cmd.arg("--layout-record").arg(record);
    }
    if spec.device == TorchDevice::Cpu {
        // The child pins the same level itself (and falls back on a CPU without it);
        // set here, libtorch sees it from the process's first instruction.
        for (var, value) in spec.cpu_isa.env() {
            cmd.env(var, value);
        }
    }
    // A scenario of a local matrix (`run --jobs`): its GPU pinning, for this child only.
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    // Its own process group: a terminal's Ctrl-C reaches only the runner, which records
    // the interrupt and then stops the child.
    #[cfg(unix)]
    cmd.process_group(0);
    Ok(cmd)
}

/// Echo the child's stderr, each line prefixed with the matrix slot's `label`, keeping its
/// last lines in `tail`.
fn echo_stderr(
    err: tokio::process::ChildStderr,
    tail: Tail,
    label: Option<String>,
) -> tokio::task::JoinHandle<()> {
    let prefix = label.map(|l| format!("[{l}] ")).unwrap_or_default();
    tokio::spawn(async move {
        let mut lines = BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            errln!("{prefix}{line}");
            tail.push(line);
        }
    })
}

/// A running `rlharness-torch`.
pub(crate) struct TorchChild {
    exe: PathBuf,
    child: Child,
    /// Held open: the child exits when it closes.
    _stdin: Option<ChildStdin>,
    tail: Tail,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    ready: Ready,
}

impl TorchChild {
    /// Start the executable for `spec` (its paths already resolved beside the scenario) and
    /// wait until it listens. Fails with exit status 3 when it is missing, cannot start, or
    /// dies before it is ready (the message names it and quotes its last lines).
    /// A child that prints no ready line within `ready_limit` (a hang while loading) is
    /// stopped and fails the run the same way.
    pub(crate) async fn start(
        spec: &TorchSpec,
        seed: u64,
        opts: &ServerOptions,
        layout: &ChildLayout,
        ready_limit: Duration,
    ) -> Result<TorchChild, ChildError> {
        let exe = locate()?;
        // A scenario of a local matrix (`run --jobs`): its GPU pinning and its label.
        let slot = crate::model::slot::current_slot();
        let mut cmd = command(&exe, spec, seed, opts, layout, &slot.env)?;
        let mut child = cmd.spawn().map_err(|e| {
            ChildError::Spawn(format!(
                "cannot start the torch backend {}: {e}",
                exe.display()
            ))
        })?;
        let tail = Tail::default();
        let stderr_task = child
            .stderr
            .take()
            .map(|err| echo_stderr(err, tail.clone(), slot.label));
        let stdin = child.stdin.take();
        let mut this = TorchChild {
            exe,
            child,
            _stdin: stdin,
            tail,
            stderr_task,
            ready: Ready {
                url: String::new(),
                runtime: Runtime {
                    device: String::new(),
                    threads: None,
                    torch_version: None,
                    numerics: None,
                },
            },
        };
        let Some(stdout) = this.child.stdout.take() else {
            return Err(this.died("its stdout was not captured").await);
        };
        let mut lines = BufReader::new(stdout).lines();
        let wait_ready = async {
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => match serde_json::from_str::<Ready>(&line) {
                        Ok(r) => break Ok(r),
                        Err(_) => errln!("{line}"),
                    },
                    Ok(None) => break Err("it exited before it was ready".to_string()),
                    Err(e) => break Err(format!("reading its ready line failed ({e})")),
                }
            }
        };
        let ready = match tokio::time::timeout(ready_limit, wait_ready).await {
            Ok(Ok(r)) => r,
            Ok(Err(what)) => return Err(this.died(&what).await),
            Err(_) => {
                return Err(this
                    .died(&format!(
                        "it printed no ready line within {ready_limit:?} (timeouts.run)"
                    ))
                    .await)
            }
        };
        // Whatever else it prints goes on; a full pipe must never block it.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                errln!("{line}");
            }
        });
        this.ready = ready;
        Ok(this)
    }

    pub(crate) fn url(&self) -> &str {
        &self.ready.url
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.ready.runtime
    }

    /// The error for a child that failed to come up: killed and reaped, with its last lines.
    async fn died(mut self, what: &str) -> ChildError {
        let _ = self.child.start_kill();
        let status = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let status = match status {
            Ok(Ok(s)) => s.to_string(),
            _ => "status unknown".into(),
        };
        self.drain_stderr().await;
        ChildError::Died(format!(
            "the torch backend {} failed to start: {what} ({status}); its last lines:\n{}",
            self.exe.display(),
            self.tail.text()
        ))
    }

    async fn drain_stderr(&mut self) {
        if let Some(t) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
    }

    /// When the child has exited (or exits within `grace`): what to add to a failed run's
    /// reason, naming it, its exit status and its last lines. `None` while it still runs.
    pub(crate) async fn exited(&mut self, grace: Duration) -> Option<String> {
        let status = tokio::time::timeout(grace, self.child.wait())
            .await
            .ok()?
            .ok()?;
        self.drain_stderr().await;
        Some(format!(
            "the torch backend {} exited mid-run ({status}); its last lines:\n{}",
            self.exe.display(),
            self.tail.text()
        ))
    }

    /// Kill the child and reap it.
    pub(crate) async fn shutdown(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}
