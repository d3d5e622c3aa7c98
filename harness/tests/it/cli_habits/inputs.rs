//! Inputs and outputs a CI user relies on: `check` refuses what `run` refuses, a `check` or
//! `list` of nothing is an error, another working directory finds the goldens, files follow the
//! umask, `record` never writes under CI, `compare` of two runs, GitHub annotations.

use super::*;

/// A table of bad scenarios, each refused as invalid input (exit 2) by `check` and by `run`
/// alike, both naming the file and the line.
#[test]
fn check_refuses_everything_run_refuses_as_invalid_input() {
    let tmp = tempfile::tempdir().unwrap();
    let root = common::scenarios_root_in(tmp.path());
    let smoke =
        std::fs::read_to_string(repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let edit = |from: &str, to: &str| {
        assert!(smoke.contains(from), "the smoke scenario has no `{from}`");
        smoke.replacen(from, to, 1)
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "unknown-key",
            format!("{smoke}\nfrobnicate: 1\n"),
            "frobnicate",
        ),
        ("wrong-type", edit("steps: 20", "steps: twenty"), "steps"),
        ("bad-lr", edit("lr: 1.0e-6", "lr: fast"), "optim.lr"),
        (
            "bad-duration",
            edit("step: 30s", "step: 5 parsecs"),
            "timeouts.step",
        ),
        (
            "bad-backend",
            edit("kind: mock", "kind: mystery"),
            "backend",
        ),
        (
            "bad-expression",
            edit(
                "    - max(perf/mfu/actor) <= 1",
                "    - max(perf/mfu/actor <= 1",
            ),
            "expect",
        ),
        (
            "bad-band",
            edit("{rel: 0.1, direction: lower_is_better}", "{rel: -0.1}"),
            "timing_s/step",
        ),
        // An unknown preset used to leave MFU out of the run without a word.
        (
            "bad-model-preset",
            edit("  model: qwen3-0.6b", "  model: tiny"),
            "metrics.model",
        ),
    ];
    for (name, body, key) in &cases {
        let file = root.join(format!("{name}.yaml"));
        std::fs::write(&file, body).unwrap();
        let rel = format!("scenarios/{name}.yaml");
        for cmd in [
            vec!["check", rel.as_str()],
            vec!["run", rel.as_str(), "--no-progress"],
        ] {
            let o = rlharness()
                .args(&cmd)
                .current_dir(tmp.path())
                .output()
                .unwrap();
            let t = text(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd:?}: {t}");
            assert!(
                t.contains(&format!("{rel}:")) && t.contains(key),
                "{cmd:?}: {t}"
            );
        }
    }
}

/// `check` or `list` of a missing path or of a folder without scenarios is an input error
/// (exit 2), as `run` of nothing is: a mistyped path must not pass a CI step.
#[test]
fn check_and_list_of_nothing_are_input_errors() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("empty")).unwrap();
    for args in [
        ["check", "empty"],
        ["check", "missing"],
        ["list", "empty"],
        ["list", "missing"],
    ] {
        let o = rlharness()
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        says(&text(&o), &[args[1]]);
    }
}

/// From another working directory (a CI step in a subfolder, a script in /tmp): `run` and
/// `compare RUN` find the golden store beside the scenario's `scenarios/` folder, and make no
/// `./golden/`.
#[test]
fn commands_from_another_directory_find_the_scenarios_golden() {
    let elsewhere = tempfile::tempdir().unwrap();
    let scenario =
        std::fs::canonicalize(repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let out = elsewhere.path().join("out");
    let ran = rlharness()
        .arg("run")
        .arg(&scenario)
        .args(["--no-progress", "--out"])
        .arg(&out)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let run = std::fs::canonicalize(out.join("mock-gsm8k-grpo/latest")).unwrap();
    let compared = rlharness()
        .arg("compare")
        .arg(&run)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(compared.status.code(), Some(0), "{}", text(&compared));
    says(&text(&compared), &["mock-gsm8k-grpo: passed"]);
    assert!(!elsewhere.path().join("golden").exists());

    // A run started in its project with a relative path (`run.json` records
    // `scenarios/smoke/...`), compared from somewhere else: the project is found above the
    // run folder.
    let project = tempfile::tempdir().unwrap();
    let root = common::scenarios_root_in(project.path());
    std::fs::create_dir_all(root.join("smoke")).unwrap();
    std::fs::copy(&scenario, root.join("smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let golden = project.path().join("golden/mock-gsm8k-grpo/cpu");
    std::fs::create_dir_all(&golden).unwrap();
    for f in ["metrics.csv", "golden.yaml"] {
        std::fs::copy(
            repo().join("golden/mock-gsm8k-grpo/cpu").join(f),
            golden.join(f),
        )
        .unwrap();
    }
    let ran = rlharness()
        .args([
            "run",
            "scenarios/smoke/mock-gsm8k-grpo.yaml",
            "--no-progress",
        ])
        .current_dir(project.path())
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let compared = rlharness()
        .arg("compare")
        .arg(project.path().join("reports/mock-gsm8k-grpo/latest"))
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(compared.status.code(), Some(0), "{}", text(&compared));
    says(&text(&compared), &["mock-gsm8k-grpo: passed"]);
}

/// Reports and pending goldens get the mode the umask gives (0644 under umask 022), not a temp
/// file's private 0600: a CI artifact or a shared folder is read by others.
#[cfg(unix)]
#[test]
fn written_files_follow_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let store = tmp.path().join("golden");
    std::fs::create_dir(&store).unwrap();
    // Not under CI: a run without a golden writes a pending one.
    let o = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_rlharness"))
        .args([
            "run",
            "scenarios/smoke/mock-gsm8k-grpo.yaml",
            "--no-progress",
            "--out",
        ])
        .arg(&out)
        .arg("--golden")
        .arg(&store)
        .current_dir(repo())
        .env_remove("CI")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let run = std::fs::canonicalize(out.join("mock-gsm8k-grpo/latest")).unwrap();
    let mut files: Vec<PathBuf> = [
        "run.json",
        "metrics.csv",
        "verdict.json",
        "report.md",
        "junit.xml",
    ]
    .iter()
    .map(|f| run.join(f))
    .collect();
    files.push(out.join("index.md"));
    let pending = store.join("mock-gsm8k-grpo/cpu");
    files.extend(
        std::fs::read_dir(&pending)
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    for f in files {
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{}: {mode:o}", f.display());
    }
}

/// `record` under `CI=true` is refused (CI never writes the golden store), and a cassette the
/// store holds is replaced only with `--force`.
#[test]
fn record_never_writes_under_ci_and_never_replaces_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("golden");
    let record = |ci: bool, extra: &[&str]| -> Output {
        let mut c = rlharness();
        c.args([
            "record",
            "scenarios/smoke/mock-gsm8k-grpo.yaml",
            "--steps",
            "1",
            "--no-progress",
        ])
        .arg("--golden")
        .arg(&store)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .args(extra)
        .current_dir(repo());
        if !ci {
            c.env_remove("CI");
        }
        c.output().unwrap()
    };
    let o = record(true, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(&text(&o), &["refusing to record under CI=true"]);
    assert!(!store.exists());
    let o = record(false, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let again = record(false, &[]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    says(&text(&again), &["already holds a cassette: pass --force"]);
    let forced = record(false, &["--force"]);
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced));
    says(&text(&forced), &["replacing the cassette there"]);
}

/// `compare RUN1 RUN2` judges a calibrated rule with the scenario's calibration (found from the
/// scenario, as `run` finds it), not as "missing: run golden calibrate"; two runs of different
/// scenarios are refused as input, naming both.
#[test]
fn compare_of_two_runs_keeps_calibrated_bands_and_refuses_two_scenarios() {
    let tmp = tempfile::tempdir().unwrap();
    let root = common::scenarios_root_in(tmp.path());
    let smoke =
        std::fs::read_to_string(repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let from = "critic/rewards/mean: {window: 5, abs: 0.05}";
    assert!(smoke.contains(from));
    let body = smoke
        .replace("name: mock-gsm8k-grpo", "name: mock-calibrated")
        .replace(
            from,
            "critic/rewards/mean: {window: 5, calibrated: {k: 4, floor: 0.03}}",
        )
        .replace("steps: 20\n", "steps: 10\n")
        .replace("total_training_steps: 20", "total_training_steps: 10");
    std::fs::write(root.join("calibrated.yaml"), body).unwrap();
    let rlh = |args: &[&str], ci: bool| {
        let mut c = rlharness();
        c.args(args).current_dir(tmp.path());
        if !ci {
            c.env_remove("CI");
        }
        c.output().unwrap()
    };
    let cal = rlh(
        &[
            "golden",
            "calibrate",
            "scenarios/calibrated.yaml",
            "--runs",
            "2",
            "--out",
            "cal",
        ],
        false,
    );
    assert_eq!(cal.status.code(), Some(0), "{}", text(&cal));
    let mut runs = Vec::new();
    for out in ["a", "b"] {
        let o = rlh(
            &[
                "run",
                "scenarios/calibrated.yaml",
                "--no-progress",
                "--out",
                out,
            ],
            true,
        );
        // No golden series yet (exit 4); the calibration is there.
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        runs.push(
            std::fs::canonicalize(tmp.path().join(out).join("mock-calibrated/latest")).unwrap(),
        );
    }
    let (a, b) = (runs[0].to_str().unwrap(), runs[1].to_str().unwrap());
    let o = rlh(&["compare", a, b], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains("missing"), "{}", text(&o));

    let other = smoke_run(&tmp.path().join("smoke"));
    let o = rlh(&["compare", a, other.to_str().unwrap()], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(
        &text(&o),
        &["is a run of `mock-calibrated`", "of `mock-gsm8k-grpo`"],
    );
}

/// Under GitHub Actions (`GITHUB_ACTIONS=true`) a failing rule is also an `::error` annotation
/// at the line of the scenario file that declares it, and an invalid scenario one at the line
/// of each error; elsewhere there are none.
#[test]
fn github_actions_gets_error_annotations_at_the_scenario_line() {
    let tmp = tempfile::tempdir().unwrap();
    let smoke = "scenarios/smoke/mock-gsm8k-grpo.yaml";
    let line = std::fs::read_to_string(repo().join(smoke))
        .unwrap()
        .lines()
        .position(|l| l.trim_start().starts_with("actor/lr:"))
        .unwrap()
        + 1;
    let lr = ["--set", "config.actor_rollout_ref.actor.optim.lr=2e-6"];
    let run = |github: bool| {
        let mut c =
            common::rlharness_run(&[&[smoke][..], &lr[..]].concat(), &tmp.path().join("out"));
        if github {
            c.env("GITHUB_ACTIONS", "true");
        }
        c.output().unwrap()
    };
    let o = run(true);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    says(
        &String::from_utf8_lossy(&o.stdout),
        &[&format!(
            "::error file={smoke},line={line},title=rlharness%3A mock-gsm8k-grpo%3A \
             golden%3Aactor/lr::golden:actor/lr regressed"
        )],
    );
    assert!(!text(&run(false)).contains("::error"));

    let root = common::scenarios_root_in(tmp.path());
    std::fs::write(root.join("bad.yaml"), "name: bad\nsteps: many\n").unwrap();
    for args in [
        ["check", "scenarios/bad.yaml"],
        ["run", "scenarios/bad.yaml"],
    ] {
        let o = rlharness()
            .args(args)
            .current_dir(tmp.path())
            .env("GITHUB_ACTIONS", "true")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        says(
            &String::from_utf8_lossy(&o.stdout),
            &[
                "::error file=scenarios/bad.yaml,line=2,title=",
                "::scenarios/bad.yaml:2:8: steps: ",
            ],
        );
    }
}
