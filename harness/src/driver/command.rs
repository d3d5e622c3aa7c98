//! The command driver: an external trainer (verl's launcher, or anything that prints like it)
//! started in its own process group, its config passed as Hydra overrides, its metrics read
//! from verl's file logger or console logger, its output kept in the run directory.
//!
//! The trainer is never trusted to end: the runner's watchdog stops it through
//! [`Trainer::terminate`], which signals the whole process group (Ray spawns workers that
//! outlive a killed launcher), TERM first and KILL after a grace period.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::builtin::DriverError;
use super::strays;
use crate::capture::{self, JsonlTail};
use crate::events::{EventSender, RunEvent};
use crate::metrics::StepMetrics;

/// Lines of trainer output a failure report keeps.
pub(crate) const TAIL_LINES: usize = 50;
/// The address the Arctic client uses (`localhost:7000`): where the recording proxy listens by
/// default, so the client reaches the proxy without any change to the trainer.
pub(crate) const ARCTIC_CLIENT_ADDR: &str = "127.0.0.1:7000";
/// The file verl's file logger writes, inside the run directory.
pub(crate) const JSONL_FILE: &str = "verl_metrics.jsonl";
/// verl's step-0 validation record (`val-*` keys), kept apart from `metrics.csv`.
pub(crate) const VALIDATION_FILE: &str = "val_before_train.json";
/// How often the JSONL file is polled for new lines.
const JSONL_POLL: Duration = Duration::from_millis(200);
/// How long the trainer's pipes may stay open after it exited (a grandchild holding them).
const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// Where the trainer's per-step metrics come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum MetricsSource {
    /// `$VERL_FILE_LOGGER_PATH`, tailed as it grows.
    VerlJsonl,
    /// `step:N - key:value ...` lines anywhere in stdout or stderr.
    VerlConsole,
}

/// `driver: {kind: command, command: [...], env: {...}, metrics_from: verl-jsonl}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawCommandDriverSpec")]
pub struct CommandDriverSpec {
    /// Program and arguments, without a shell. A relative program path with a `/` is relative
    /// to the scenario file's folder; a bare name is looked up on PATH.
    pub(crate) command: Vec<String>,
    /// Extra environment for the trainer (on top of the harness's own).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) metrics_from: MetricsSource,
    /// Where the recording proxy listens when the scenario has an Arctic backend; default
    /// `127.0.0.1:7000`, the Arctic client's address. `127.0.0.1:0` picks a free port (the
    /// trainer then learns it from `RLHARNESS_BACKEND_URL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) proxy_listen: Option<String>,
    /// The environment variables that name the trainer's source checkouts (`[VERL_SRC,
    /// ARCTIC_SRC]`): `run.json` records each one's `git describe`, so a history orders runs
    /// by the trainer's code, and a bisect knows which repository it walks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sources: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommandDriverSpec {
    command: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    metrics_from: MetricsSource,
    #[serde(default)]
    proxy_listen: Option<String>,
    #[serde(default)]
    sources: Vec<String>,
}

impl TryFrom<RawCommandDriverSpec> for CommandDriverSpec {
    type Error = String;
    fn try_from(r: RawCommandDriverSpec) -> Result<Self, String> {
        match r.command.first() {
            None => return Err("`command` must name a program (it is empty)".into()),
            Some(p) if p.trim().is_empty() => {
                return Err("`command`: the program name is empty".into())
            }
            Some(_) => {}
        }
        for k in r.env.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(format!("`env`: invalid variable name {k:?}"));
            }
        }
        for k in &r.sources {
            let ok = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(format!(
                    "`sources`: {k:?} is not an environment variable name (letters, digits, `_`)"
                ));
            }
        }
        if let Some(l) = &r.proxy_listen {
            l.parse::<std::net::SocketAddr>().map_err(|e| {
                format!("`proxy_listen`: {l:?} is not an address such as 127.0.0.1:7000: {e}")
            })?;
        }
        Ok(CommandDriverSpec {
            command: r.command,
            env: r.env,
            metrics_from: r.metrics_from,
            proxy_listen: r.proxy_listen,
            sources: r.sources,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Hydra overrides.

/// Keys the harness sets itself; a scenario's values for them are replaced.
pub(crate) const HARNESS_KEYS: &[&str] = &[
    "trainer.total_training_steps",
    "trainer.logger",
    "trainer.project_name",
    "trainer.experiment_name",
];

/// A string as a Hydra quoted value: single quotes; `\'` for a quote; backslashes doubled
/// where Hydra would read them as escapes (before a quote or at the end); `${` escaped so
/// OmegaConf does not interpolate a value the harness already resolved.
pub(crate) fn hydra_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    let mut run = 0usize;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => run += 1,
            '\'' => {
                out.push_str(&"\\".repeat(run * 2));
                out.push_str("\\'");
                run = 0;
            }
            // OmegaConf reads `\${` as a literal backslash and a live interpolation: the
            // backslashes before an escaped `${` are doubled too.
            '$' if chars.peek() == Some(&'{') => {
                out.push_str(&"\\".repeat(run * 2));
                out.push_str("\\$");
                run = 0;
            }
            other => {
                out.push_str(&"\\".repeat(run));
                out.push(other);
                run = 0;
            }
        }
    }
    out.push_str(&"\\".repeat(run * 2));
    out.push('\'');
    out
}

/// A JSON value in Hydra's override grammar: strings quoted, floats always with a `.` or an
/// exponent (so `1.0` stays a float), lists `[a,b]`, mappings `{k:v}`.
pub(crate) fn hydra_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                n.to_string()
            } else {
                match n.as_f64() {
                    Some(f) if f.is_nan() => "nan".into(),
                    Some(f) if f.is_infinite() => if f > 0.0 { "inf" } else { "-inf" }.into(),
                    Some(f) => format!("{f:?}"),
                    None => n.to_string(),
                }
            }
        }
        Value::String(s) => hydra_quote(s),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(hydra_value).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", hydra_value(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Launching.

/// Everything needed to start the trainer, decided before anything starts (tests read it).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerLaunch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub(crate) metrics_from: MetricsSource,
    /// Absolute: verl's file logger runs in a Ray actor with another working directory.
    pub(crate) jsonl_path: PathBuf,
    pub(crate) run_dir: PathBuf,
    /// The steps asked of it (`trainer.total_training_steps`): one that exits 0 before the
    /// last of them fails the run.
    pub(crate) steps: u64,
}

/// Replace the experiment name the harness passes (`trainer.experiment_name=...`).
pub(crate) fn set_experiment_name(launch: &mut TrainerLaunch, name: &str) {
    for a in launch.args.iter_mut() {
        if a.starts_with("trainer.experiment_name=") {
            *a = format!("trainer.experiment_name={}", hydra_quote(name));
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandDriverError {
    #[error("cannot start the trainer `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The last lines of the trainer's output, and its last line (what a hang report names).
#[derive(Debug, Default)]
struct OutputTail {
    lines: VecDeque<String>,
}

impl OutputTail {
    fn push(&mut self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line.to_string());
    }
}

/// Steps seen so far (both streams and the JSONL file feed it; a step is sent once).
#[derive(Debug, Default)]
struct Captured {
    steps: BTreeSet<u64>,
    validation: bool,
    /// Steps the console never showed, taken from verl's file logger after the trainer ended.
    from_file_logger: Vec<u64>,
}

struct Shared {
    tail: Mutex<OutputTail>,
    captured: Mutex<Captured>,
    tx: EventSender,
    run_dir: PathBuf,
}

use crate::util::lock;

impl Shared {
    /// Send one step's metrics (step 0, verl's validation before training, goes to its own
    /// file instead). A step already sent is ignored.
    fn record(&self, step: u64, values: Vec<(String, f64)>) {
        if step == 0 {
            let mut c = lock(&self.captured);
            if !c.validation {
                c.validation = true;
                let text = capture::validation_json(&values).to_string();
                if let Err(e) =
                    crate::fsx::write_atomic(&self.run_dir.join(VALIDATION_FILE), text.as_bytes())
                {
                    let _ = self.tx.send(RunEvent::Warning(e.to_string()));
                }
            }
            return;
        }
        if !lock(&self.captured).steps.insert(step) {
            return;
        }
        let mut m = StepMetrics::new(step);
        for (k, v) in values {
            m.insert(k, v);
        }
        let _ = self.tx.send(RunEvent::Step(m));
        // stdout and stderr race: a step may arrive after a later one.
        let _ = self.tx.send(RunEvent::StepStarted {
            step: self.next_step(),
            total: 0,
        });
    }

    fn next_step(&self) -> u64 {
        lock(&self.captured).steps.last().map_or(1, |s| s + 1)
    }
}

/// The trainer's exit, as the driver's result.
pub(crate) type TrainerTask = tokio::task::JoinHandle<Result<(), DriverError>>;

/// A started trainer: what stops it ([`Trainer::terminate`]) and what it printed last. The
/// runner awaits its [`TrainerTask`] like any driver's.
pub(crate) struct Trainer {
    pub(crate) pgid: i32,
    /// The run's token in the trainer's environment ([`strays::TOKEN_VAR`]).
    token: String,
    shared: Arc<Shared>,
    reaper: Mutex<Option<Reaper>>,
}

impl Trainer {
    /// The trainer's last output lines (at most [`TAIL_LINES`]), oldest first.
    pub(crate) fn tail(&self) -> String {
        let t = lock(&self.shared.tail);
        let mut s = t.lines.iter().cloned().collect::<Vec<_>>().join("\n");
        if !s.is_empty() {
            s.push('\n');
        }
        s
    }

    /// What the report must say about how the metrics were captured: steps whose console
    /// line never arrived and were taken from verl's file logger.
    pub(crate) fn notes(&self) -> Vec<String> {
        let steps = &lock(&self.shared.captured).from_file_logger;
        if steps.is_empty() {
            return Vec::new();
        }
        let list: Vec<String> = steps.iter().map(u64::to_string).collect();
        vec![format!(
            "verl's console never showed step {} (Ray can drop a worker's last output when the \
             launcher exits first): taken from verl's file logger ({JSONL_FILE})",
            list.join(", ")
        )]
    }

    /// The trainer's last non-empty output line.
    pub(crate) fn last_line(&self) -> Option<String> {
        lock(&self.shared.tail).lines.back().cloned()
    }

    /// Stop every process of the trainer's group: TERM, then KILL after `grace`. Returns when
    /// no live process is left in the group (or after one more second past KILL).
    /// Stop the trainer's process group, then every process it started elsewhere (marked
    /// with the run's token); returns those, for the report.
    pub(crate) async fn terminate(&self, grace: Duration) -> Vec<strays::Stray> {
        terminate_group(self.pgid, grace).await;
        let strays = strays::stop_marked(&self.token, grace).await;
        if let Some(r) = lock(&self.reaper).take() {
            r.disarm();
        }
        strays
    }
}

/// A watcher outside the harness that stops the trainer's group if the harness dies without
/// doing so itself (SIGKILL, the OOM killer): a `sh` in its own process group, reading a pipe
/// whose only writer is the harness. The kernel closes the pipe when the harness dies; on that
/// end-of-file the watcher sends TERM to the group, then KILL after 3 s. After a clean
/// teardown the harness writes `done` and the watcher exits without a signal.
struct Reaper {
    pipe: std::process::ChildStdin,
    child: std::process::Child,
}

/// The watcher's script; `$1` is the group, `$2` the run's token ([`strays::TOKEN_VAR`]): the
/// group gets TERM, then KILL; so does every process still marked with the token (Ray's and
/// the processes it spawned, outside the group). No `--` before the negative group id: dash's
/// `kill` takes `--` for a pid and fails ("Illegal number"); `-SIG -PGID` works in dash and bash.
const REAPER_SCRIPT: &str = r#"if read -r x && [ "$x" = done ]; then exit 0; fi
g=$1 tok="RLHARNESS_RUN_TOKEN=$2"
sweep() {
  [ -n "$2" ] || return 0
  for e in /proc/[0-9]*/environ; do
    if grep -qszxF "$tok" "$e"; then p=${e#/proc/}; kill "-$1" "${p%/environ}" 2>/dev/null; fi
  done
}
kill -TERM "-$g" 2>/dev/null
sweep TERM "$2"
i=0
while [ "$i" -lt 30 ] && kill -0 "-$g" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
kill -KILL "-$g" 2>/dev/null
sweep KILL "$2"
exit 0"#;

impl Reaper {
    fn start(pgid: i32, token: &str) -> std::io::Result<Reaper> {
        use std::os::unix::process::CommandExt;
        // std makes the pipe close-on-exec: no later child holds the writer.
        let mut child = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                REAPER_SCRIPT,
                "rlharness-reaper",
                &pgid.to_string(),
                token,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: a Ctrl-C at the terminal must not take it down with the harness.
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take().expect("stdin was piped");
        Ok(Reaper { pipe, child })
    }

    /// The harness stopped the group itself: the watcher exits quietly.
    fn disarm(mut self) {
        use std::io::Write;
        let _ = self.pipe.write_all(b"done\n");
        drop(self.pipe);
        let _ = self.child.wait();
    }
}

/// Start the trainer. Its stdout and stderr go to `stdout.log` and `stderr.log` in the run
/// directory as they arrive; metrics go to `tx` as steps.
pub(crate) fn start(
    launch: &TrainerLaunch,
    tx: EventSender,
) -> Result<(Trainer, TrainerTask), CommandDriverError> {
    let open = |name: &str| {
        let path = launch.run_dir.join(name);
        std::fs::File::create(&path)
            .map(tokio::fs::File::from_std)
            .map_err(|source| CommandDriverError::Log { path, source })
    };
    let out_log = open("stdout.log")?;
    let err_log = open("stderr.log")?;
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        // A scenario of a local matrix (`run --jobs`): its GPU pinning, for this trainer only.
        .envs(crate::slot::current_slot().env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| CommandDriverError::Spawn {
        program: launch.program.display().to_string(),
        source,
    })?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let shared = Arc::new(Shared {
        tail: Mutex::new(OutputTail::default()),
        captured: Mutex::new(Captured::default()),
        tx,
        run_dir: launch.run_dir.clone(),
    });
    let console = launch.metrics_from == MetricsSource::VerlConsole;
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(tokio::spawn(read_stream(
            out,
            out_log,
            shared.clone(),
            console,
        )));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(tokio::spawn(read_stream(
            err,
            err_log,
            shared.clone(),
            console,
        )));
    }
    let jsonl = (launch.metrics_from == MetricsSource::VerlJsonl)
        .then(|| JsonlTail::new(&launch.jsonl_path));
    let backstop = console.then(|| JsonlTail::new(&launch.jsonl_path));
    let task = tokio::spawn(supervise(
        child,
        readers,
        Tails { jsonl, backstop },
        shared.clone(),
        launch.steps,
    ));
    // Without a watcher a SIGKILL of the harness would leave the trainer running; say so,
    // but a missing `/bin/sh` is no reason to refuse the run.
    let token = launch
        .env
        .iter()
        .find(|(k, _)| k == strays::TOKEN_VAR)
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let reaper = match (pgid > 0).then(|| Reaper::start(pgid, &token)).transpose() {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("cannot start the trainer's watcher (/bin/sh): {e}; if rlharness is killed, stop process group {pgid} by hand");
            None
        }
    };
    Ok((
        Trainer {
            pgid,
            token,
            shared,
            reaper: Mutex::new(reaper),
        },
        task,
    ))
}

/// Copy one output stream to its log, line by line into the tail and the console parser.
/// `\r` ends a line too (progress bars redraw with it).
async fn read_stream<R: AsyncRead + Unpin>(
    mut stream: R,
    mut log: tokio::fs::File,
    shared: Arc<Shared>,
    console: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let handle = |line: &[u8]| {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\r', '\n']);
        let clean = capture::strip_ansi(text);
        lock(&shared.tail).push(&clean);
        if console {
            if let Some(rec) = capture::parse_console_line(text) {
                shared.record(rec.step, rec.values);
            }
        }
    };
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = log.write_all(&buf[..n]).await;
        for &b in &buf[..n] {
            if b == b'\n' || b == b'\r' {
                if !line.is_empty() {
                    handle(&line);
                    line.clear();
                }
            } else {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        handle(&line);
    }
    let _ = log.flush().await;
}

fn poll_jsonl(tail: &mut JsonlTail, shared: &Shared, last: bool) {
    let lines = if last { tail.finish() } else { tail.poll() };
    match lines {
        Ok(lines) => {
            for l in lines {
                match capture::parse_jsonl_line(&l) {
                    Ok(rec) => shared.record(rec.step, rec.values),
                    Err(e) => {
                        let _ = shared.tx.send(RunEvent::Warning(format!(
                            "{}: skipped a line: {e}",
                            tail.path().display()
                        )));
                    }
                }
            }
        }
        Err(e) => {
            let _ = shared.tx.send(RunEvent::Warning(format!(
                "cannot read {}: {e}",
                tail.path().display()
            )));
        }
    }
}

/// verl's file logger as the driver reads it: the source of the metrics (`verl-jsonl`), or the
/// backstop of the console (`verl-console`), read once the trainer has ended.
struct Tails {
    jsonl: Option<JsonlTail>,
    backstop: Option<JsonlTail>,
}

/// verl prints each step's metrics in its task runner, a Ray worker whose output reaches the
/// launcher's console through Ray's log monitor. When the launcher exits right after the last
/// step, Ray can drop those last lines (seen with real verl 0.7.1: the last step's line was
/// missing in 2 of 5 short runs on a 2-core host). verl's file logger, which the harness always turns on, wrote the
/// same values in the same call, so the steps it holds that the console never showed are taken
/// from it, and the run says so.
fn fill_from_file_logger(tail: &mut JsonlTail, shared: &Shared) {
    let Ok(lines) = tail.finish() else {
        return;
    };
    for l in lines {
        let Ok(rec) = capture::parse_jsonl_line(&l) else {
            continue;
        };
        if rec.step == 0 || lock(&shared.captured).steps.contains(&rec.step) {
            continue;
        }
        lock(&shared.captured).from_file_logger.push(rec.step);
        shared.record(rec.step, rec.values);
    }
}

/// Wait for the trainer to exit while tailing its JSONL file; its exit status is the driver's
/// result.
async fn supervise(
    mut child: tokio::process::Child,
    readers: Vec<tokio::task::JoinHandle<()>>,
    tails: Tails,
    shared: Arc<Shared>,
    planned: u64,
) -> Result<(), DriverError> {
    let Tails {
        mut jsonl,
        backstop,
    } = tails;
    let mut ticker = tokio::time::interval(JSONL_POLL);
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            _ = ticker.tick() => {
                if let Some(t) = jsonl.as_mut() {
                    poll_jsonl(t, &shared, false);
                }
            }
        }
    };
    for r in readers {
        let _ = tokio::time::timeout(PIPE_DRAIN, r).await;
    }
    if let Some(t) = jsonl.as_mut() {
        poll_jsonl(t, &shared, true);
    }
    if let Some(mut t) = backstop {
        fill_from_file_logger(&mut t, &shared);
    }
    let step = shared.next_step();
    let status = status.map_err(|e| DriverError::Trainer {
        step,
        message: format!("cannot wait for the trainer: {e}"),
    })?;
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        let how = match (status.code(), status.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            (None, None) => "ended abnormally".into(),
        };
        return Err(DriverError::Trainer {
            step,
            message: format!("the trainer {how}"),
        });
    }
    if step == 1 {
        return Err(DriverError::Trainer {
            step,
            message: "the trainer exited 0 but no step metrics were captured (is verl's \
                      logger writing where `metrics_from` reads?)"
                .into(),
        });
    }
    if step <= planned {
        return Err(DriverError::Trainer {
            step,
            message: format!(
                "the trainer exited 0 after step {} of the {planned} asked \
                 (trainer.total_training_steps); steps {step}..{planned} never reached the \
                 console or verl's file logger",
                step - 1
            ),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Process groups.

/// Whether any process of group `pgid` is still alive (zombies count as dead). Reads `/proc`
/// where it exists; elsewhere asks the kernel with signal 0 (zombies then count as alive).
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 0 {
        return false;
    }
    match std::fs::read_dir("/proc") {
        Ok(entries) => entries.flatten().any(|e| {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                return false;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            proc_stat_group(&stat)
                .is_some_and(|(state, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
        }),
        // SAFETY: killpg with signal 0 only checks for existence and permission.
        Err(_) => unsafe { libc::killpg(pgid, 0) == 0 },
    }
}

/// `(state, process group)` from a `/proc/<pid>/stat` line; the command name may hold spaces
/// and parentheses, so fields are counted after its last `)`.
fn proc_stat_group(stat: &str) -> Option<(char, i32)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

fn signal_group(pgid: i32, sig: libc::c_int) {
    if pgid > 0 {
        // SAFETY: plain syscall on a process group this harness created; errors (ESRCH when
        // the group is gone) are the expected outcome and ignored.
        unsafe {
            libc::killpg(pgid, sig);
        }
    }
}

/// TERM the group, wait up to `grace` for it to go, then KILL what is left.
pub(crate) async fn terminate_group(pgid: i32, grace: Duration) {
    if !group_alive(pgid) {
        return;
    }
    signal_group(pgid, libc::SIGTERM);
    let step = Duration::from_millis(50);
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if !group_alive(pgid) {
            return;
        }
        tokio::time::sleep(step).await;
    }
    signal_group(pgid, libc::SIGKILL);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while group_alive(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(step).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hydra_values_are_quoted_the_way_hydra_reads_them() {
        assert_eq!(hydra_value(&json!(null)), "null");
        assert_eq!(hydra_value(&json!(true)), "true");
        assert_eq!(hydra_value(&json!(16)), "16");
        assert_eq!(hydra_value(&json!(1.0)), "1.0");
        assert_eq!(hydra_value(&json!(1.0e-6)), "1e-6");
        assert_eq!(hydra_value(&json!(0.95)), "0.95");
        assert_eq!(hydra_value(&json!("Qwen/Qwen3-0.6B")), "'Qwen/Qwen3-0.6B'");
        assert_eq!(hydra_value(&json!("5")), "'5'");
        assert_eq!(hydra_value(&json!([0.9, 0.95])), "[0.9,0.95]");
        assert_eq!(
            hydra_value(&json!(["console", "file"])),
            "['console','file']"
        );
        assert_eq!(hydra_value(&json!({"a": 1, "b": "x"})), "{a:1,b:'x'}");
        assert_eq!(hydra_value(&json!({})), "{}");
    }

    #[test]
    fn hydra_quoting_escapes_quotes_backslashes_and_interpolations() {
        assert_eq!(hydra_quote("it's"), r"'it\'s'");
        assert_eq!(hydra_quote(r"a\b"), r"'a\b'");
        assert_eq!(hydra_quote(r"ends\"), r"'ends\\'");
        assert_eq!(hydra_quote(r"x\'y"), r"'x\\\'y'");
        assert_eq!(hydra_quote("${oc.env:HOME}"), r"'\${oc.env:HOME}'");
        assert_eq!(hydra_quote("a, b = [c]"), "'a, b = [c]'");
        // A literal backslash before `${`: doubled, then the escaped interpolation.
        assert_eq!(hydra_quote(r"a\${x}"), r"'a\\\${x}'");
        assert_eq!(hydra_quote("cost $5 {x}"), "'cost $5 {x}'");
    }

    #[test]
    fn the_spec_rejects_an_empty_command_and_bad_addresses() {
        let raw = |command: Vec<&str>, listen: Option<&str>| RawCommandDriverSpec {
            command: command.into_iter().map(String::from).collect(),
            env: BTreeMap::new(),
            metrics_from: MetricsSource::VerlConsole,
            proxy_listen: listen.map(String::from),
            sources: Vec::new(),
        };
        let with_sources = |sources: &[&str]| RawCommandDriverSpec {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            ..raw(vec!["x"], None)
        };
        assert!(CommandDriverSpec::try_from(with_sources(&["VERL_SRC", "A_1"])).is_ok());
        assert!(CommandDriverSpec::try_from(with_sources(&["verl src"]))
            .unwrap_err()
            .contains("`sources`: \"verl src\" is not an environment variable name"));
        assert!(CommandDriverSpec::try_from(raw(vec![], None))
            .unwrap_err()
            .contains("empty"));
        assert!(
            CommandDriverSpec::try_from(raw(vec!["x"], Some("localhost")))
                .unwrap_err()
                .contains("proxy_listen")
        );
        assert!(CommandDriverSpec::try_from(raw(vec!["x"], Some("127.0.0.1:0"))).is_ok());
    }

    #[test]
    fn proc_stat_parsing_survives_odd_command_names() {
        assert_eq!(
            proc_stat_group("123 (a) b) c) S 1 77 77 0"),
            Some(('S', 77))
        );
        assert_eq!(proc_stat_group("123 (x) Z 1 5 5"), Some(('Z', 5)));
        assert_eq!(proc_stat_group("garbage"), None);
        assert!(!group_alive(0));
    }

    #[test]
    fn output_tail_keeps_the_last_lines() {
        let mut t = OutputTail::default();
        for i in 0..(TAIL_LINES + 10) {
            t.push(&format!("line {i}"));
            t.push("   ");
        }
        assert_eq!(t.lines.len(), TAIL_LINES);
        assert_eq!(t.lines.front().map(String::as_str), Some("line 10"));
    }
}
