use super::*;
use crate::judge::judge_tables;
use crate::judge::{ChecksSpec, Judged};
use crate::model::util::html_escape;

fn series(values: &[(&str, &[f64])]) -> MetricTable {
    MetricTable::from_columns(values)
}

/// A completed run's manifest, as `run.json` stores it (the fields `run.json` may leave out
/// take their defaults).
fn manifest(checks: &str, expected: Option<&str>) -> RunManifest {
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    let now = chrono::Utc::now().to_rfc3339();
    let mut m = serde_json::json!({
        "scenario": "smoke/mock-gsm8k-grpo",
        "scenario_path": "scenarios/smoke/mock-gsm8k-grpo.yaml",
        "hardware": "cpu",
        "status": "completed",
        "seed": 7,
        "steps": 6,
        "checks": parse(checks),
        "harness_version": "0.1.0",
        "git_commit": format!("{:x}", 0xdead_beef_u32),
        "host": "build-host-17",
        "device": "cpu",
        "threads": 2,
        "started": now,
        "ended": now,
        "plan_hash": "p",
        "scenario_hash": "s",
        "knobs": [{
            "key": "config.actor_rollout_ref.actor.optim.lr",
            "default": "1e-6",
            "value": "1e-5",
            "origin": "--set",
        }],
    });
    if let Some(e) = expected {
        m["expected_verdict"] = parse(e);
    }
    serde_json::from_value(m).unwrap()
}

const CHECKS: &str = r#"{"golden": {
        "critic/rewards/mean": {"window": 3, "abs": 0.05, "direction": "higher_is_better"},
        "perf/mfu/actor": {"rel": 0.05, "direction": "higher_is_better", "improvement_limit": 0.2}},
      "expect": ["mean(critic/rewards/mean, last 3) >= mean(critic/rewards/mean, first 3) + 0.2",
                 "all(actor/grad_norm, finite)"]}"#;

fn golden() -> Reference {
    Reference {
        label: "golden".into(),
        table: series(&[
            ("critic/rewards/mean", &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
            ("perf/mfu/actor", &[0.25; 6]),
        ]),
        provenance: Some(Provenance {
            date: "2026-01-02T03:04:05Z".into(),
            harness_version: "0.1.0".into(),
            git_commit: Some("0123abc".into()),
            device: "cpu".into(),
            seed: Some(7),
            threads: Some(2),
            torch_version: None,
            source: None,
            ..Provenance::default()
        }),
        overlay: None,
    }
}

/// The report of run `m` judged `verdict` against `g`, with the judge's decision of them (as
/// the command layer makes one).
fn report_of(
    dir: &Path,
    m: &RunManifest,
    run: MetricTable,
    g: Reference,
    verdict: Verdict,
) -> Report {
    let decision = Judged::of_run(m, Some(&verdict)).decide();
    Report::from_run(dir, m, run, Some(g), Some(verdict), decision)
}

/// The series of a run whose reward regresses in the second window and whose grad norm goes
/// NaN.
fn regressed_series() -> MetricTable {
    series(&[
        ("critic/rewards/mean", &[0.1, 0.2, 0.3, 0.2, 0.25, 0.3]),
        ("perf/mfu/actor", &[0.25, 0.26, 0.25, 0.255, 0.25, 0.25]),
        ("actor/grad_norm", &[1.0, 0.9, f64::NAN, 0.8, 0.7, 0.7]),
    ])
}

/// A run whose reward regresses in the second window and whose grad norm goes NaN.
fn regressed(dir: &Path) -> Report {
    regressed_declaring(dir, None)
}

/// As `regressed`, its scenario declaring `expected` (`expected_verdict`, JSON).
fn regressed_declaring(dir: &Path, expected: Option<&str>) -> Report {
    let run = regressed_series();
    let m = manifest(CHECKS, expected);
    let g = golden();
    let verdict = judge_tables(&run, Some(&g.table), &m.checks);
    let mut r = report_of(dir, &m, run, g, verdict);
    r.trainer_tail = Some("(TaskRunner pid=1) step:6 - critic/rewards/mean:0.3\n".into());
    r
}

/// The verdict `regressed` declares in `expected_failure_and_skipped_reports`.
const EXPECTED_REGRESSED: &str = r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean",
                    "expect:mean(critic/rewards/mean, last 3) >= mean(critic/rewards/mean, first 3) + 0.2",
                    "expect:all(actor/grad_norm, finite)"]}"#;

/// Paths, times, host and commit change from run to run: snapshots see placeholders.
fn redact(text: &str, r: &Report) -> String {
    let mut t = text.to_string();
    // report.html lets a path break after each `/`.
    let mut pairs: Vec<(String, &str)> = vec![
        (r.run.dir.replace('/', "/<wbr>"), "[dir]"),
        (r.run.dir.clone(), "[dir]"),
    ];
    for s in [&r.run.started, &r.run.ended].into_iter().flatten() {
        pairs.push((s.clone(), "[time]"));
    }
    pairs.push((r.run.host.clone(), "[host]"));
    if let Some(c) = &r.run.git_commit {
        pairs.push((c.clone(), "[commit]"));
    }
    for (from, to) in pairs {
        if !from.is_empty() {
            t = t.replace(&from, to);
        }
    }
    t
}

fn snapshot(name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

#[test]
fn regressed_run_reports() {
    let dir = tempfile::tempdir().unwrap();
    let r = regressed(&dir.path().join("20260102-030405-1"));
    assert_eq!(r.exit_status(), ExitStatus::CheckFailed);
    let md = render_markdown(&r);
    assert!(
        md.starts_with("## ❌ smoke/mock-gsm8k-grpo: regressed"),
        "{md}"
    );
    snapshot("report_regressed.md", &redact(&md, &r));
    snapshot(
        "verdict_regressed.json",
        &redact(&render_verdict_json(&r), &r),
    );
    snapshot(
        "junit_regressed.xml",
        &redact(&render_junit(std::slice::from_ref(&r)), &r),
    );
}

#[test]
fn expected_failure_and_skipped_reports() {
    let dir = tempfile::tempdir().unwrap();
    let r = regressed_declaring(&dir.path().join("run-1"), Some(EXPECTED_REGRESSED));
    assert_eq!(r.expected_match(), Some(Ok(())));
    assert_eq!(r.exit_status(), ExitStatus::Passed);
    let why = "needs a CUDA device";
    let skipped = Report::skipped("gpu/torch-h200", why, Judged::skipped(why).decide());
    assert_eq!(skipped.exit_status(), ExitStatus::Passed);
    let md = render_markdown(&r);
    assert!(
        md.contains("expected failure: regressed as declared"),
        "{md}"
    );
    snapshot("report_expected_failure.md", &redact(&md, &r));
    snapshot("report_skipped.md", &render_markdown(&skipped));
    let junit = render_junit(&[r.clone(), skipped.clone()]);
    snapshot("junit_expected_and_skipped.xml", &redact(&junit, &r));

    // Parse the JUnit back: well-formed, one suite per scenario, statuses as intended.
    let back = junit::parse(&junit);
    assert_eq!(back.suites.len(), 2);
    let s0 = &back.suites[0];
    assert_eq!(s0.name, "smoke/mock-gsm8k-grpo");
    assert_eq!(s0.failures(), 0);
    assert!(s0.cases.iter().any(|c| c.name == "expected verdict"));
    let s1 = &back.suites[1];
    assert_eq!(s1.cases.len(), 1);
    assert!(matches!(s1.cases[0].status, junit::CaseStatus::Skip { .. }));

    // An unexpected pass of a declared failure is a failure.
    let g = golden();
    let verdict = judge_tables(&g.table, Some(&g.table), &ChecksSpec::default());
    let m = manifest(CHECKS, Some(EXPECTED_REGRESSED));
    let run_2 = dir.path().join("run-2");
    let passed = report_of(&run_2, &m, regressed_series(), g, verdict);
    assert_eq!(passed.exit_status(), ExitStatus::CheckFailed);
    assert!(render_markdown(&passed).contains("not matched"));
}

#[test]
fn junit_failures_carry_the_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let r = regressed(&dir.path().join("run-1"));
    let junit = render_junit(std::slice::from_ref(&r));
    let back = junit::parse(&junit);
    let suite = &back.suites[0];
    let case = suite
        .cases
        .iter()
        .find(|c| c.name == "golden:critic/rewards/mean")
        .unwrap();
    match &case.status {
        junit::CaseStatus::Fail(p) => {
            let m = &p.message;
            assert!(
                m.contains("at steps 4..6") && m.contains("band [0.45, 0.6]"),
                "{m}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(suite.failures(), 3);
}

#[test]
fn html_is_self_contained_with_inline_plots() {
    let dir = tempfile::tempdir().unwrap();
    let r = regressed(&dir.path().join("run-1"));
    let html = render_html(&r);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        html.matches("<figure").count(),
        3,
        "one plot per checked metric"
    );
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    assert!(!html.contains("<script"));
    assert!(html.contains("config.actor_rollout_ref.actor.optim.lr"));
    assert!(html.contains("&lt;") || !r.scenario.contains('<'));
    // The plots have their own test; the snapshot keeps the page reviewable without them.
    let mut page = String::new();
    let mut rest = html.as_str();
    while let Some(start) = rest.find("<svg width=") {
        page.push_str(&rest[..start]);
        page.push_str("<svg>[plot]</svg>");
        rest = rest[start..]
            .find("</svg>")
            .map(|end| &rest[start + end + "</svg>".len()..])
            .unwrap_or("");
    }
    page.push_str(rest);
    snapshot("report_regressed.html", &redact(&page, &r));
}

/// The text between the body's start and the first table: the headline block.
fn html_head(html: &str) -> &str {
    let body = html.find("<body>").unwrap();
    let table = html.find("<table").unwrap_or(html.len());
    &html[body..table]
}

#[test]
fn html_names_the_failing_rules_before_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let r = regressed(&dir.path().join("run-1"));
    let html = render_html(&r);
    let head = html_head(&html);
    let total = r.verdict.as_ref().unwrap().rules.len();
    let tally = format!(
        "{total} rules, {} pass; <b class=\"fail\">failing:</b>",
        total - 3
    );
    assert!(head.contains(&tally), "{head}");
    let failing: Vec<&str> = r
        .verdict
        .as_ref()
        .unwrap()
        .failing()
        .map(|x| x.rule.as_str())
        .collect();
    assert_eq!(failing.len(), 3);
    // (A rule's name may break after each `/`.)
    let head = head.replace("<wbr>", "");
    for rule in failing {
        let named = html_escape(rule);
        assert!(head.contains(&named), "{rule} not named on top:\n{head}");
    }
    // The same line as the Markdown's.
    let md = render_markdown(&r);
    assert!(
        md.contains("; failing: `golden:critic/rewards/mean` regressed"),
        "{md}"
    );
}

#[test]
fn html_status_marks_need_no_emoji_font() {
    let dir = tempfile::tempdir().unwrap();
    let r = regressed(&dir.path().join("run-1"));
    let html = render_html(&r);
    let emoji: Vec<char> = html
        .chars()
        .filter(|c| {
            matches!(*c as u32, 0x2600..=0x27BF | 0x2B00..=0x2BFF | 0x23E9..=0x23FA
                | 0x1F000..=0x1FAFF | 0xFE0F)
        })
        .collect();
    assert!(emoji.is_empty(), "emoji in report.html: {emoji:?}");
    // Each status is an inline SVG mark, named for screen readers, beside its word.
    assert!(html.contains("aria-label=\"regressed\"><circle"), "{html}");
    assert!(
        html.contains("<h1 class=\"fail\"><svg class=\"mark\""),
        "{html}"
    );
}

#[test]
fn html_keeps_numbers_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = regressed(&dir.path().join("run-1"));
    let v = r.verdict.as_mut().unwrap();
    v.rules[0].evidence.message = "worst at step 4: 2.000e-6 against 1.5e-6".into();
    let html = render_html(&r);
    // Value, reference, band and margin cells never wrap; nor does a number in the
    // evidence, whose minus sign a browser may break after.
    assert!(html.contains("td.n,td.nw,.nw{white-space:nowrap}"));
    assert!(html.contains("<td class=\"nw\">[0.45, 0.6]</td>"), "{html}");
    assert!(
        html.contains("<span class=\"nw\">2.000e-6</span> against <span class=\"nw\">1.5e-6"),
        "{html}"
    );
}

#[test]
fn plots_shade_the_band_and_mark_failures() {
    let dir = tempfile::tempdir().unwrap();
    let r = regressed(&dir.path().join("run-1"));
    let plots = render_plots(&r);
    let names: Vec<&str> = plots.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "critic_rewards_mean.svg",
            "perf_mfu_actor.svg",
            "actor_grad_norm.svg"
        ]
    );
    let (_, reward) = &plots[0];
    assert!(
        reward.starts_with("<svg"),
        "{}",
        &reward[..80.min(reward.len())]
    );
    // Band rectangles in the band colour, and the failure marks in red.
    assert!(reward.contains("#4285F4"), "band colour");
    assert!(reward.contains("#D62728"), "failure colour");
    // The passing MFU plot has a band but no failure mark.
    assert!(plots[1].1.contains("#4285F4") && !plots[1].1.contains("#D62728"));
    // The NaN step of the grad norm is marked.
    assert!(plots[2].1.contains("#D62728"));
    let overlay = render_overlay(
        &r.metrics,
        &r.reference.as_ref().unwrap().table,
        "critic/rewards/mean",
        "a",
        "b",
    );
    assert!(overlay.contains("<svg") && overlay.contains("critic/rewards/mean"));
}

#[test]
fn write_reports_writes_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run-1");
    let r = regressed(&run_dir);
    write_reports(&run_dir, &r).unwrap();
    for f in [
        "verdict.json",
        "report.md",
        "report.html",
        "junit.xml",
        "plots/critic_rewards_mean.svg",
        "plots/perf_mfu_actor.svg",
    ] {
        assert!(run_dir.join(f).is_file(), "{f}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&fsx::read_to_string(&run_dir.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["outcome"], "regressed");
}

#[test]
fn numbers_read_well() {
    assert_eq!(num(0.30000000000000004), "0.3");
    assert_eq!(num(1e-6), "1.000e-6");
    assert_eq!(num(-0.00001), "-1.000e-5");
    assert_eq!(num(12.0), "12");
    assert_eq!(num(f64::NAN), "NaN");
    assert_eq!(num(-0.0), "0");
}

/// A report whose reward rule is a default stability rule, as the judge writes one: its
/// evidence ends in the text every stability rule shares.
fn with_stability_rule(dir: &Path) -> Report {
    let mut r = regressed(dir);
    let v = r.verdict.as_mut().unwrap();
    let x = v
        .rules
        .iter_mut()
        .find(|x| x.rule == "golden:critic/rewards/mean")
        .unwrap();
    x.rule = "stability:critic/rewards/mean".into();
    x.evidence
        .message
        .push_str(&format!("; {}", crate::judge::stability::note(false)));
    r
}

#[test]
fn the_text_a_rule_kind_shares_is_said_once_and_each_rule_links_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let r = with_stability_rule(dir.path());
    let note = crate::judge::stability::note(false);
    let md = render_markdown(&r);
    assert_eq!(md.matches("### How these rules judge\n").count(), 1, "{md}");
    assert_eq!(md.matches("a default stability rule").count(), 1, "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| `stability:critic/rewards/mean`"))
        .unwrap();
    assert!(
        row.ends_with("([how these rules judge](#how-these-rules-judge)) |")
            && !row.contains(&note),
        "{row}"
    );
    let html = render_html(&r);
    assert_eq!(
        html.matches("a default stability rule").count(),
        1,
        "{html}"
    );
    assert!(html.contains("<h2 id=\"how-these-rules-judge\">How these rules judge</h2>"));
    assert!(html.contains("(<a href=\"#how-these-rules-judge\">how these rules judge</a>)"));
    // The other rules' evidence is as the judge wrote it, with no link.
    assert_eq!(md.matches("(#how-these-rules-judge)").count(), 1, "{md}");
}

#[test]
fn a_stability_rules_band_is_drawn_on_its_metrics_plot() {
    let dir = tempfile::tempdir().unwrap();
    let r = with_stability_rule(dir.path());
    let plots = render_plots(&r);
    let (_, svg) = plots
        .iter()
        .find(|(f, _)| f == "critic_rewards_mean.svg")
        .unwrap();
    assert!(svg.contains("data-series=\"stability band\""), "{svg}");
    // The band's group, and the legend's entry.
    assert_eq!(svg.matches("stability band").count(), 2, "{svg}");
    // A golden rule's band keeps its name.
    let golden = render_plots(&regressed(dir.path()));
    let (_, svg) = golden
        .iter()
        .find(|(f, _)| f == "critic_rewards_mean.svg")
        .unwrap();
    assert!(svg.contains("data-series=\"band\"") && !svg.contains("stability band"));
}
