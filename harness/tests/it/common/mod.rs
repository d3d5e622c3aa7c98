//! Helpers the end-to-end tests share: where the repository is, the run options of a test
//! run (the project's goldens, never written; the run directory at `OUT/run`), running a
//! scenario to the exit status it must reach, reading a run's `wire.jsonl`, and `rlharness
//! run` as a command. Each test module uses a part of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rlharness::app::run_one;
use rlharness::error::ExitStatus;
use rlharness::report::Report;
use rlharness::runner::RunOptions;
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
