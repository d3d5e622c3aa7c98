//! The propagation report's rendering.

use super::*;
use crate::tools::propagate::knob_manifest;
use crate::tools::propagate::verdict::{judge_knob, Cell, CellVerdict};
use serde_json::json;

fn report() -> PropagationReport {
    let m = knob_manifest::parse(
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
    let x = junit(&report());
    let parsed = crate::report::junit::parse(&x);
    let suite = &parsed.suites[0];
    // Two knobs, and the unlisted check that could not run (its config was not seen).
    assert_eq!(suite.cases.len(), 3);
    assert_eq!(suite.failures(), 1);
    assert_eq!(suite.skipped(), 1, "{x}");
    assert!(x.contains("resolved config was not seen"), "{x}");
    assert!(x.contains("a.c") && x.contains("not sent"), "{x}");
}

/// The level-2 headings of the report's document, as text.
fn sections(r: &PropagationReport) -> Vec<String> {
    use crate::report::doc::{text_of, Block};
    document::document(r)
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::Heading { level: 2, text, .. } => Some(text_of(text)),
            _ => None,
        })
        .collect()
}

/// Where each of `needles` is in `hay`, each after the one before (None when one is not).
fn in_order(hay: &str, needles: &[String]) -> bool {
    let mut from = 0;
    needles.iter().all(|n| match hay[from..].find(n.as_str()) {
        Some(at) => {
            from += at + n.len();
            true
        }
        None => false,
    })
}

#[test]
fn markdown_and_html_have_the_same_sections_in_the_same_order() {
    use document::titles;
    let mut r = report();
    r.knobs[0].claims = vec!["manifest only, not observed: <default>".into()];
    r.closed_gaps = vec!["a gap that closed".into()];
    r.unaccounted = vec![crate::tools::propagate::accounted::Unaccounted {
        path: "x.y".into(),
        origin: "s.yaml:1:1".into(),
    }];
    let titles_seen = sections(&r);
    // The verdict first, then what to act on, then the whole matrix, then the rest.
    let expected = [
        crate::tools::propagate::accounted::TITLE,
        titles::FLAGGED,
        titles::CLOSED,
        titles::UNLISTED,
        titles::CLAIMS,
        titles::MATRIX,
    ];
    assert_eq!(titles_seen[..expected.len()], expected, "{titles_seen:?}");
    let md = markdown(&r);
    let h = html(&r);
    let md_heads: Vec<String> = titles_seen.iter().map(|t| format!("\n## {t}\n")).collect();
    assert!(in_order(&md, &md_heads), "{md}");
    let html_heads: Vec<String> = titles_seen
        .iter()
        .map(|t| format!(">{}</h2>", crate::model::util::html_escape(t)))
        .collect();
    assert!(in_order(&h, &html_heads), "{h}");
    // Every section heading of either file is one of the model's, and the verdict line leads.
    assert_eq!(md.matches("\n## ").count(), titles_seen.len(), "{md}");
    assert_eq!(h.matches("<h2").count(), titles_seen.len(), "{h}");
    let verdict = document::verdict_line(&r);
    assert!(verdict.starts_with("Failed: "), "{verdict}");
    assert!(md.split("\n\n").nth(1) == Some(verdict.as_str()), "{md}");
    let first_h2 = h.find("<h2").unwrap();
    assert!(
        h.find(&format!("<p>{verdict}</p>")).unwrap() < first_h2,
        "{h}"
    );
    // A self-contained page: no script, no style sheet or picture from elsewhere.
    assert!(!h.contains("<script") && !h.contains("<link") && !h.contains("src="));
    assert!(h.contains("&lt;default&gt;") && md.contains("<default>"));
}
