//! The propagation report's rendering.

use super::*;
use crate::propagate::manifest;
use crate::propagate::verdict::{judge_knob, Cell, CellVerdict};
use serde_json::json;

fn report() -> PropagationReport {
    let m = manifest::parse(
        "backend: arctic\nbackend_yaml: backends/arctic.yaml\nbackend_prefix: remote_backend\nknobs:\n  - {path: a.b, default: 1, try: [2], consumers: [{at: meta.b}]}\n  - {path: a.c, default: x, try: [y], note: 'nothing reads <it>'}\n",
        std::path::Path::new("k.yaml"),
    )
    .unwrap();
    let cell = |v: CellVerdict, at: &[&str]| Cell {
        value: json!(2),
        condition: Default::default(),
        verdict: v,
        changes: vec![],
        active: vec![],
        consumed_at: at.iter().map(|s| s.to_string()).collect(),
        problems: vec![],
        unobservable: None,
    };
    PropagationReport {
        scenario: "s".into(),
        backend: "arctic".into(),
        runs: 3,
        seconds: 1.25,
        driver: "the builtin driver".into(),
        manifest: "backends/arctic.knobs.yaml".into(),
        until: "the first update".into(),
        closed_gaps: vec![],
        grouping: true,
        planned_solo: 4,
        planned_grouped: 3,
        splits: 0,
        unlisted: Default::default(),
        unaccounted: Vec::new(),
        require_observed: false,
        environment: Default::default(),
        knobs: vec![
            judge_knob(
                &m.knobs[0],
                vec![cell(CellVerdict::Consumed, &["meta.b"])],
                None,
            ),
            judge_knob(&m.knobs[1], vec![cell(CellVerdict::NotSent, &[])], None),
        ],
    }
}

#[test]
fn markdown_lists_every_knob_and_details_the_flagged() {
    let md = markdown(&report());
    assert!(
        md.contains(
            "| `a.b` | consumed | ok | observed at meta.b; claimed (manifest): the server reads it there |"
        ),
        "{md}"
    );
    assert!(md.contains("| `a.c` | not sent | **FLAGGED** |"), "{md}");
    assert!(md.contains("### `a.c`: not sent"), "{md}");
    assert!(md.contains("1 flagged"), "{md}");
}

#[test]
fn a_long_problem_is_cut_in_the_table_and_whole_in_its_section() {
    let mut r = report();
    let tail = "x".repeat(1000);
    r.knobs[1].problems = vec![format!("the run failed; the trainer's last lines: {tail}")];
    let md = markdown(&r);
    let row = md.lines().find(|l| l.starts_with("| `a.c`")).unwrap();
    assert!(
        row.len() < 400 && row.contains("(the whole text in its section)"),
        "{row}"
    );
    assert!(md.contains(&tail), "the section keeps the whole text");
}

#[test]
fn html_escapes() {
    let h = html(&report());
    assert!(h.contains("nothing reads &lt;it&gt;"), "{h}");
    assert!(h.contains("<tr class=\"flagged\">"));
}

#[test]
fn junit_has_one_case_per_knob_and_a_failure_per_flag() {
    let x = junit(&report()).unwrap();
    let parsed = quick_junit::Report::deserialize_from_str(&x).unwrap();
    let suite = &parsed.test_suites[0];
    // Two knobs, and the unlisted check that could not run (its config was not seen).
    assert_eq!(suite.test_cases.len(), 3);
    assert_eq!(suite.failures, 1);
    assert_eq!(suite.skipped, 1, "{x}");
    assert!(x.contains("resolved config was not seen"), "{x}");
    assert!(x.contains("a.c") && x.contains("not sent"), "{x}");
}
