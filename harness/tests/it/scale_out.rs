//! `rlharness run A B C --jobs N`: scenarios side by side on this host, one combined verdict
//! (OUT/index.md, OUT/index.html, OUT/junit.xml), the worst exit status.

use std::path::Path;
use std::process::Output;

use crate::common::{rlharness_run, says, text};

fn run(args: &[&str], out: &Path) -> Output {
    rlharness_run(args, out).output().unwrap()
}

/// (started, ended) of every run directory under OUT, from verdict.json.
fn spans(out: &Path) -> Vec<(String, String, String)> {
    let mut v = Vec::new();
    for s in std::fs::read_dir(out).unwrap().flatten() {
        let latest = s.path().join("latest");
        let Ok(doc) = std::fs::read_to_string(latest.join("verdict.json")) else {
            continue;
        };
        let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
        let run = &doc["run"];
        v.push((
            doc["scenario"].as_str().unwrap().to_string(),
            run["started"].as_str().unwrap().to_string(),
            run["ended"].as_str().unwrap().to_string(),
        ));
    }
    v
}

#[test]
fn two_jobs_run_side_by_side_into_one_combined_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = run(
        &["scenarios/smoke", "scenarios/faults", "--jobs", "2"],
        &out,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), 12, "{junit}");
    assert!(
        junit.contains("classname=\"scenarios/faults/stall.yaml\""),
        "{junit}"
    );
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(index.starts_with("# rlharness run: exit 0"), "{index}");
    assert!(
        index.contains("| fault-stall (`scenarios/faults/stall.yaml`) | 0 |"),
        "{index}"
    );
    assert!(out.join("index.html").is_file());
    // Side by side: some two runs overlap in time.
    let spans = spans(&out);
    assert_eq!(spans.len(), 12, "{spans:?}");
    let overlap = spans
        .iter()
        .any(|a| spans.iter().any(|b| a.0 != b.0 && a.1 < b.2 && b.1 < a.2));
    assert!(overlap, "no two runs overlapped: {spans:?}");
    assert!(text(&o).contains("combined: "), "{}", text(&o));
}

#[test]
fn the_worst_scenario_decides_the_exit_and_an_invalid_one_is_an_error_case() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("scenarios/broken.yaml");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "name: broken\nsteps: [not a number\n").unwrap();
    let out = tmp.path().join("out");
    let o = run(
        &[
            "scenarios/smoke",
            bad.to_str().unwrap(),
            "--jobs",
            "2",
            "--steps",
            "3",
        ],
        &out,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), 2, "{junit}");
    assert!(junit.contains("<error message=\"exit 2: "), "{junit}");
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(index.starts_with("# rlharness run: exit 2"), "{index}");
}

#[test]
fn a_multi_seed_run_has_a_case_per_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = run(
        &[
            "scenarios/smoke",
            "--seeds",
            "1..2",
            "--jobs",
            "2",
            "--steps",
            "4",
        ],
        &out,
    );
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert_eq!(
        junit.matches("<testcase ").count(),
        3,
        "{junit}\n{}",
        text(&o)
    );
    says(
        &junit,
        &[
            "name=\"mock-gsm8k-grpo seed 1\"",
            "name=\"mock-gsm8k-grpo seed 2\"",
        ],
    );
}

/// What `run` prints for a scenario that fails: its summary, then each failing rule with its
/// value, reference, band and steps (plain text off a terminal), then where the report is.
#[test]
fn a_failing_scenario_prints_its_failing_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "scenarios/smoke/mock-gsm8k-grpo.yaml",
            "--set",
            "backend.efficiency.scale=0.9",
        ],
        &tmp.path().join("out"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("mock-gsm8k-grpo: "), "{stdout}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  ✗ golden:perf/mfu/actor regressed at ")
                && l.contains("(reference ")
                && l.contains("band [")),
        "{stdout}"
    );
    assert!(
        !stdout.contains("\x1b["),
        "no colour off a terminal: {stdout}"
    );
    assert!(stdout.contains("  report: "), "{stdout}");
}
