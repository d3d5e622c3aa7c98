//! `propagate` and `bisect` with `--executor ray` against the test head: the same matrix and
//! the same first bad commit as the local commands.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

use super::{address, token_file, without_user_ray_settings};
use crate::common::{says, text};

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
    use crate::bisect::{standin_and_its_regression, STANDIN};
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
    let (a, b, r) = here_and_on_ray(tmp.path(), args, "bisect");
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
    use crate::bisect::throwaway_repo;
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
    // Its `python_path` is relative to the scenario file: here, the project's, absolute.
    let standin = standin.replace(
        "python_path: [../../.pydeps]",
        &format!("python_path: [{}]", repo().join(".pydeps").display()),
    );
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
    let (a, b, r) = here_and_on_ray(tmp.path(), args, "bisect --propagate");
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

/// The bisect `args(name)` makes (its folder `name`), run here as `local` and over Ray as
/// `ray`, both exit 0: their `bisect.json`s, local first, and the Ray run's output.
fn here_and_on_ray(
    tmp: &Path,
    args: impl Fn(&str) -> Vec<String>,
    what: &str,
) -> (serde_json::Value, serde_json::Value, Output) {
    use crate::bisect::{bisect_json, rlharness};
    let l = rlharness(
        &args("local").iter().map(String::as_str).collect::<Vec<_>>(),
        true,
    );
    assert_eq!(l.status.code(), Some(0), "{}", text(&l));
    let started = Instant::now();
    let r = on_ray_cmd(&args("ray").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    println!(
        "{what} over Ray: {:.1} s\n{}",
        started.elapsed().as_secs_f64(),
        text(&r)
    );
    (
        bisect_json(&tmp.join("local/out")),
        bisect_json(&tmp.join("ray/out")),
        r,
    )
}
