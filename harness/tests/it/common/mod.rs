//! Helpers the end-to-end tests share: where the repository is, the run options of a test
//! run (the project's goldens, never written; the run directory at `OUT/run`), running a
//! scenario to the exit status it must reach, reading a run's `wire.jsonl`, `rlharness` as a
//! command, a slow scenario to interrupt, and waiting on a child process's output; runs that
//! several tests read, made once per test binary (`shared`). Each test module uses a part of it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod recorder;
pub mod shared;

use rlharness::app::run_one;
use rlharness::model::error::ExitStatus;
use rlharness::report::Report;
use rlharness::run::runner::RunOptions;
use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Options of a test run into `out`, the goldens read from `golden`, the run directory at
/// `run_dir`, with `--set` overrides.
pub fn run_options(out: &Path, golden: PathBuf, run_dir: PathBuf, set: Vec<String>) -> RunOptions {
    // Tests never write goldens (`ci` is on).
    RunOptions {
        set,
        run_dir: Some(run_dir),
        ..RunOptions::new(out.to_path_buf(), golden)
    }
}

/// Options of a test run into `out/run`, with `--set` overrides.
pub fn opts(out: &Path, set: &[&str]) -> RunOptions {
    run_options(
        out,
        repo().join("golden"),
        out.join("run"),
        set.iter().map(|s| s.to_string()).collect(),
    )
}

/// Run `scenario`; the run must end with exit status `want` (the report's summary says why
/// when it does not).
pub async fn run_expecting(scenario: &Path, opts: &RunOptions, want: ExitStatus) -> Report {
    let report = run_one(scenario, opts).await.unwrap();
    assert_eq!(report.exit_status(), want, "{}", report.summary());
    report
}

/// Every record of a run's `wire.jsonl`.
pub fn wire(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("wire.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `rlharness run ARGS --out OUT --no-progress` from the repository root, as CI runs it
/// (`CI=true`, errors only in the log).
pub fn rlharness_run(args: &[&str], out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlharness"));
    c.current_dir(repo())
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--no-progress")
        .env("CI", "true")
        .env("RUST_LOG", "error");
    c
}

/// `rlharness ARGS` from `dir`, as CI runs it (`CI=true`), waited for.
pub fn rlharness_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(args)
        .current_dir(dir)
        .env("CI", "true")
        .output()
        .unwrap()
}

/// A scenarios root `dir/scenarios` holding the project's layer files (the verl defaults, the
/// Arctic backend block and its knob manifest), for scenarios a test writes; its path.
pub fn scenarios_root_in(dir: &Path) -> PathBuf {
    let root = dir.join("scenarios");
    for rel in [
        "defaults/verl.yaml",
        "backends/arctic.yaml",
        "backends/arctic.knobs.yaml",
    ] {
        let to = root.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo().join("scenarios").join(rel), &to).unwrap();
    }
    root
}

/// A finished command's standard output, then its standard error.
pub fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `text` contains every one of `parts`; a failure names the missing ones and shows the text.
#[track_caller]
pub fn says(text: &str, parts: &[&str]) {
    let missing: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| !text.contains(p))
        .collect();
    assert!(missing.is_empty(), "missing {missing:?} in:\n{text}");
}

/// A scenarios root in `dir` with the project's layers and a slow mock scenario `slow-mock`:
/// every optimizer step answers 0.3 s late, so the run is still going when it is stopped.
pub fn slow_scenario(dir: &Path) -> PathBuf {
    let root = scenarios_root_in(dir);
    let base = std::fs::read_to_string(repo().join("scenarios/faults/latency.yaml")).unwrap();
    let text = base
        .replace("name: fault-latency", "name: slow-mock")
        .replace("steps: 4\n", "steps: 200\n")
        .replace("total_training_steps: 4", "total_training_steps: 200")
        .replace(
            "{fault: latency, seconds: 0.2, probability: 0.3, at: {route: /generate}}",
            "{fault: latency, seconds: 0.3, at: {route: /step}, times: 1000000}",
        )
        .replace("run: 2m", "run: 10m");
    assert!(text.contains("times: 1000000") && text.contains("steps: 200"));
    let path = root.join("slow-mock.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The data rows of a `metrics.csv` (0 while it does not exist).
pub fn csv_steps(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count().saturating_sub(1))
        .unwrap_or(0)
}

/// Poll `ready` every 20 ms until it gives a value; panics naming `what` when `child` ends
/// first or `secs` pass. (A separate process: there is no event to wait on.)
#[track_caller]
pub fn wait_for<T>(
    child: &mut Child,
    what: &str,
    secs: u64,
    mut ready: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = ready() {
            return v;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the process ended ({status}) before {what}");
        }
        assert!(Instant::now() < deadline, "no {what} within {secs} s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process is dead when it is gone or a zombie waiting for its parent.
pub fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            matches!(after.split_whitespace().next(), Some("Z" | "X"))
        }
    }
}

/// A run directory's `run.json`.
pub fn manifest(run_dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap()
}

/// `cmd` (an `rlharness` command, environment set by the caller) running the console stand-in
/// (`fixtures/verl/scenarios/verl-console.yaml`) into `out` with a trainer that hangs after
/// step 2 and has left a worker behind; waits (60 s at most) until both are up. The child, the
/// run directory and the trainer's and the worker's pids.
pub fn hanging_console_run(mut cmd: Command, out: &Path) -> (Child, PathBuf, i32, i32) {
    let fixture = repo().join("harness/tests/fixtures/verl/scenarios/verl-console.yaml");
    let mut child = cmd
        .args(["run", "--no-progress", "--out"])
        .arg(out)
        .args([
            "--set",
            "driver.command.1=hang",
            "--set",
            "timeouts.step=60",
            // Far from any wait of the tests (60 s for the worker to be up): the fixture's 1m
            // run limit fired first on a busy machine, and SIGTERM found a timed-out run.
            "--set",
            "timeouts.run=1h",
        ])
        .arg(&fixture)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let runs = out.join("fixture-verl-console");
    // The fake trainer writes child.pid once it has left a worker behind (after step 2).
    let (dir, trainer, worker) = wait_for(&mut child, "the trainer's worker", 60, || {
        std::fs::read_dir(&runs).ok()?.find_map(|e| {
            let p = e.ok()?.path();
            let pid = |f: &str| std::fs::read_to_string(p.join(f)).ok()?.trim().parse().ok();
            Some((p.clone(), pid("trainer.pid")?, pid("child.pid")?))
        })
    });
    (child, dir, trainer, worker)
}

/// Everything a child writes to its piped standard error, until it closes it.
pub fn take_stderr(child: &mut Child) -> String {
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("standard error is piped")
        .read_to_string(&mut err)
        .unwrap();
    err
}

/// Copy the tree `from` to `to` (folders and plain files).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// A port free on this host now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
