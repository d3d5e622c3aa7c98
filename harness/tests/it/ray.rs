//! `rlharness run --executor ray` (and `golden calibrate`, `propagate` and `bisect` with
//! `--executor ray`) against a real Ray head. These tests are ignored in a plain
//! `cargo test`; `bash ci/ray-tests.sh` starts a local head with token authentication on, sets
//! RLHARNESS_RAY_ADDRESS and RLHARNESS_RAY_TOKEN_FILE (the head's own token) and runs them with
//! `--ignored`. Without those they fail (never pass silently). The runs they start never see the
//! user's own Ray settings (RAY_AUTH_*, RAY_ADDRESS).

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{rlharness_run as rlharness, says, text};

fn address() -> String {
    std::env::var("RLHARNESS_RAY_ADDRESS")
        .ok()
        .filter(|a| !a.is_empty())
        .expect(
            "RLHARNESS_RAY_ADDRESS is not set: the Ray tests need a Ray head's jobs API; run them \
             through `bash ci/ray-tests.sh`, which starts one",
        )
}

/// The test head's token file.
fn token_file() -> PathBuf {
    std::env::var_os("RLHARNESS_RAY_TOKEN_FILE")
        .filter(|a| !a.is_empty())
        .map(PathBuf::from)
        .expect(
            "RLHARNESS_RAY_TOKEN_FILE is not set: the test head has token authentication on; run \
             the Ray tests through `bash ci/ray-tests.sh`",
        )
}

/// The test head's token (to check it is printed nowhere).
fn token() -> String {
    std::fs::read_to_string(token_file())
        .unwrap()
        .trim()
        .to_string()
}

/// `rlharness run ARGS --executor ray --address HEAD`, with none of the user's Ray settings and
/// no token.
fn ray_run(args: &[&str], out: &Path) -> std::process::Command {
    let addr = address();
    let mut all = args.to_vec();
    all.extend(["--executor", "ray", "--address", addr.as_str()]);
    let mut c = rlharness(&all, out);
    without_user_ray_settings(&mut c);
    c
}

/// Keep the user's own Ray settings away from a command the tests start.
fn without_user_ray_settings(c: &mut std::process::Command) {
    for k in [
        "RAY_AUTH_TOKEN",
        "RAY_AUTH_TOKEN_PATH",
        "RAY_AUTH_MODE",
        "RAY_ADDRESS",
    ] {
        c.env_remove(k);
    }
}

/// `rlharness run ARGS` on the test head, with its token (`--ray-token-file`).
fn on_ray(args: &[&str], out: &Path) -> Output {
    let file = token_file();
    ray_run(args, out)
        .arg("--ray-token-file")
        .arg(&file)
        .output()
        .unwrap()
}

/// No file under `dir` holds `secret`.
fn nowhere_under(dir: &Path, secret: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            nowhere_under(&p, secret);
        } else if let Ok(bytes) = std::fs::read(&p) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(secret), "{} shows the token", p.display());
        }
    }
}

fn latest(out: &Path, scenario: &str) -> PathBuf {
    let base = out.join(scenario);
    std::fs::canonicalize(base.join("latest")).unwrap_or_else(|e| {
        panic!("{}: no latest run: {e}", base.display());
    })
}

#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn smoke_and_faults_come_back_with_the_metrics_of_a_local_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (here, there) = (tmp.path().join("local"), tmp.path().join("ray"));
    let scenarios = ["scenarios/smoke", "scenarios/faults"];
    let mut local_args = scenarios.to_vec();
    local_args.extend(["--jobs", "2"]);
    let l = rlharness(&local_args, &here).output().unwrap();
    assert_eq!(l.status.code(), Some(0), "{}", text(&l));
    let r = on_ray(&scenarios, &there);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let junit = std::fs::read_to_string(there.join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), 12, "{junit}");
    let mut compared = 0;
    for s in std::fs::read_dir(&here).unwrap().flatten() {
        if !s.path().is_dir() {
            continue;
        }
        let name = s.file_name().to_string_lossy().into_owned();
        let a = std::fs::read(latest(&here, &name).join("metrics.csv")).unwrap();
        let run = latest(&there, &name);
        let b = std::fs::read(run.join("metrics.csv")).unwrap();
        assert!(
            a == b,
            "{name}: metrics.csv differs between the local and the Ray run"
        );
        assert!(run.join("job.log").is_file(), "{name}: no job.log");
        assert!(run.join("report.md").is_file(), "{name}: no report");
        compared += 1;
    }
    assert_eq!(compared, 12);
    let index = std::fs::read_to_string(there.join("index.md")).unwrap();
    assert_eq!(index.matches("ray job raysubmit_").count(), 12, "{index}");
    let secret = token();
    assert!(!text(&r).contains(&secret), "the output shows the token");
    nowhere_under(&there, &secret);
    println!("{index}");
}

/// A head with token authentication on: no token, or a wrong one, is exit 2 at once, with what
/// to do, never a hang, and the token sent is shown nowhere.
#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn a_missing_or_wrong_token_is_exit_2_at_once_and_never_shown() {
    let tmp = tempfile::tempdir().unwrap();
    // No token anywhere: not in the environment, and a home without ~/.ray/auth_token.
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let started = Instant::now();
    let o = ray_run(&["scenarios/smoke"], &tmp.path().join("none"))
        .env("HOME", &home)
        .env("RAY_AUTH_MODE", "token")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(
        &text(&o),
        &["401 Unauthorized", "--ray-token-file", "RAY_AUTH_TOKEN"],
    );
    // A wrong one, through RAY_AUTH_TOKEN.
    let wrong = format!("wrong-{}", std::process::id());
    let out = tmp.path().join("wrong");
    let o = ray_run(&["scenarios/smoke"], &out)
        .env("RAY_AUTH_TOKEN", &wrong)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    says(
        &t,
        &[
            "refused the token from RAY_AUTH_TOKEN",
            "not this cluster's token",
        ],
    );
    assert!(!t.contains(&wrong), "the output shows the token:\n{t}");
    nowhere_under(&out, &wrong);
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn a_job_stopped_through_the_api_is_exit_3_with_its_finished_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ray");
    let log = tmp.path().join("stderr.log");
    let addr = address();
    // The token through Ray's own variable, this time.
    let mut child = ray_run(
        &[
            "scenarios/smoke",
            "--steps",
            "60",
            "--set",
            "backend.faults=[{fault: latency, seconds: 0.3, probability: 1.0, at: {route: /generate}}]",
        ],
        &out,
    )
    .env("RAY_AUTH_TOKEN", token())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    // Wait for step 3 in the submitter's progress lines, then stop the job through the API.
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = loop {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        let stepped = t.lines().any(|l| {
            l.split_once(": step ")
                .and_then(|(_, r)| r.split('/').next()?.parse::<u64>().ok())
                .is_some_and(|k| k >= 3)
        });
        if stepped {
            let id = t
                .split_whitespace()
                .find(|w| w.starts_with("raysubmit_"))
                .unwrap()
                .trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .to_string();
            break id;
        }
        assert!(Instant::now() < deadline, "no step 3 within 120 s:\n{t}");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended early:\n{t}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let token =
        rlharness::app::scale::ray_auth::RayToken::from_file(&token_file(), "test").unwrap();
    let client = rlharness::app::scale::ray::RayClient::new(&addr)
        .unwrap()
        .with_token(Some(token));
    rt.block_on(async {
        // The job's supervisor takes the request once it is registered.
        for _ in 0..50 {
            if client.stop(&id).await.unwrap() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("Ray did not take the stop request for {id}");
    });
    let status = child.wait().unwrap();
    let t = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(3), "{t}");
    let run = latest(&out, "mock-gsm8k-grpo");
    let rows = std::fs::read_to_string(run.join("metrics.csv"))
        .unwrap()
        .lines()
        .count()
        - 1;
    assert!((3..60).contains(&rows), "{rows} finished steps kept");
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(verdict["run"]["status"], "interrupted", "{verdict}");
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(index.contains("was stopped (STOPPED"), "{index}");
}

#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn a_gpu_the_cluster_lacks_is_reported_unschedulable_not_hung() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ray");
    let started = Instant::now();
    let o = on_ray(
        &[
            "scenarios/smoke",
            "--set",
            "requires.gpus=1",
            "--set",
            "timeouts.queue=3s",
        ],
        &out,
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(started.elapsed() < Duration::from_secs(60));
    let t = text(&o);
    assert!(
        t.contains("unschedulable: not scheduled within timeouts.queue = 3s"),
        "{t}"
    );
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    says(&junit, &["unschedulable", "<error "]);
}

#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn a_job_that_cannot_start_is_exit_3_with_its_log_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ray");
    let o = on_ray(
        &["scenarios/smoke", "--remote-bin", "/nonexistent/rlharness"],
        &out,
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let t = text(&o);
    says(&t, &["did not come back", "holds no run-directory frame"]);
    let kept: Vec<PathBuf> = std::fs::read_dir(out.join("mock-gsm8k-grpo"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("job.log"))
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(kept.len(), 1, "{t}");
}

/// The CPU flagship (torch backend, `rlharness-torch` shipped with the job), 3 steps: the same
/// metrics as a local run, bit for bit.
#[cfg(feature = "torch")]
#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn the_cpu_flagship_through_ray_has_the_metrics_of_a_local_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (here, there) = (tmp.path().join("local"), tmp.path().join("ray"));
    let args = [
        "scenarios/tiny-gsm8k-grpo.yaml",
        "--steps",
        "3",
        "--set",
        "checks.expect=[]",
        "--set",
        "checks.golden={critic/rewards/mean: {abs: 0.15}}",
    ];
    let l = rlharness(&args, &here).output().unwrap();
    // The local run completed and was judged (a 3-step run may pass or fail its bands).
    assert!(
        matches!(l.status.code(), Some(0 | 1)),
        "the local flagship did not complete: {}",
        text(&l)
    );
    let r = on_ray(&args, &there);
    assert_eq!(
        l.status.code(),
        r.status.code(),
        "{}\n{}",
        text(&l),
        text(&r)
    );
    let a = std::fs::read(latest(&here, "tiny-gsm8k-grpo").join("metrics.csv")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&a).lines().count(),
        4,
        "a header and 3 steps"
    );
    let run = latest(&there, "tiny-gsm8k-grpo");
    let b = std::fs::read(run.join("metrics.csv")).unwrap();
    // The torch backend's numbers are deterministic; its wall-clock columns (timing_s/*,
    // perf/* made from them) are measured, and its rounding-gap series vary in their last
    // bits, so they are left out of the comparison.
    let (a, b) = (computed_columns(&a), computed_columns(&b));
    assert!(a.len() > 10, "{a:?}");
    assert!(
        a == b,
        "the flagship's computed metrics differ between local and Ray:\n{a:?}\n{b:?}"
    );
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(verdict["run"]["status"], "completed", "{verdict}");
    assert_eq!(verdict["run"]["steps_recorded"], 3, "{verdict}");
}

/// The columns of a metrics.csv that are computed, not measured: (column, values) bit for bit.
#[cfg(feature = "torch")]
fn computed_columns(csv: &[u8]) -> Vec<(String, Vec<String>)> {
    let text = String::from_utf8_lossy(csv);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    rows[0]
        .iter()
        .enumerate()
        .filter(|(_, h)| {
            !h.starts_with("timing_s/")
                && !h.starts_with("perf/")
                // The sampler-vs-trainer rounding gap (about 1e-7): its last bits vary from
                // run to run on some CPUs, as the exact lane knows.
                && !h.starts_with("training/rollout_probs_diff")
                && !h.starts_with("rollout_corr/")
        })
        .map(|(c, h)| {
            let values = rows[1..].iter().map(|r| r[c].to_string()).collect();
            (h.to_string(), values)
        })
        .collect()
}

/// `golden calibrate --executor ray`: each seed one Ray job, its run directory brought back and
/// judged here; the calibration is the one a local `golden calibrate` of the same seeds makes
/// (the mock is deterministic for a seed: every statistic equal, bit for bit).
#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn golden_calibrate_over_ray_is_the_local_calibration() {
    let tmp = tempfile::tempdir().unwrap();
    let calibrate = |name: &str, extra: &[&str]| -> serde_json::Value {
        let golden = tmp.path().join(name).join("golden");
        crate::common::copy_dir(
            &crate::common::repo().join("golden/mock-gsm8k-grpo"),
            &golden.join("mock-gsm8k-grpo"),
        );
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
        c.current_dir(crate::common::repo())
            .arg("golden")
            .arg("--golden")
            .arg(&golden)
            .args([
                "calibrate",
                "scenarios/smoke/mock-gsm8k-grpo.yaml",
                "--seeds",
                "3..5",
                // The calibration is thrown away: the tree it runs from may be mid-edit.
                "--allow-dirty",
                // Other seeds than the golden's: rules that depend on the calibration only.
                "--set",
                "checks.golden={critic/rewards/mean: {window: 5, calibrated: {}}}",
                "--set",
                "checks.expect=[]",
            ])
            .arg("--out")
            .arg(tmp.path().join(name).join("runs"))
            .args(extra)
            .env_remove("CI")
            .env("RUST_LOG", "error");
        without_user_ray_settings(&mut c);
        let o = c.output().unwrap();
        assert!(o.status.success(), "{name}: {}", text(&o));
        let path = golden.join("mock-gsm8k-grpo/cpu/calibration.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let here = calibrate("local", &[]);
    let addr = address();
    let token = token_file();
    let there = calibrate(
        "ray",
        &[
            "--executor",
            "ray",
            "--address",
            &addr,
            "--ray-token-file",
            token.to_str().unwrap(),
        ],
    );
    assert_eq!(there["seeds"], serde_json::json!([3, 4, 5]), "{there}");
    for key in ["runs", "seeds", "steps", "windows"] {
        assert_eq!(here[key], there[key], "{key} differs between local and Ray");
    }
    // The runs came back under the calibration's out folder, one per seed.
    let runs = std::fs::read_dir(tmp.path().join("ray/runs/mock-gsm8k-grpo"))
        .unwrap()
        .flatten()
        .filter(|e| !e.path().is_symlink() && e.path().join("run.json").is_file())
        .count();
    assert_eq!(runs, 3, "one run directory per seed (and `latest`)");
}

/// `rlharness ARGS` from the repository root on the test head (its token through
/// `--ray-token-file`), with none of the user's Ray settings; `CI=true`, errors only in the log.
fn on_ray_cmd(args: &[&str]) -> Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
    c.current_dir(crate::common::repo())
        .args(args)
        .args(["--executor", "ray", "--address", &address()])
        .arg("--ray-token-file")
        .arg(token_file())
        .env("CI", "true")
        .env("RUST_LOG", "error");
    without_user_ray_settings(&mut c);
    c.output().unwrap()
}

/// The matrix under `out` (`propagation.json`) and its folder.
fn matrix(out: &Path) -> (serde_json::Value, PathBuf) {
    let dir = std::fs::read_dir(out.join("mock-gsm8k-grpo"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("propagation.json").is_file())
        .unwrap_or_else(|| panic!("no propagation.json under {}", out.display()));
    let text = std::fs::read_to_string(dir.join("propagation.json")).unwrap();
    (serde_json::from_str(&text).unwrap(), dir)
}

/// What a matrix found: its runs, splits and reach, and each knob's path, verdict, flag,
/// known gap and cells' verdicts (observed or not, and how).
fn findings(r: &serde_json::Value) -> serde_json::Value {
    let knobs: Vec<serde_json::Value> = r["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let cells: Vec<serde_json::Value> = k["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| serde_json::json!([c["value"], c["condition"], c["verdict"]]))
                .collect();
            serde_json::json!({
                "path": k["path"], "verdict": k["verdict"], "flagged": k["flagged"],
                "known_gap": k["known_gap"], "cells": cells,
            })
        })
        .collect();
    serde_json::json!({
        "runs": r["runs"], "splits": r["splits"], "until": r["until"], "knobs": knobs,
        "closed_gaps": r["closed_gaps"].as_array().map(Vec::len),
    })
}

/// `propagate --executor ray`: each trial run one Ray job (`--until auto`: some stopped at the
/// jobs' initialization through the job's `--stop-at`, some after one step), its run directory
/// brought back into the matrix's folder and judged here: the same verdict for every knob as
/// the local matrix, the planted bug flagged by both, and the same exit status.
#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn propagate_over_ray_flags_what_the_local_matrix_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let (here, there) = (tmp.path().join("local"), tmp.path().join("ray"));
    let args = |out: &Path| -> Vec<String> {
        [
            "propagate",
            "scenarios/smoke/mock-gsm8k-grpo.yaml",
            "--set",
            "driver.plant=[logits_in_meta_only]",
            "--knobs",
            "remote_backend.train.logits",
            "--knobs",
            "actor_rollout_ref.actor.clip_ratio",
            "--until",
            "auto",
            "--no-progress",
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([out.display().to_string()])
        .collect()
    };
    let l = crate::common::rlharness_in(
        &crate::common::repo(),
        &args(&here).iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(l.status.code(), Some(1), "{}", text(&l));
    let started = Instant::now();
    let r = on_ray_cmd(&args(&there).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    println!(
        "propagate over Ray: {:.1} s\n{}",
        started.elapsed().as_secs_f64(),
        text(&r)
    );
    let ((a, _), (b, dir)) = (matrix(&here), matrix(&there));
    let (a, b) = (findings(&a), findings(&b));
    assert_eq!(
        a, b,
        "the Ray matrix's findings differ from the local one's"
    );
    let flagged: Vec<&str> = b["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["flagged"] == true && k["known_gap"].is_null())
        .map(|k| k["path"].as_str().unwrap())
        .collect();
    assert!(
        flagged.contains(&"remote_backend.train.logits.optimization"),
        "the planted bug is not flagged: {b}"
    );
    // Some trials stopped at the jobs' initialization (the job's `--stop-at initialize`).
    let until = b["until"].as_str().unwrap();
    assert!(!until.contains("(0 of"), "{until}");
    // The trials' run directories came back into the matrix's folder, one per run.
    let runs = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("run.json").is_file() && e.path().join("job.log").is_file())
        .count();
    assert_eq!(Some(runs as u64), b["runs"].as_u64(), "{}", dir.display());
    assert!(!dir.join("ray").exists(), "the collection folder is left");
    // Without --address (and no RAY_ADDRESS): exit 2, naming the flag, before anything runs.
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
    c.current_dir(crate::common::repo()).args([
        "propagate",
        "scenarios/smoke/mock-gsm8k-grpo.yaml",
        "--executor",
        "ray",
    ]);
    without_user_ray_settings(&mut c);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(&text(&o), &["--address"]);
}

/// `bisect --executor ray`: each seed of a commit one Ray job, the commit's worktree shipped in
/// its package and STANDIN_SRC pointed at its place in the job's folder; the same commits
/// tested, the same seeds' values and the same first bad commit as the local bisect, and each
/// run records the commit it ran.
#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn bisect_over_ray_finds_the_commit_the_local_bisect_finds() {
    use crate::bisect::{bisect_json, rlharness, standin_and_its_regression, STANDIN};
    let tmp = tempfile::tempdir().unwrap();
    let (golden, trainer, commits) = standin_and_its_regression(tmp.path());
    let args = |name: &str| -> Vec<String> {
        let dir = tmp.path().join(name);
        [
            "bisect",
            STANDIN,
            "--repo",
            trainer.to_str().unwrap(),
            "--good",
            &commits[0],
            "--bad",
            &commits[8],
            "--golden",
            &golden,
            "--jobs",
            "2",
            "--out",
            dir.join("out").to_str().unwrap(),
            "--cache",
            dir.join("cache").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let l = rlharness(
        &args("local").iter().map(String::as_str).collect::<Vec<_>>(),
        true,
    );
    assert_eq!(l.status.code(), Some(0), "{}", text(&l));
    let started = Instant::now();
    let r = on_ray_cmd(&args("ray").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    println!(
        "bisect over Ray: {:.1} s\n{}",
        started.elapsed().as_secs_f64(),
        text(&r)
    );
    let (a, b) = (
        bisect_json(&tmp.path().join("local/out")),
        bisect_json(&tmp.path().join("ray/out")),
    );
    assert_eq!(b["first_bad"]["sha"], commits[5].as_str(), "{}", text(&r));
    assert_eq!(a["first_bad"], b["first_bad"]);
    let tested = |j: &serde_json::Value| -> Vec<serde_json::Value> {
        j["tested"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| serde_json::json!([t["commit"]["sha"], t["verdict"], t["trials"]]))
            .collect()
    };
    assert_eq!(tested(&a), tested(&b), "the commits' seeds differ");
    // Each run came back with the commit it ran (its copy has no repository).
    let runs = tmp.path().join("ray/out/runs").join(&commits[5][..9]);
    let run = std::fs::read_dir(runs.join("bisect-standin"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| !p.is_symlink() && p.join("run.json").is_file())
        .unwrap();
    let m = crate::common::manifest(&run);
    let described = m["trainer_sources"]["STANDIN_SRC"].as_str().unwrap();
    assert!(commits[5].starts_with(described), "{m}");
    assert!(run.join("job.log").is_file());
}

/// `bisect --propagate --executor ray`: each trial of a commit's matrix one Ray job, the
/// commit's worktree (here the verl + Arctic stand-in with its codec and config layers, one
/// commit of which switches its logits bug on) shipped in the package and started through a
/// launcher script beside the scenario (its executable bit restored in the job); the same
/// commits found bad and good, with the same flags, as the local bisect.
#[test]
#[ignore = "needs a Ray head: bash ci/ray-tests.sh"]
fn bisect_propagate_over_ray_finds_the_commit_the_local_bisect_finds() {
    use crate::bisect::{bisect_json, rlharness, throwaway_repo};
    use crate::common::repo;
    let tmp = tempfile::tempdir().unwrap();
    let root = crate::common::scenarios_root_in(tmp.path());
    let tree = tmp.path().join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    for (from, to) in [
        (
            "harness/tests/fixtures/verl/fake_arctic_verl.py",
            "fake_arctic_verl.py",
        ),
        ("harness/tests/conformance/dssst1.py", "dssst1.py"),
        ("scenarios/defaults/verl.yaml", "verl.yaml"),
        ("scenarios/backends/arctic.yaml", "arctic.yaml"),
    ] {
        std::fs::copy(repo().join(from), tree.join(to)).unwrap();
    }
    let trainer = tmp.path().join("trainer");
    let commits = throwaway_repo(&trainer, &tree, 4, 2, "drop the logits settings", |d| {
        let path = d.join("fake_arctic_verl.py");
        let src = std::fs::read_to_string(&path).unwrap();
        let (was, bug) = (
            r#"os.environ.get("ARCTIC_STANDIN_BUGS", "")"#,
            r#"os.environ.get("ARCTIC_STANDIN_BUGS", "zorro-logits-dropped")"#,
        );
        assert!(src.contains(was));
        std::fs::write(&path, src.replace(was, bug)).unwrap();
    });
    // The stand-in's scenario, its trainer started from the checkout ARCTIC_SRC names.
    let standin =
        std::fs::read_to_string(repo().join("scenarios/propagate/verl-arctic-standin.yaml"))
            .unwrap();
    let at = standin.find("  command:\n").unwrap();
    let end = at + standin[at..].find("  metrics_from").unwrap();
    let scenario = root.join("bisect-propagate.yaml");
    std::fs::write(
        &scenario,
        format!(
            "{}  command: [./launch.sh]\n  sources: [ARCTIC_SRC]\n{}",
            &standin[..at],
            &standin[end..]
        ),
    )
    .unwrap();
    let launch = root.join("launch.sh");
    std::fs::write(
        &launch,
        format!(
            "#!/bin/sh\nexport PYTHONPATH={}\nsrc=${{ARCTIC_SRC:?}}\nexec python3 \"$src/fake_arctic_verl.py\" \
             --defaults \"$src/verl.yaml\" --backend \"$src/arctic.yaml\" \"$@\"\n",
            repo().join(".pydeps").display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&launch, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let args = |name: &str| -> Vec<String> {
        let dir = tmp.path().join(name);
        [
            "bisect",
            scenario.to_str().unwrap(),
            "--repo",
            trainer.to_str().unwrap(),
            "--good",
            &commits[0],
            "--bad",
            &commits[4],
            "--propagate",
            "--knobs",
            "remote_backend.train.logits.optimization",
            "--out",
            dir.join("out").to_str().unwrap(),
            "--cache",
            dir.join("cache").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let l = rlharness(
        &args("local").iter().map(String::as_str).collect::<Vec<_>>(),
        true,
    );
    assert_eq!(l.status.code(), Some(0), "{}", text(&l));
    let started = Instant::now();
    let r = on_ray_cmd(&args("ray").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    println!(
        "bisect --propagate over Ray: {:.1} s\n{}",
        started.elapsed().as_secs_f64(),
        text(&r)
    );
    let (a, b) = (
        bisect_json(&tmp.path().join("local/out")),
        bisect_json(&tmp.path().join("ray/out")),
    );
    assert_eq!(b["first_bad"]["sha"], commits[2].as_str(), "{}", text(&r));
    let tested = |j: &serde_json::Value| -> Vec<serde_json::Value> {
        j["tested"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let trial = &t["trials"][0];
                serde_json::json!([
                    t["commit"]["sha"],
                    t["verdict"],
                    trial["value"],
                    trial["runs"]
                ])
            })
            .collect()
    };
    assert_eq!(tested(&a), tested(&b), "the commits' matrices differ");
}
