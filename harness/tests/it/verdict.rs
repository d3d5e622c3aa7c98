//! The judging half end to end on stored data: a run directory and a golden store in a temp
//! folder, re-judged by `compare_command` as `rlharness compare` does.

use std::path::Path;

use rlharness::app::compare_command;
use rlharness::model::error::ExitStatus;
use rlharness::model::golden::{GoldenStore, Provenance};
use rlharness::model::metrics::MetricTable;
use rlharness::model::rundir::RunManifest;
use rlharness::model::rundir::RunStatus;

fn table(rewards: &[f64]) -> MetricTable {
    let mfu = vec![0.3; rewards.len()];
    MetricTable::from_columns(&[("critic/rewards/mean", rewards), ("perf/mfu/actor", &mfu)])
}

fn write_run(dir: &Path, rewards: &[f64]) {
    let manifest: RunManifest = serde_json::from_value(serde_json::json!({
        "scenario": "smoke/mock",
        "scenario_path": "scenarios/smoke/mock.yaml",
        "hardware": "cpu",
        "status": "completed",
        "seed": 1,
        "steps": rewards.len(),
        "checks": {
            "golden": {"critic/rewards/mean": {"window": 2, "abs": 0.05,
                                               "direction": "higher_is_better"}},
            "expect": ["max(perf/mfu/actor) <= 1"]
        },
        "harness_version": "0.1.0",
        "git_commit": null,
        "host": "h",
        "device": "cpu",
        "threads": 2,
        "torch_version": null,
        "started": "2026-01-01T00:00:00Z",
        "ended": "2026-01-01T00:01:00Z",
        "plan_hash": "p",
        "scenario_hash": "s",
        "knobs": []
    }))
    .unwrap();
    assert_eq!(manifest.status, RunStatus::Completed);
    manifest.write(dir).unwrap();
    rlharness_arctic::fsx::write_atomic(
        &dir.join("metrics.csv"),
        table(rewards).to_csv().as_bytes(),
    )
    .unwrap();
}

fn bless(root: &Path, rewards: &[f64]) {
    let store = GoldenStore::with_ci(root, false);
    let prov = Provenance {
        date: "2026-01-01T00:00:00Z".into(),
        harness_version: "0.1.0".into(),
        device: "cpu".into(),
        ..Provenance::default()
    };
    store
        .write_pending("smoke/mock", "cpu", &table(rewards), &prov, None, None)
        .unwrap();
    store.accept(&[]).unwrap();
}

#[test]
fn compare_rejudges_a_stored_run_against_its_golden() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, golden) = (tmp.path().join("run"), tmp.path().join("golden"));
    write_run(&run, &[0.1, 0.2, 0.3, 0.4]);
    let rejudge = || {
        compare_command(&run, None, &golden)
            .unwrap()
            .0
            .exit_status()
    };

    // No golden yet: 4, and nothing is written into the store.
    assert_eq!(rejudge(), ExitStatus::NoGolden);
    assert!(!golden.exists());

    bless(&golden, &[0.1, 0.2, 0.3, 0.4]);
    assert_eq!(rejudge(), ExitStatus::Passed);
    let out = run.join("compare/golden");
    for f in ["verdict.json", "report.md", "report.html", "junit.xml"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    // The run's own files are untouched.
    assert!(!run.join("verdict.json").exists());

    // A golden from a better run: the stored run now regresses in its second window.
    bless(&golden, &[0.1, 0.2, 0.6, 0.7]);
    assert_eq!(rejudge(), ExitStatus::CheckFailed);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(v["outcome"], "regressed");
    assert_eq!(v["rules"][0]["evidence"]["step_or_window"], "steps 3..4");
}

/// `rlharness compare RUN` prints a terminal summary (outcome, each failing rule with value,
/// reference, band and steps, where the reports are), plain when stdout is not a terminal;
/// `--format md` prints the Markdown report, `--format json` the verdict.
#[test]
fn compare_prints_a_summary_and_the_reports_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, golden) = (tmp.path().join("run"), tmp.path().join("golden"));
    write_run(&run, &[0.1, 0.2, 0.3, 0.4]);
    bless(&golden, &[0.1, 0.2, 0.6, 0.7]);
    let compare = |format: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
        c.arg("compare").arg(&run).arg("--golden").arg(&golden);
        if let Some(f) = format {
            c.args(["--format", f]);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let summary = compare(None);
    let lines: Vec<&str> = summary.lines().collect();
    assert!(lines[0].starts_with("smoke/mock: "), "{summary}");
    assert!(
        lines.iter().any(|l| l
            .starts_with("  ✗ golden:critic/rewards/mean regressed at steps 3..4: ")
            && l.contains("band [")),
        "{summary}"
    );
    assert!(summary.contains("reports: ") && summary.contains("compare/golden/report.md"));
    assert!(
        !summary.contains('|') && !summary.contains('<') && !summary.contains("\x1b["),
        "no markup, no colour off a terminal: {summary}"
    );
    assert!(summary.lines().count() < 10, "{summary}");
    assert!(compare(Some("md")).contains("| rule |"));
    let v: serde_json::Value = serde_json::from_str(&compare(Some("json"))).unwrap();
    assert_eq!(v["outcome"], "regressed");
}

#[test]
fn compare_two_runs_writes_overlays() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write_run(&a, &[0.1, 0.2, 0.3, 0.4]);
    write_run(&b, &[0.1, 0.2, 0.3, 0.4, 0.5]);
    let status = compare_command(&a, Some(&b), &tmp.path().join("golden"))
        .unwrap()
        .0
        .exit_status();
    // Same values on the common steps, but b has a step a lacks.
    assert_eq!(status, ExitStatus::CheckFailed);
    let out = a.join("compare/b");
    assert!(out.join("plots/overlay_critic_rewards_mean.svg").is_file());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("grid mismatch") && md.contains("not in the run: 5"),
        "{md}"
    );
}

/// `compare RUN RUN2` of two mock runs made with different `--label`s: each overlay's curves
/// are named by the runs' labels, and `report.html` draws the overlay inline and links its
/// files (`report.md` shows them as pictures).
#[test]
fn compare_names_the_overlay_curves_by_label_and_report_html_embeds_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let run = |label: &str| {
        let out = tmp.path().join(label);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .current_dir(&root)
            .args([
                "run",
                "scenarios/smoke/mock-gsm8k-grpo.yaml",
                "--no-progress",
            ])
            .args(["--steps", "4", "--label", label, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.code().is_some(), "{o:?}");
        std::fs::canonicalize(out.join("mock-gsm8k-grpo/latest")).unwrap()
    };
    let (a, b) = (run("base-v1"), run("cand-v2"));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .current_dir(&root)
        .arg("compare")
        .args([&a, &b])
        .output()
        .unwrap();
    assert!(o.status.code().is_some(), "{o:?}");
    let out = a.join("compare").join(b.file_name().unwrap());
    let svg = std::fs::read_to_string(out.join("plots/overlay_critic_rewards_mean.svg")).unwrap();
    assert!(svg.contains("base-v1") && svg.contains("cand-v2"), "{svg}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains(">Overlay: base-v1 and cand-v2</h2>"),
        "{html}"
    );
    assert!(
        html.contains("<figure data-overlay=\"critic/rewards/mean\"")
            && html.contains("href=\"plots/overlay_critic_rewards_mean.svg\""),
        "{html}"
    );
    let figure = &html[html.find("data-overlay=").unwrap()..];
    let figure = &figure[..figure.find("</figure>").unwrap()];
    assert!(
        figure.contains("<svg") && figure.contains("cand-v2"),
        "{figure}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("](plots/overlay_critic_rewards_mean.svg)"),
        "{md}"
    );
}

#[test]
fn compare_reports_bad_input_as_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let e = compare_command(&run, None, tmp.path()).unwrap_err();
    assert_eq!(e.status, ExitStatus::InvalidInput);
    assert!(e.message.contains("run.json"), "{}", e.message);
    write_run(&run, &[0.1]);
    std::fs::write(run.join("metrics.csv"), "step,x\n1,zz\n").unwrap();
    let e = compare_command(&run, None, tmp.path()).unwrap_err();
    assert_eq!(e.status, ExitStatus::InvalidInput);
    assert!(
        e.message.contains("metrics.csv") && e.message.contains("line 2"),
        "{}",
        e.message
    );
    std::fs::write(run.join("run.json"), "{\"scenario\": 1}").unwrap();
    let e = compare_command(&run, None, tmp.path()).unwrap_err();
    assert!(e.message.contains("invalid run manifest"), "{}", e.message);
}

/// The shipped self-test of an all-skipped CI run (`scenarios/selftest/skipped/`): with
/// `--fail-on-skip` (as the CI templates run) a run where every scenario is skipped is red
/// (exit 1) and names them; without the flag a skip is exit 0, as documented.
#[test]
fn an_all_skipped_ci_run_is_red_under_fail_on_skip() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(["run", "--no-progress", "--out"])
            .arg(tmp.path().join("out"))
            .args(extra)
            .arg("scenarios/selftest/skipped")
            .current_dir(&root)
            .env("CI", "true")
            .output()
            .unwrap()
    };
    let plain = run(&[]);
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    assert!(String::from_utf8_lossy(&plain.stdout).contains("skipped"));
    // A skip is counted as a skip, not a pass, and has its own colour in the index.
    let index = std::fs::read_to_string(tmp.path().join("out/index.md")).unwrap();
    assert!(index.contains("0 passed, 1 skipped"), "{index}");
    let html = std::fs::read_to_string(tmp.path().join("out/index.html")).unwrap();
    assert!(html.contains("class=\"skip\""), "{html}");
    let strict = run(&["--fail-on-skip"]);
    assert_eq!(strict.status.code(), Some(1), "{strict:?}");
    assert!(
        String::from_utf8_lossy(&strict.stderr)
            .contains("--fail-on-skip: 1 scenario(s) skipped: selftest-all-skipped"),
        "{strict:?}"
    );
    // The combined index and JUnit say the same as the exit status.
    let index = std::fs::read_to_string(tmp.path().join("out/index.md")).unwrap();
    assert!(index.contains("exit 1"), "{index}");
    let junit = std::fs::read_to_string(tmp.path().join("out/junit.xml")).unwrap();
    let parsed = quick_junit::Report::deserialize_from_str(&junit).unwrap();
    assert_eq!(parsed.test_suites[0].failures, 1, "{junit}");
    assert!(junit.contains("a failure under --fail-on-skip"), "{junit}");
}

/// The shipped 1.7B scenario's validation rule can fail: the published accuracy after 4 steps
/// is 0.0015, so no score falls 0.05 below it; a score far above it (0.6) is a different run
/// and is flagged "improved" (bless it if real), one near it passes. (It used to be one-sided
/// with no limit: a band no value could cross, which `rlharness check` now refuses.) The
/// golden's blessed rules match the scenario's, so nothing reads as loosened.
#[test]
fn the_1_7b_validation_rule_can_fail_and_is_not_loosened() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let scenario = rlharness::scenario::load_scenario(
        &root.join("scenarios/gpu/qwen3-1.7b-gsm8k-grpo-zorro.yaml"),
        &[],
    )
    .unwrap();
    let golden = GoldenStore::new(root.join("golden"))
        .load(&scenario.name, "h200")
        .unwrap()
        .unwrap();
    let val = "val-core/openai/gsm8k/acc/mean@1";
    let judge = |score: f64| {
        let mut t = MetricTable::new();
        for row in golden.table.rows() {
            let mut m = row.clone();
            if m.get(val).is_some() {
                m.insert(val, score);
            }
            m.insert("actor/grad_norm", 1.0);
            t.push(m);
        }
        let c = &scenario.checks;
        let record = rlharness::judge::RunRecord::completed(&t, c, 1);
        rlharness::judge::judge_run(&record, Some(&golden)).unwrap()
    };
    // Two-sided, as its comment says: a score far above the published one fails like one far
    // below (which a score near 0 cannot show), with the band the docs state.
    let v = judge(0.6);
    let rule = v.rule(&format!("golden:{val}")).unwrap();
    assert_eq!(
        rule.status,
        rlharness::judge::RuleStatus::Regressed,
        "{rule:?}"
    );
    let json = serde_json::to_value(rule).unwrap();
    let hi = json["evidence"]["band"]["hi"].as_f64().unwrap();
    assert!((hi - 0.0515).abs() < 1e-3, "{json}");
    assert_eq!(v.outcome, rlharness::judge::Outcome::Regressed, "{v:?}");
    let v = judge(0.02);
    assert_eq!(v.outcome, rlharness::judge::Outcome::Passed, "{v:?}");
    assert!(!v.rules.iter().any(|r| r.rule.starts_with("loosened:")));
}

/// The golden store is found from the scenario, not the working directory: a run started
/// elsewhere reads the project's goldens (and makes no `./golden/`); a mistyped `--golden` is
/// named; `golden status` where there is no store is an input error, not "no pending goldens".
#[test]
fn the_golden_store_is_found_from_the_scenario() {
    let elsewhere = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let scenario =
        std::fs::canonicalize(root.join("scenarios/smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let rlh = |args: &[&str]| crate::common::rlharness_in(elsewhere.path(), args);
    let out = elsewhere.path().join("out");
    let (s, o) = (scenario.to_str().unwrap(), out.to_str().unwrap());
    let ran = rlh(&["run", s, "--no-progress", "--out", o]);
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert!(!elsewhere.path().join("golden").exists());
    let typo = rlh(&["run", s, "--no-progress", "--out", o, "--golden", "goldn"]);
    assert_eq!(typo.status.code(), Some(4), "{typo:?}");
    assert!(
        String::from_utf8_lossy(&typo.stderr)
            .contains("no golden store at goldn yet (check --golden)"),
        "{typo:?}"
    );
    let status = rlh(&["golden", "status"]);
    assert_eq!(status.status.code(), Some(2), "{status:?}");
    assert!(String::from_utf8_lossy(&status.stderr).contains("no golden store at golden"));
}

/// `rlharness run ... | head -1`: standard output closed after the first line does not panic
/// the harness (exit 101 before); the run goes on, writes its reports and exits with its own
/// status.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(["run", "--no-progress", "--out"])
        .arg(tmp.path().join("out"))
        .args(["scenarios/faults", "scenarios/smoke/mock-gsm8k-grpo.yaml"])
        .current_dir(&root)
        .env("CI", "true")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: the pipe is closed, as `head -1` closes it.
    let status = child.wait().unwrap();
    assert!(!first.is_empty());
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(tmp.path().join("out/index.md").is_file());
}

/// `check` is as strict as `run` about the builtin driver's config: `lr: fast` is an error at its
/// line for both (before, `check` passed it and `run` exited 2 without a line), and `run` names
/// the file once.
#[test]
fn check_refuses_a_config_value_the_driver_cannot_read() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let scenarios = crate::common::scenarios_root_in(tmp.path());
    let text = std::fs::read_to_string(root.join("smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let (line, _) = text
        .lines()
        .enumerate()
        .find(|(_, l)| l.trim_start().starts_with("lr: "))
        .unwrap();
    let bad: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                l.replace(l.trim_start(), "lr: fast")
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(scenarios.join("bad.yaml"), bad.join("\n")).unwrap();
    let rlh = |args: &[&str]| crate::common::rlharness_in(tmp.path(), args);
    let want = format!("scenarios/bad.yaml:{}:", line + 1);
    for o in [
        rlh(&["check", "scenarios/bad.yaml"]),
        rlh(&["run", "scenarios/bad.yaml", "--no-progress"]),
    ] {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.code(), Some(2), "{text}");
        assert!(
            text.contains(&want)
                && text.contains(
                    "config.actor_rollout_ref.actor.optim.lr: expected a number, found \"fast\""
                ),
            "{text}"
        );
        assert_eq!(text.matches("scenarios/bad.yaml").count(), 1, "{text}");
    }
}

/// A gradient-norm explosion is caught wherever it happens. In every shipped calibrated
/// scenario whose stability rules judge `actor/grad_norm`, the golden's own series passes; one
/// window of 5 steps at 5 times the calibration's centre (the healthy runs' typical value
/// there; 10.5 times on the H200 learner, below) fails `stability:actor/grad_norm` and the run,
/// in every window; so does the golden's series at that factor from any window but the last
/// to the end (two windows or more). The band is on the log scale, sized by the run's budget
/// from the measured seeds (no fixed k), and never wider than ×÷10.
///
/// Not claimed: 5 times the golden run's own value in one window, wherever that run sat. Real
/// verl's healthy seeds spread over a factor of 4.4 at steps 6–10 (seed 2's window median is
/// 1.43, the golden's 0.26), so 5 × 0.26 there is a healthy value.
#[test]
fn a_five_fold_grad_norm_window_fails_every_calibrated_scenario() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // (scenario, hardware, the explosion caught in one window). The H200 learner's calibration
    // has 5 runs (no device was lent to redo it): k is 12 and its bands reach the ×÷10 cap, so
    // only the cap's explosion is claimed there (`check` says the calibration is too small).
    let cases = [
        ("scenarios/tiny-gsm8k-grpo.yaml", "cpu", 5.0),
        ("scenarios/verl/real-verl-arctic-grpo.yaml", "cpu", 5.0),
        ("scenarios/gpu/arith-grpo-zorro-h200.yaml", "h200", 10.5),
    ];
    let rule = "stability:actor/grad_norm";
    for (file, hardware, explosion) in cases {
        let scenario = rlharness::scenario::load_scenario(&root.join(file), &[]).unwrap();
        let golden = GoldenStore::new(root.join("golden"))
            .load(&scenario.name, hardware)
            .unwrap()
            .unwrap();
        let judge = |t: &MetricTable| {
            let record = rlharness::judge::RunRecord::completed(t, &scenario.checks, 1);
            rlharness::judge::judge_run(&record, Some(&golden)).unwrap()
        };
        // `factor(step)` times the golden's gradient norm.
        let scaled = |factor: &dyn Fn(u64) -> f64| {
            let mut t = MetricTable::new();
            for row in golden.table.rows() {
                let mut m = row.clone();
                let g = m.get("actor/grad_norm").unwrap();
                m.insert("actor/grad_norm", factor(row.step) * g);
                t.push(m);
            }
            t
        };
        let v = judge(&golden.table);
        let own = v.rule(rule).unwrap_or_else(|| panic!("{file}: no {rule}"));
        assert_eq!(
            own.status,
            rlharness::judge::RuleStatus::Pass,
            "{file}: {own:?}"
        );
        let fails = |t: &MetricTable, what: &str| {
            let v = judge(t);
            let r = v.rule(rule).unwrap();
            assert_ne!(
                r.status,
                rlharness::judge::RuleStatus::Pass,
                "{file}: {what} passed: {r:?}"
            );
            assert_ne!(v.outcome, rlharness::judge::Outcome::Passed, "{file}");
        };
        let points = serde_json::to_value(own).unwrap()["points"].clone();
        let points = points.as_array().unwrap();
        for (i, p) in points.iter().enumerate() {
            let (first, last) = (p["first"].as_u64().unwrap(), p["last"].as_u64().unwrap());
            let centre = p["centre"]
                .as_f64()
                .expect("a calibrated band has a centre");
            let value = p["value"].as_f64().unwrap();
            let to = explosion * centre / value;
            fails(
                &scaled(&|s| if (first..=last).contains(&s) { to } else { 1.0 }),
                &format!(
                    "steps {first}..{last} at {explosion} x the calibration's centre {centre}"
                ),
            );
            // Persistent: two windows or more (one window's is the case above).
            if i + 1 < points.len() {
                fails(
                    &scaled(&|s| if s >= first { explosion } else { 1.0 }),
                    &format!("{explosion} x the golden from step {first} on"),
                );
            }
        }
    }
}
