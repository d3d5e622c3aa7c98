//! Crash safety: `kill -9` of a real `rlharness run` child mid-run leaves a readable run
//! directory: `metrics.csv` with every completed step, `run.json` saying the run was
//! interrupted, and `rlharness compare` judging it (exit 3: the run itself failed). The signals
//! a run handles (SIGINT, SIGTERM, SIGHUP) are tested in `cli_habits`.

use crate::common;

use common::{csv_steps, dead, slow_scenario};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rlharness::metrics::MetricTable;
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(dead(trainer) && dead(worker)) {
        assert!(
            Instant::now() < deadline,
            "trainer {trainer} or its worker {worker} outlived the harness by 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
