//! A started trainer: its output streams and verl's file logger read into steps, its exit
//! supervised, and a watcher that stops its group if the harness dies.

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::envwatch::EnvWatch;
use super::group::terminate_group;
use super::{
    CommandDriverError, MetricsSource, TrainerLaunch, ENV_POLL, JSONL_FILE, JSONL_POLL, PIPE_DRAIN,
    TAIL_LINES, VALIDATION_FILE,
};
use crate::model::events::{EventSender, RunEvent};
use crate::model::metrics::StepMetrics;
use crate::model::util::lock;
use crate::run::capture::{self, JsonlTail};
use crate::run::driver::builtin::DriverError;
use crate::run::driver::strays;

/// The last lines of the trainer's output, and its last line (what a hang report names).
#[derive(Debug, Default)]
pub(super) struct OutputTail {
    pub(super) lines: VecDeque<String>,
}

impl OutputTail {
    pub(super) fn push(&mut self, line: &str) {
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
    /// The watched variables' reader: sampled while the trainer runs, and once more before
    /// anything of it is stopped ([`Trainer::terminate`]).
    env_watch: Mutex<Option<EnvWatch>>,
}

impl Shared {
    fn sample_env(&self) {
        if let Some(w) = lock(&self.env_watch).as_mut() {
            w.sample();
        }
    }
}

impl Shared {
    /// Send one step's metrics (step 0, verl's validation before training, goes to its own
    /// file instead). A step already sent is ignored.
    fn record(&self, step: u64, values: Vec<(String, f64)>) {
        if step == 0 {
            let mut c = lock(&self.captured);
            if !c.validation {
                c.validation = true;
                let text = capture::validation_json(&values).to_string();
                if let Err(e) = rlharness_arctic::fsx::write_atomic(
                    &self.run_dir.join(VALIDATION_FILE),
                    text.as_bytes(),
                ) {
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
        // The last look at what the trainer started, while all of it still runs.
        self.shared.sample_env();
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
    // A scenario of a local matrix (`run --jobs`): its GPU pinning, for this trainer only.
    let slot_env = crate::model::slot::current_slot().env;
    // The environment the command starts with: what the launcher's own settings are told
    // apart from.
    let given: std::collections::BTreeMap<String, String> = std::env::vars()
        .chain(launch.env.iter().cloned())
        .chain(slot_env.iter().cloned())
        .collect();
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .envs(slot_env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| CommandDriverError::Spawn {
        program: launch.program.display().to_string(),
        source,
    })?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let token = launch
        .env
        .iter()
        .find(|(k, _)| k == strays::TOKEN_VAR)
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let env_watch = EnvWatch::new(
        &launch.watch_env,
        &launch.asked_env,
        given,
        &token,
        &launch.run_dir,
    );
    let shared = Arc::new(Shared {
        tail: Mutex::new(OutputTail::default()),
        captured: Mutex::new(Captured::default()),
        tx,
        run_dir: launch.run_dir.clone(),
        env_watch: Mutex::new(env_watch),
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
    let mut env_ticker = tokio::time::interval(ENV_POLL);
    let watching = lock(&shared.env_watch).is_some();
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            _ = ticker.tick() => {
                if let Some(t) = jsonl.as_mut() {
                    poll_jsonl(t, &shared, false);
                }
            }
            // Blocking /proc reads, a few milliseconds: short-lived processes (a server a
            // launcher starts and that exits) may be missed between two samples.
            _ = env_ticker.tick(), if watching => shared.sample_env(),
        }
    };
    // Once more: what the trainer started just before it ended (a server it launched) may
    // outlive it for a moment.
    shared.sample_env();
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
