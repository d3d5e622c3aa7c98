//! Crash safety: `kill -9` of a real `rlharness run` child mid-run leaves a readable run
//! directory: `metrics.csv` with every completed step, `run.json` saying the run was
//! interrupted, and `rlharness compare` judging it (exit 3: the run itself failed). The signals
//! a run handles (SIGINT, SIGTERM, SIGHUP) are tested in `cli_habits`.

use crate::common;

use common::{csv_steps, dead, slow_scenario};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rlharness::model::metrics::MetricTable;
use serde_json::Value;

#[test]
fn a_run_killed_with_sigkill_leaves_a_readable_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = slow_scenario(tmp.path());
    let out = tmp.path().join("out");
    let exe = env!("CARGO_BIN_EXE_rlharness");
    let mut child = Command::new(exe)
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let latest = out.join("slow-mock/latest");
    let csv = latest.join("metrics.csv");
    // Polls the child's output (a separate process: there is no event to wait on).
    let deadline = Instant::now() + Duration::from_secs(120);
    while csv_steps(&csv) < 2 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended before it was killed: {status}");
        }
        assert!(Instant::now() < deadline, "no two steps within 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL: nothing of the harness runs after this.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status}");
    }

    let run_dir = std::fs::canonicalize(&latest).unwrap();
    let table = MetricTable::read_csv(&run_dir.join("metrics.csv")).unwrap();
    let steps = table.steps();
    assert!(steps.len() >= 2, "{steps:?}");
    assert_eq!(
        steps,
        (1..=steps.len() as u64).collect::<Vec<_>>(),
        "every completed step, in order, each row whole"
    );
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(manifest["status"], "interrupted", "{manifest}");
    assert!(manifest["ended"].is_null());
    // No temp file of an atomic write is left looking like an output.
    for entry in std::fs::read_dir(&run_dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            [
                "run.json",
                "metrics.csv",
                "wire.jsonl",
                "server_config.json",
                "server_flags.json"
            ]
            .contains(&name.as_str())
                || name.starts_with(".tmp"),
            "unexpected file {name}"
        );
    }

    // `compare` re-judges the killed run: it reports it and exits 3 (the run itself failed).
    let compare = Command::new(exe)
        .args([
            "compare",
            run_dir.to_str().unwrap(),
            "--golden",
            tmp.path().join("golden").to_str().unwrap(),
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&compare.stdout);
    assert_eq!(
        compare.status.code(),
        Some(3),
        "{text}\n{}",
        String::from_utf8_lossy(&compare.stderr)
    );
    assert!(text.contains("interrupted"), "{text}");
    let report = std::fs::read_to_string(run_dir.join("compare/golden/report.md")).unwrap();
    assert!(report.contains("interrupted"), "{report}");
    // Against a second run (itself) too.
    let twice = Command::new(exe)
        .args([
            "compare",
            run_dir.to_str().unwrap(),
            run_dir.to_str().unwrap(),
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(twice.status.code(), Some(3));
}

/// `kill -9` of the harness while an external trainer runs: the watcher the command driver
/// starts beside it stops the trainer's whole process group (the launcher and the worker it
/// left behind), so no trainer outlives the harness.
#[test]
fn a_sigkilled_harness_leaves_no_trainer_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlharness"));
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let (mut child, _, trainer, worker) = common::hanging_console_run(cmd, &out);
    assert!(!dead(trainer) && !dead(worker));
    child.kill().unwrap();
    child.wait().unwrap();
    // The watcher sends TERM at once, KILL 3 s later; the bound only keeps a broken watcher
    // from hanging the test (10 s was a quiet machine's margin).
    let killed = Instant::now();
    while !(dead(trainer) && dead(worker)) {
        assert!(
            killed.elapsed() < GONE_WITHIN,
            "trainer {trainer} or its worker {worker} outlived the harness by {GONE_WITHIN:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "trainer and worker gone {:?} after the harness",
        killed.elapsed()
    );
}

/// How long what a SIGKILLed harness started may take to go: the watcher's TERM, its KILL
/// 3 s later, an engine's exit once its standard input closes, on a machine as busy as CI's.
/// Only a process that stays is a failure; this bound just ends the wait for one.
const GONE_WITHIN: Duration = Duration::from_secs(120);

/// A tiny seeded generator (xorshift64*) for the kill points: the same points on every host.
struct Points(u64);

impl Points {
    fn next_fraction(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The processes (not zombies) whose environment holds `marker`: what a killed harness left.
fn processes_with(marker: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let needle = format!("RLHARNESS_KILL_TEST={marker}");
        let holds = environ.split(|b| *b == 0).any(|kv| kv == needle.as_bytes());
        if holds && !dead(pid) {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            out.push((pid, cmd.chars().take(160).collect()));
        }
    }
    out
}

/// What one killed run left, judged.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Left {
    /// Killed before the run folder existed.
    Nothing,
    /// An interrupted run with this many finished steps, judged by `compare` as such.
    Interrupted(usize),
    /// Killed after the run had finished.
    Finished,
}

/// SIGKILL `rlharness run ARGS` (started in `dir` with `out`) `after` its start, then check what
/// it left: the run folder parses, `compare` judges an interrupted run as one (exit 3) with every
/// finished step kept, and within 10 s no process it started (engine, proxy, trainer) is left.
fn kill_and_judge(
    dir: &std::path::Path,
    args: &[&str],
    out: &std::path::Path,
    after: Duration,
    golden: &std::path::Path,
    ended_by_itself: &mut Option<Duration>,
) -> Left {
    let exe = env!("CARGO_BIN_EXE_rlharness");
    let marker = format!("{}-{}", std::process::id(), out.display());
    let mut child = Command::new(exe)
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--golden")
        .arg(golden)
        .arg("--no-progress")
        .current_dir(dir)
        .env("RLHARNESS_KILL_TEST", &marker)
        .env_remove("CI")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the kill point, or for the run to end by itself first (then how long it took:
    // the machine's speed now, which the next points follow).
    let spawned = Instant::now();
    while spawned.elapsed() < after {
        if child.try_wait().unwrap().is_some() {
            *ended_by_itself = Some(spawned.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    loop {
        let left = processes_with(&marker);
        if left.is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < GONE_WITHIN,
            "killed {after:?} in, the harness left {left:?} running after {GONE_WITHIN:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let runs: Vec<std::path::PathBuf> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|scenario| {
            std::fs::read_dir(scenario.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        // A hidden `.tmp-*` folder is one the harness was making when killed: never a run.
        .filter(|p| p.is_dir() && !p.is_symlink())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert!(runs.len() <= 1, "{runs:?}");
    let Some(run) = runs.first() else {
        return Left::Nothing;
    };
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(run.join("run.json"))
            .unwrap_or_else(|e| panic!("killed {after:?} in: {}: no run.json: {e}", run.display())),
    )
    .unwrap_or_else(|e| panic!("killed {after:?} in: run.json does not parse: {e}"));
    let steps = match std::fs::read_to_string(run.join("metrics.csv")) {
        Err(_) => 0,
        Ok(_) => {
            let table = MetricTable::read_csv(&run.join("metrics.csv"))
                .unwrap_or_else(|e| panic!("killed {after:?} in: metrics.csv: {e}"));
            let steps = table.steps();
            assert_eq!(
                steps,
                (1..=steps.len() as u64).collect::<Vec<_>>(),
                "killed {after:?} in: every finished step, in order"
            );
            steps.len()
        }
    };
    let compare = Command::new(exe)
        .arg("compare")
        .arg(run)
        .arg("--golden")
        .arg(golden)
        .current_dir(dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&compare.stdout).into_owned();
    if manifest["status"] == "completed" {
        assert!(
            matches!(compare.status.code(), Some(0 | 1 | 4)),
            "killed {after:?} in, after the run: compare {:?}: {said}",
            compare.status
        );
        return Left::Finished;
    }
    assert_eq!(
        manifest["status"], "interrupted",
        "killed {after:?} in: {manifest}"
    );
    assert_eq!(
        compare.status.code(),
        Some(3),
        "killed {after:?} in: {said}"
    );
    assert!(said.contains("interrupted"), "killed {after:?} in: {said}");
    Left::Interrupted(steps)
}

/// SIGKILL at 20 seeded points of a run, from start-up to its last writes, then a clean run of
/// the same scenario into the same folders. `full` is how long one whole run takes here; the
/// points spread over it, from start-up to the last writes.
fn kill_at_twenty_points(dir: &std::path::Path, args: &[&str], seed: u64) -> Vec<Left> {
    let out = dir.join("killed");
    let golden = dir.join("golden");
    let started = Instant::now();
    let clean = Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(dir.join("timing"))
        .arg("--golden")
        .arg(dir.join("timing-golden"))
        .arg("--no-progress")
        .current_dir(dir)
        .env_remove("CI")
        .output()
        .unwrap();
    let mut full = started.elapsed();
    assert_eq!(clean.status.code(), Some(4), "{}", common::text(&clean));
    let mut points = Points(seed);
    let mut left = Vec::new();
    for i in 0..20 {
        let after = full.mul_f64(points.next_fraction());
        let mut ended = None;
        left.push(kill_and_judge(
            dir,
            args,
            &out.join(i.to_string()),
            after,
            &golden,
            &mut ended,
        ));
        // A run that ended before its kill point says how long a whole run takes now: the
        // machine got quieter since the clean run was timed (a busy CI machine's load comes
        // and goes), and the later points spread over the shorter run, not past its end.
        if let Some(took) = ended {
            full = full.min(took);
        }
    }
    eprintln!("killed after {full:?} for one whole run: {left:?}");
    // The same scenario again, into a folder where killed runs are: it starts and ends cleanly.
    let again = Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out.join("0"))
        .arg("--golden")
        .arg(&golden)
        .arg("--no-progress")
        .current_dir(dir)
        .env_remove("CI")
        .output()
        .unwrap();
    assert!(
        matches!(again.status.code(), Some(0 | 4)),
        "{}",
        common::text(&again)
    );
    left
}

/// The mock smoke (20 steps), killed at 20 seeded points: at least half land mid-run.
#[test]
fn sigkill_at_twenty_points_of_a_mock_run_leaves_a_judged_run_and_no_process() {
    let tmp = tempfile::tempdir().unwrap();
    let smoke = common::repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml");
    let left = kill_at_twenty_points(tmp.path(), &[smoke.to_str().unwrap()], 0x5EED_0001);
    let mid = left
        .iter()
        .filter(|l| matches!(l, Left::Interrupted(_)))
        .count();
    assert!(mid >= 10, "{left:?}");
    assert!(
        left.iter()
            .any(|l| matches!(l, Left::Interrupted(n) if *n > 0)),
        "{left:?}"
    );
}

/// The CPU flagship on the torch engine (3 steps), killed at 20 seeded points: the engine
/// process never outlives the harness.
#[cfg(feature = "torch")]
#[test]
fn sigkill_at_twenty_points_of_a_torch_run_leaves_a_judged_run_and_no_process() {
    let tmp = tempfile::tempdir().unwrap();
    let flagship = common::repo().join("scenarios/tiny-gsm8k-grpo.yaml");
    let left = kill_at_twenty_points(
        tmp.path(),
        &[
            flagship.to_str().unwrap(),
            "--steps",
            "3",
            "--set",
            "requires.features=[]",
        ],
        0x5EED_0002,
    );
    let mid = left
        .iter()
        .filter(|l| matches!(l, Left::Interrupted(_)))
        .count();
    assert!(mid >= 10, "{left:?}");
}
