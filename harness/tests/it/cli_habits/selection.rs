//! Selecting scenarios as pytest and nextest users expect: by name as well as by path, by tag,
//! and `list` showing where each file is.

use super::rlharness;
use crate::common::{repo, says, text};

/// `run NAME` runs the scenario with that `name:`; a near miss says what was meant (exit 2);
/// `run --tag T` runs exactly the scenarios `list` shows with that tag; a tag nobody has is
/// exit 2; `list` names each scenario's file.
#[test]
fn run_takes_scenario_names_and_tags_and_list_shows_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        rlharness()
            .arg("run")
            .args(args)
            .args(["--no-progress", "-q"])
            .current_dir(repo())
            .output()
            .unwrap()
    };
    let out = tmp.path().join("by-name");
    let o = run(&["mock-gsm8k-grpo", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out.join("mock-gsm8k-grpo/latest/verdict.json").is_file());

    let o = run(&["mock-gsm8k-grp", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(
        &text(&o),
        &["mock-gsm8k-grp", "did you mean `mock-gsm8k-grpo`"],
    );

    // The tagged scenarios as `list` shows them (name, path, tags, ...).
    let listed = rlharness()
        .args(["list", "scenarios"])
        .current_dir(repo())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        listed.lines().next().unwrap().starts_with("SCENARIO"),
        "{listed}"
    );
    assert!(
        listed.contains("scenarios/smoke/mock-gsm8k-grpo.yaml"),
        "{listed}"
    );
    let mut tagged: Vec<&str> = listed
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.get(2)
                .is_some_and(|t| t.split(',').any(|t| t == "smoke"))
        })
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    tagged.sort();
    assert!(!tagged.is_empty(), "{listed}");
    let out = tmp.path().join("by-tag");
    let o = run(&["--tag", "smoke", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mut ran: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ran.sort();
    assert_eq!(ran, tagged);

    let o = run(&["--tag", "no-such-tag", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(&text(&o), &["no-such-tag"]);
}

/// `run --rerun-failed` runs again exactly the scenarios that did not pass in the last run into
/// `--out` (read from `OUT/index.json`), and nothing when all passed.
#[test]
fn rerun_failed_runs_what_failed_last_time() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(&bad, "name: bad\ndescription: x\nseed: 1\nsteps: two\n").unwrap();
    let run = |args: &[&str]| {
        rlharness()
            .arg("run")
            .args(args)
            .args(["--no-progress", "--out", out.to_str().unwrap()])
            .current_dir(repo())
            .output()
            .unwrap()
    };
    let index = || -> Vec<String> {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("index.json")).unwrap())
                .unwrap();
        doc["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["file"].as_str().unwrap().to_string())
            .collect()
    };
    let o = run(&[
        "scenarios/smoke/mock-gsm8k-grpo.yaml",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(index().len(), 2);
    let o = run(&["--rerun-failed"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // This run's entry first, the earlier run's other scenario kept (merged, not replaced).
    assert_eq!(
        index(),
        [
            bad.to_str().unwrap(),
            "scenarios/smoke/mock-gsm8k-grpo.yaml"
        ]
    );
    let o = run(&["scenarios/smoke/mock-gsm8k-grpo.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        index().len(),
        2,
        "the mock's entry replaced, the bad one kept"
    );
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains("mock-gsm8k-grpo") && junit.contains("bad"),
        "{junit}"
    );
    // The bad file fixed (the smoke without its golden rules): rerun, it passes; then nothing
    // failed is left.
    let smoke =
        std::fs::read_to_string(repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let (head, tail) = smoke.split_once("  golden:\n").unwrap();
    let expect = &tail[tail.find("  expect:\n").unwrap()..];
    let fixed = format!("{head}{expect}").replace("name: mock-gsm8k-grpo", "name: bad");
    std::fs::write(&bad, fixed).unwrap();
    let o = run(&["--rerun-failed"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&["--rerun-failed"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    says(&text(&o), &["nothing to run"]);
}
