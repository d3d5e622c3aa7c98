//! The habits a CI user expects of a command-line tool, tested on the real binary: a stop
//! signal (SIGINT, SIGTERM, SIGHUP) ends a run with exit 3, every report written and no
//! process left; a closed standard output or error is not a crash; colours follow `--color`, the
//! terminal and `NO_COLOR`; `-q` leaves results and failures only; `--no-progress` keeps plain
//! step lines; the exit status is what the index and JUnit say; `check` refuses what `run`
//! refuses; a command run from another working directory finds the project's goldens; files
//! get the umask's mode; a `check` or `list` of nothing is an error.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{self, csv_steps, dead, manifest, repo, says, text, wait_for};

mod inputs;
pub(crate) mod json;
mod selection;
mod tour;

fn rlharness() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlharness"));
    c.env("CI", "true")
        .env("RUST_LOG", "error")
        .env_remove("NO_COLOR")
        .env_remove("GITHUB_ACTIONS");
    c
}

/// Run the smoke scenario once into `out` (from the repository root); its run directory.
fn smoke_run(out: &Path) -> PathBuf {
    let o = common::rlharness_run(&["scenarios/smoke/mock-gsm8k-grpo.yaml"], out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::canonicalize(out.join("mock-gsm8k-grpo/latest")).unwrap()
}

/// SIGINT (Ctrl-C), SIGTERM (`timeout`, CI runners, Kubernetes) and SIGHUP (the terminal or the
/// SSH session went away) each end a run the same way: exit 3, the finished steps kept, the
/// run's reports and the combined index and JUnit written, and the trainer's whole process
/// group (the launcher and the worker it left behind) stopped.
#[cfg(unix)]
#[test]
fn every_stop_signal_leaves_full_reports_exit_3_and_no_process() {
    for (signal, name, reason) in [
        (
            libc::SIGINT,
            "SIGINT",
            "interrupted (Ctrl-C, SIGINT) during step",
        ),
        (libc::SIGTERM, "SIGTERM", "stopped by SIGTERM during step"),
        (libc::SIGHUP, "SIGHUP", "stopped by SIGHUP during step"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let mut cmd = rlharness();
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let (child, run_dir, trainer, worker) = common::hanging_console_run(cmd, &out);
        assert!(!dead(trainer) && !dead(worker));
        // SAFETY: a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(3), "{name}: {}", text(&o));
        for f in ["verdict.json", "report.md", "report.html", "junit.xml"] {
            assert!(
                run_dir.join(f).is_file(),
                "{name}: {f} missing: {}",
                text(&o)
            );
        }
        for f in ["index.md", "index.html", "junit.xml"] {
            assert!(out.join(f).is_file(), "{name}: OUT/{f} missing");
        }
        let m = manifest(&run_dir);
        assert_eq!(m["status"], "interrupted", "{name}: {m}");
        assert!(
            m["reason"].as_str().unwrap_or_default().starts_with(reason),
            "{name}: {m}"
        );
        assert_eq!(csv_steps(&run_dir.join("metrics.csv")), 2, "{name}");
        // The harness has exited: whatever it started is gone, or going (its TERM may still be
        // at work; the bound, no quiet machine's 5 s, only ends the wait for one that stays).
        let exited = std::time::Instant::now();
        while !(dead(trainer) && dead(worker)) {
            assert!(
                exited.elapsed() < std::time::Duration::from_secs(120),
                "{name}: trainer {trainer} or its worker {worker} outlived the harness"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// SIGTERM on the mock (no trainer): the finished steps and every report are written.
#[cfg(unix)]
#[test]
fn sigterm_keeps_the_finished_steps_and_writes_every_report() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = common::slow_scenario(tmp.path());
    let out = tmp.path().join("out");
    let mut child = rlharness()
        .arg("run")
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let latest = out.join("slow-mock/latest");
    wait_for(&mut child, "two steps", 120, || {
        (csv_steps(&latest.join("metrics.csv")) >= 2).then_some(())
    });
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let run_dir = std::fs::canonicalize(&latest).unwrap();
    for f in ["verdict.json", "report.md", "report.html", "junit.xml"] {
        assert!(run_dir.join(f).is_file(), "{f} missing: {}", text(&o));
    }
    let m = manifest(&run_dir);
    assert_eq!(m["status"], "interrupted", "{m}");
    assert!(csv_steps(&run_dir.join("metrics.csv")) >= 2);
}

/// `rlharness run ... 2>&1 | head -1`, `propagate ... 2>&1 | head -1`, `list | head -1`, and so
/// on: standard output, or both streams, closed before anything is read is not a panic (exit
/// 101, or a run killed with no verdict); each command exits with the status it has with both
/// streams open, and a run or matrix writes every file.
#[test]
fn closed_stdout_and_stderr_are_not_a_crash_for_any_command() {
    let tmp = tempfile::tempdir().unwrap();
    let run = smoke_run(&tmp.path().join("out"));
    let run = run.to_str().unwrap();
    let out = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let smoke = "scenarios/smoke/mock-gsm8k-grpo.yaml";
    let commands: Vec<Vec<String>> = [
        vec!["list", "scenarios"],
        vec!["check", "scenarios/smoke"],
        vec!["compare", run, "--format", "md"],
        vec!["compare", run, run],
        vec!["golden", "status", smoke],
        vec!["history", run, "--out", &out("history")],
        vec!["run", smoke, "--out", &out("run")],
        vec![
            "propagate",
            smoke,
            "--knobs",
            "remote_backend.training_gpus",
            "--out",
            &out("propagate"),
        ],
    ]
    .iter()
    .map(|a| a.iter().map(|s| s.to_string()).collect())
    .collect();
    let spawn = |args: &[String]| {
        rlharness()
            .args(args)
            .current_dir(repo())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for args in &commands {
        let open = spawn(args).wait_with_output().unwrap();
        // Standard output closed, standard error read.
        let mut child = spawn(args);
        drop(child.stdout.take());
        let err = common::take_stderr(&mut child);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), open.status.code(), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // Both closed.
        let mut child = spawn(args);
        drop(child.stdout.take());
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            open.status.code(),
            "{args:?} with both streams closed"
        );
    }
    // The last run with both streams closed wrote every file.
    let last = std::fs::canonicalize(tmp.path().join("run/mock-gsm8k-grpo/latest")).unwrap();
    for f in [
        "verdict.json",
        "run.json",
        "metrics.csv",
        "report.md",
        "report.html",
        "junit.xml",
    ] {
        assert!(last.join(f).is_file(), "{f} missing in {}", last.display());
    }
    for f in ["index.md", "index.html", "junit.xml"] {
        assert!(tmp.path().join("run").join(f).is_file(), "{f}");
    }
    let matrices: Vec<PathBuf> = std::fs::read_dir(tmp.path().join("propagate/mock-gsm8k-grpo"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    // (Three invocations in one second share a folder.)
    assert!(!matrices.is_empty());
    for m in matrices {
        for f in [
            "propagation.md",
            "propagation.json",
            "propagation.junit.xml",
        ] {
            assert!(m.join(f).is_file(), "{f} missing in {}", m.display());
        }
    }
}

/// A pseudo-terminal for a child's standard output: `(master, slave)` descriptors.
#[cfg(unix)]
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors this test then owns.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty failed");
    // SAFETY: fresh descriptors, owned once each.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    }
}

/// What `cmd` writes to its standard output when that is a terminal.
#[cfg(unix)]
fn stdout_on_a_terminal(mut cmd: Command) -> String {
    let (mut master, slave) = pty();
    let mut child = cmd
        .stdout(Stdio::from(slave))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Drop the parent's copy of the slave (moved into `cmd`), so reading ends at the exit.
    drop(cmd);
    let mut bytes = Vec::new();
    // A pty master reads EIO once the last slave is closed: that is the end.
    let _ = master.read_to_end(&mut bytes);
    child.wait().unwrap();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Colours on a terminal; none on a pipe, none with `NO_COLOR` or `--color never`; always with
/// `--color always`, even on a pipe (the flag wins, as in cargo).
#[cfg(unix)]
#[test]
fn colours_follow_the_terminal_no_color_and_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let run = smoke_run(&tmp.path().join("out"));
    let compare = |extra: &[&str], no_color: bool| {
        let mut c = rlharness();
        c.arg("compare").arg(&run).args(extra).current_dir(repo());
        if no_color {
            c.env("NO_COLOR", "1");
        }
        c
    };
    let esc = |s: &str| s.contains('\u{1b}');
    let piped = |c: Command| {
        let mut c = c;
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let plain = piped(compare(&[], false));
    says(&plain, &["mock-gsm8k-grpo: passed"]);
    assert!(!esc(&plain), "colour on a pipe: {plain:?}");
    assert!(esc(&piped(compare(&["--color", "always"], true))));
    let tty = stdout_on_a_terminal(compare(&[], false));
    assert!(esc(&tty), "no colour on a terminal: {tty:?}");
    let tty = stdout_on_a_terminal(compare(&[], true));
    assert!(!esc(&tty) && tty.contains("passed"), "NO_COLOR: {tty:?}");
    let tty = stdout_on_a_terminal(compare(&["--color", "never"], false));
    assert!(
        !esc(&tty) && tty.contains("passed"),
        "--color never: {tty:?}"
    );
}

/// `--no-progress` drops the bar, not the step lines (a CI log keeps them, as docs/scale-out.md
/// says); `-q` leaves the results alone: no step lines, no notes, a passing scenario's line
/// left out, the tally line kept; a failure is still printed.
#[test]
fn quiet_leaves_results_only_and_no_progress_keeps_step_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let smoke = "scenarios/smoke/mock-gsm8k-grpo.yaml";
    let loud = common::rlharness_run(&[smoke], &out).output().unwrap();
    assert_eq!(loud.status.code(), Some(0), "{}", text(&loud));
    let err = String::from_utf8_lossy(&loud.stderr);
    says(
        &err,
        &["mock-gsm8k-grpo: step 1/20", "mock-gsm8k-grpo: step 20/20"],
    );
    says(
        &String::from_utf8_lossy(&loud.stdout),
        &[
            "mock-gsm8k-grpo: passed",
            "combined: 1 scenario(s): 1 passed",
        ],
    );

    let quiet = common::rlharness_run(&[smoke, "-q", "--golden", "no-store"], &out)
        .output()
        .unwrap();
    // No golden in `no-store` (exit 4): the note saying so is left out, the result is not.
    assert_eq!(quiet.status.code(), Some(4), "{}", text(&quiet));
    assert_eq!(
        String::from_utf8_lossy(&quiet.stderr),
        "",
        "{}",
        text(&quiet)
    );
    let stdout = String::from_utf8_lossy(&quiet.stdout);
    says(
        &stdout,
        &["mock-gsm8k-grpo: no golden yet", "combined: 1 scenario(s)"],
    );

    let quiet = common::rlharness_run(&[smoke, "-q"], &out)
        .output()
        .unwrap();
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
    let stdout = String::from_utf8_lossy(&quiet.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    says(&stdout, &["combined: 1 scenario(s): 1 passed"]);
    // `-q` and `-v` contradict each other.
    let both = common::rlharness_run(&[smoke, "-q", "-v"], &out)
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
}

/// `propagate` shows each run as it finishes (stderr), then prints a summary, each new flag on
/// a line, the verdict with its exit code and where the reports are: not the whole matrix in
/// Markdown. `-q` leaves out the progress, not the result.
#[test]
fn propagate_shows_its_runs_then_a_summary_not_the_matrix() {
    let tmp = tempfile::tempdir().unwrap();
    let propagate = |extra: &[&str]| {
        let mut c = rlharness();
        c.current_dir(repo())
            .args(["propagate", "scenarios/smoke/mock-gsm8k-grpo.yaml"])
            .args(["--knobs", "remote_backend.train.logits", "--out"])
            .arg(tmp.path())
            .args(extra);
        c.output().unwrap()
    };
    let o = propagate(&["--set", "driver.plant=[logits_in_meta_only]"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let runs: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("propagate: run "))
        .collect();
    assert!(
        runs.first().is_some_and(|l| l.starts_with("propagate: run 1/") && l.contains("baseline: recorded")),
        "{err}"
    );
    let (done, total) = runs.last().unwrap()["propagate: run ".len()..]
        .split_once(' ')
        .unwrap()
        .0
        .split_once('/')
        .unwrap();
    assert_eq!(done, total, "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains('|') && out.lines().count() < 12, "{out}");
    says(
        &out,
        &[
            "mock-gsm8k-grpo: 4 knobs, ",
            "  FLAGGED remote_backend.train.logits.compute_in_fp32: ",
            "  FLAGGED remote_backend.train.logits.compute_from_fp32_inputs: ",
            "verdict: FAIL (exit 1)",
            "/propagation.html",
        ],
    );
    let quiet = propagate(&["-q"]);
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    assert_eq!(
        String::from_utf8_lossy(&quiet.stderr),
        "",
        "{}",
        text(&quiet)
    );
    says(
        &String::from_utf8_lossy(&quiet.stdout),
        &["verdict: pass (exit 0)"],
    );
}

/// The exit status is the one the combined index and JUnit give, for each outcome and under
/// `--fail-on-skip`, and the last stdout line tallies it.
#[test]
fn the_exit_status_is_what_the_index_and_junit_say() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = common::scenarios_root_in(tmp.path()).join("bad.yaml");
    std::fs::write(&bad, "name: bad\nsteps: many\n").unwrap();
    let bad = bad.to_str().unwrap();
    let cases: [(&[&str], i32); 6] = [
        (&["scenarios/smoke/mock-gsm8k-grpo.yaml"], 0),
        (&["scenarios/selftest/skipped"], 0),
        (&["scenarios/selftest/skipped", "--fail-on-skip"], 1),
        (
            &[
                "scenarios/smoke/mock-gsm8k-grpo.yaml",
                "--golden",
                "no-store",
            ],
            4,
        ),
        (&["scenarios/smoke/mock-gsm8k-grpo.yaml", bad], 2),
        (&["scenarios/selftest/mock-mfu-drop.yaml"], 0),
    ];
    for (i, (args, want)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("out{i}"));
        let o = common::rlharness_run(args, &out).output().unwrap();
        assert_eq!(o.status.code(), Some(*want), "{args:?}: {}", text(&o));
        let index = std::fs::read_to_string(out.join("index.md")).unwrap();
        assert!(
            index.starts_with(&format!("# rlharness run: exit {want} ")),
            "{args:?}: {index}"
        );
        let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
        let junit = quick_junit::Report::deserialize_from_str(&junit).unwrap();
        let red = junit.failures + junit.errors;
        assert_eq!(
            red == 0,
            *want == 0,
            "{args:?}: JUnit {red} red for exit {want}"
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        let last = stdout.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("combined: ") && last.contains(&format!("; exit {want} ")),
            "{args:?}: {stdout}"
        );
    }
}

/// A self-test that fails as it declares passes: its caught rules print as `✓ expected:`, not
/// as red `✗` failures, and the tally counts it as an expected failure.
#[test]
fn an_expected_failure_is_not_printed_as_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let o = common::rlharness_run(
        &["scenarios/selftest/mock-mfu-drop.yaml"],
        &tmp.path().join("out"),
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    says(
        &stdout,
        &[
            "expected failure",
            "✓ expected: ",
            "(1 as an expected failure)",
        ],
    );
    assert!(!stdout.contains('✗'), "{stdout}");
}
