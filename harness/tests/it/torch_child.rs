//! The torch backend's process (`rlharness-torch`, started by `rlharness run`): when it is
//! missing, when it dies before it is ready, and (feature `torch`) when it is killed mid-run,
//! the run fails with exit status 3 and says why, naming the executable and quoting its last
//! lines; a run killed mid-way keeps the steps it finished.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::repo;

/// `rlharness run` of the CPU flagship into `out`, with `env` set and `args` appended. The
/// `requires` block is emptied so the run is attempted on any build.
fn run_flagship(out: &Path, env: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlharness"));
    cmd.current_dir(repo())
        .arg("run")
        .arg("scenarios/tiny-gsm8k-grpo.yaml")
        .arg("--out")
        .arg(out)
        .args(["--set", "requires.features=[]", "--no-progress"])
        .args(args)
        .env_remove("RLHARNESS_TORCH_BIN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// [`run_flagship`] into `dir/out` with `bin` as the torch executable, which must fail the run
/// with exit status 3: its stderr.
fn failed_run_with_torch_bin(dir: &Path, bin: &Path, args: &[&str]) -> String {
    let out = run_flagship(&dir.join("out"), &[("RLHARNESS_TORCH_BIN", bin)], args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    err
}

/// An executable shell script `dir/name` that runs `body`.
#[cfg(unix)]
fn fake_torch_bin(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let fake = dir.join(name);
    std::fs::write(&fake, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    fake
}

#[test]
fn a_missing_torch_executable_fails_the_run_and_says_how_to_build_it() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-rlharness-torch");
    let err = failed_run_with_torch_bin(tmp.path(), &missing, &[]);
    common::says(
        &err,
        &[
            "no-such-rlharness-torch",
            "does not exist",
            "cargo build --release --features torch",
        ],
    );
}

#[cfg(unix)]
#[test]
fn a_torch_executable_that_dies_before_it_is_ready_fails_the_run_with_its_last_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = fake_torch_bin(
        tmp.path(),
        "fake-rlharness-torch",
        "echo 'loading the model' >&2\necho 'error: libtorch_cpu.so: cannot open shared object file' >&2\nexit 7\n",
    );
    let err = failed_run_with_torch_bin(tmp.path(), &fake, &[]);
    common::says(
        &err,
        &[
            "fake-rlharness-torch",
            "before it was ready",
            "exit status: 7",
            "libtorch_cpu.so: cannot open shared object file",
        ],
    );
}

#[cfg(unix)]
#[test]
fn a_torch_executable_that_hangs_before_it_is_ready_is_stopped_at_the_run_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = fake_torch_bin(
        tmp.path(),
        "hung-rlharness-torch",
        "echo 'loading the model' >&2\nexec sleep 600\n",
    );
    let t = std::time::Instant::now();
    let err = failed_run_with_torch_bin(tmp.path(), &fake, &["--set", "timeouts.run=2s"]);
    common::says(&err, &["no ready line within 2s", "loading the model"]);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        t.elapsed()
    );
}

/// The pids of `parent`'s children whose command name starts with `name` (Linux `/proc`).
#[cfg(all(feature = "torch", target_os = "linux"))]
fn children_named(parent: u32, name: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if ppid == Some(&parent.to_string()) && name.starts_with(comm) {
            pids.push(pid);
        }
    }
    pids
}

#[cfg(all(feature = "torch", target_os = "linux"))]
#[test]
fn a_torch_backend_killed_mid_run_fails_the_run_and_keeps_the_finished_steps() {
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .current_dir(repo())
        .arg("run")
        .arg("scenarios/tiny-gsm8k-grpo.yaml")
        .arg("--out")
        .arg(&out_dir)
        .args(["--no-progress", "--steps", "40"])
        .env_remove("RLHARNESS_TORCH_BIN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = out_dir.join("tiny-gsm8k-grpo/latest/metrics.csv");
    let rows = || {
        std::fs::read_to_string(&metrics)
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while rows() < 2 {
        assert!(Instant::now() < deadline, "no two steps within 5 minutes");
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the run ended early ({:?}): {}",
                out.status.code(),
                stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pids = children_named(child.id(), "rlharness-torch");
    assert_eq!(pids.len(), 1, "one torch child: {pids:?}");
    // SAFETY: kill(2) on a pid this test just read as the run's child.
    assert_eq!(unsafe { libc::kill(pids[0], libc::SIGKILL) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let kept = rows();
    assert!(kept >= 2, "the finished steps are kept: {kept}");
    let run: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("tiny-gsm8k-grpo/latest/run.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(run["status"], "failed", "{run}");
    let reason = run["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("rlharness-torch") && reason.contains("exited mid-run"),
        "{reason}"
    );
    // Reaped: no zombie is left behind.
    assert!(!Path::new(&format!("/proc/{}", pids[0])).exists());
}

/// `serve torch` without a scenario, on a fresh checkout (no cache): it serves the shipped
/// warm start instead of training one for minutes, says which model and weights it serves,
/// and answers `/health`. (How soon is measured in the closing notes and docs/performance.md,
/// not asserted here: tests do not time.)
#[cfg(feature = "torch")]
#[test]
fn serve_torch_starts_from_the_shipped_warm_start_and_answers_health() {
    use std::io::{BufRead, Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(["serve", "torch", "--port", "0"])
        .current_dir(tmp.path())
        .env_remove("RLHARNESS_TORCH_BIN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Waits as long as the server is starting (a busy machine loads libtorch slowly): until its
    // line, its exit, or a bound that only ends the wait for one that hangs.
    let mut lines = Vec::new();
    let addr = loop {
        let line = match rx.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("serve torch ended ({status}) before listening: {lines:?}");
                }
                let waited = started.elapsed();
                assert!(
                    waited < std::time::Duration::from_secs(600),
                    "no `listening on` line in {waited:?}: {lines:?}"
                );
                continue;
            }
            Err(e) => panic!("serve torch closed its output ({e}) before listening: {lines:?}"),
        };
        lines.push(line.clone());
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let ready = started.elapsed();
    child.kill().unwrap();
    let err = common::take_stderr(&mut child);
    child.wait().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let serving = lines
        .iter()
        .find(|l| l.starts_with("serving the "))
        .cloned();
    let serving = serving.unwrap_or_else(|| panic!("no `serving` line: {lines:?}"));
    assert!(
        serving.contains("warm start") && serving.contains("tiny-arith-warm-v1.safetensors"),
        "{serving}"
    );
    assert!(
        !err.contains("warm start: step"),
        "it trained a warm start: {err}"
    );
    eprintln!(
        "serve torch answered /health {:.1} s after its start",
        ready.as_secs_f64()
    );
}
