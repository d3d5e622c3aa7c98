//! The run judge: each family of rules, calibrated bands, the order of the verdict.

use super::*;
use crate::judge::calibrated::{band_widths, live_checks};
use crate::judge::first_settled_failure;
use crate::model::checks::expr::fmt_num;
use crate::model::golden::calibration::Calibration;
use crate::model::metrics::StepMetrics;

fn table(cols: &[(&str, &[f64])]) -> MetricTable {
    let mut t = MetricTable::new();
    let n = cols.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    for i in 0..n {
        let mut m = StepMetrics::new(i as u64 + 1);
        for (name, v) in cols {
            if let Some(x) = v.get(i) {
                if !x.is_nan() {
                    m.insert(*name, *x);
                }
            }
        }
        t.push(m);
    }
    t
}

fn checks(json: &str) -> ChecksSpec {
    serde_json::from_str(json).unwrap()
}

fn record<'a>(
    metrics: &'a MetricTable,
    checks: &'a ChecksSpec,
    dropped: &'a [DroppedValue],
) -> RunRecord<'a> {
    RunRecord {
        dropped,
        ..RunRecord::completed(metrics, checks, 1)
    }
}

fn golden(t: MetricTable, rules: Option<ChecksSpec>) -> Golden {
    Golden {
        rules,
        ..Golden::of_table(t)
    }
}

#[test]
fn a_calibrated_band_is_k_sigma_from_the_calibration_or_missing_without_one() {
    let c = checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 3, "floor": 0.01}}}}"#);
    let gold = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
    let near = table(&[("r", &[0.55, 0.55, 0.5, 0.5])]);
    let dropped: Vec<DroppedValue> = Vec::new();
    // No calibration: the rule cannot be judged, and says what to run.
    let v = judge_run(
        &record(&near, &c, &dropped),
        Some(&golden(gold.clone(), None)),
    )
    .unwrap();
    let r = v.rule("golden:r").unwrap();
    assert_eq!(r.status, RuleStatus::Missing);
    assert!(
        r.evidence.message.contains("rlharness golden calibrate"),
        "{r:?}"
    );
    // Calibrated from two runs: window 1..2 has σ 0.0283 (n 2), window 3..4 σ 0. Each
    // window gets its own band, k × σ × √(1 + 1/n) (a prediction interval for one more
    // run), never under the floor, around the calibration's mean of that window.
    let g = calibrated_golden(gold, &c);
    let v = judge_run(&record(&near, &c, &dropped), Some(&g)).unwrap();
    let r = v.rule("golden:r").unwrap();
    assert_eq!(r.status, RuleStatus::Pass, "{r:?}");
    let half = 3.0 * 0.028284271 * 1.5f64.sqrt();
    let band = r.points[0].band;
    assert!((band.hi() - 0.5 - half).abs() < 1e-6, "{band:?}");
    assert!((band.lo() - 0.5 + half).abs() < 1e-6, "{band:?}");
    // The quiet window keeps its own (floor) band, not the noisy window's σ.
    let band = r.points[1].band;
    assert!((band.hi() - 0.51).abs() < 1e-9, "{band:?}");
    assert!(
        r.evidence
            .message
            .contains("calibrated per window (max(k × the window's σ × √(1 + 1/n), floor 0.01) around the calibration's mean of the window; k 3 (set by hand: outside the run's false-alarm budget))"),
        "{}",
        r.evidence.message
    );
    // And what one run can see: half + z(0.8) σ per window (the quiet one: its floor).
    let caught = half + 0.841_621_233_572_914_3 * 0.028284271;
    assert!(
        r.evidence.message.contains(&format!(
            "one run catches a shift of 0.01..{} on the bad side 80% of the time",
            fmt_num(caught)
        )),
        "{}",
        r.evidence.message
    );
    let far = table(&[("r", &[0.7, 0.7, 0.5, 0.5])]);
    let v = judge_run(&record(&far, &c, &dropped), Some(&g)).unwrap();
    assert_eq!(v.rule("golden:r").unwrap().status, RuleStatus::Regressed);
    let quiet_moved = table(&[("r", &[0.5, 0.5, 0.52, 0.52])]);
    let v = judge_run(&record(&quiet_moved, &c, &dropped), Some(&g)).unwrap();
    assert_eq!(v.rule("golden:r").unwrap().status, RuleStatus::Regressed);
    // Centred on the calibration's mean, not on the golden (one seed's draw): a golden
    // at 0.4 in window 1..2 leaves a run at the calibration's mean (0.5) passing, and
    // says what it was compared against.
    let mut low = golden(table(&[("r", &[0.4, 0.4, 0.5, 0.5])]), None);
    low.calibration = g.calibration.clone();
    let at_mean = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
    let v = judge_run(&record(&at_mean, &c, &dropped), Some(&low)).unwrap();
    let r = v.rule("golden:r").unwrap();
    assert_eq!(r.status, RuleStatus::Pass, "{r:?}");
    assert_eq!(r.points[0].centre, Some(0.5));
    assert_eq!(r.points[0].golden, Some(0.4));
    let v = judge_run(&record(&far, &c, &dropped), Some(&low)).unwrap();
    let r = v.rule("golden:r").unwrap();
    assert!(
        r.evidence
            .message
            .contains("0.7 against the calibration mean 0.5 (golden 0.4)"),
        "{}",
        r.evidence.message
    );
}

/// `gold` with a calibration of two runs of `r`: window 1..2 at 0.48 and 0.52 (σ 0.0283),
/// window 3..4 at 0.5 (σ 0).
fn calibrated_golden(gold: MetricTable, c: &ChecksSpec) -> Golden {
    let runs = [
        table(&[("r", &[0.48, 0.48, 0.5, 0.5])]),
        table(&[("r", &[0.52, 0.52, 0.5, 0.5])]),
    ];
    let mut g = golden(gold, None);
    g.calibration = Some(Calibration::of_test_runs(&runs, c));
    g
}

#[test]
fn a_calibrated_fail_fast_rule_is_watched_with_its_calibrated_band() {
    let c = checks(
        r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 3, "floor": 0.01}, "fail_fast": true}}}"#,
    );
    let gold = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
    let g = calibrated_golden(gold, &c);
    let settled = |checks: &ChecksSpec, run: &MetricTable| {
        first_settled_failure(checks, Some(&g.table), run, 4)
    };
    let near = table(&[("r", &[0.55, 0.55])]);
    let far = table(&[("r", &[0.7, 0.7])]);
    // Raw, the calibrated rule has no band at all: a run inside its band would abort.
    assert_eq!(settled(&c, &near).as_deref(), Some("golden:r"));
    let live = live_checks(&c, Some(&g));
    assert_eq!(settled(&live, &near), None);
    assert_eq!(settled(&live, &far).as_deref(), Some("golden:r"));
    // Without a calibration it never fails fast (the verdict says `missing` at the end).
    let bare = golden(g.table.clone(), None);
    assert_eq!(
        first_settled_failure(&live_checks(&c, Some(&bare)), Some(&bare.table), &far, 4),
        None
    );
}

/// The loosening guard sees resolved widths: a bless records them; a larger k, a noisier
/// re-calibration, or `abs` turned into a wide calibrated rule then fails as loosened.
#[test]
fn a_band_wider_than_blessed_is_loosened() {
    let loosened = |v: &Verdict| {
        v.rules
            .iter()
            .filter(|r| r.rule.ends_with(":band") && r.status == RuleStatus::Regressed)
            .map(|r| r.evidence.message.clone())
            .collect::<Vec<_>>()
    };
    let gold = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
    let run = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
    let c = checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 3, "floor": 0.01}}}}"#);
    let mut g = calibrated_golden(gold.clone(), &c);
    g.rules = Some(c.clone());
    g.bands = Some(band_widths(&c, Some(&g)));
    // As blessed: nothing loosened.
    let v = judge_run(&record(&run, &c, &[]), Some(&g)).unwrap();
    assert!(loosened(&v).is_empty(), "{:?}", loosened(&v));
    // k 3 -> 4: the first window is wider (the second sits at its floor).
    let k4 = checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 4, "floor": 0.01}}}}"#);
    let v = judge_run(&record(&run, &k4, &[]), Some(&g)).unwrap();
    let l = loosened(&v);
    assert!(
        l.len() == 1 && l[0].contains("steps 1..2") && !l[0].contains("steps 3..4"),
        "{l:?}"
    );
    // A noisier re-calibration under the same rule.
    let mut noisy = g.clone();
    noisy.calibration = Some(Calibration::of_test_runs(
        &[
            table(&[("r", &[0.4, 0.4, 0.5, 0.5])]),
            table(&[("r", &[0.6, 0.6, 0.5, 0.5])]),
        ],
        &c,
    ));
    let v = judge_run(&record(&run, &c, &[]), Some(&noisy)).unwrap();
    assert!(
        loosened(&v)[0].contains("recorded when the golden was blessed"),
        "{v:?}"
    );
    // Blessed as `abs: 0.01`, now calibrated with k 100: wider than the abs band.
    let abs = checks(r#"{"golden": {"r": {"window": 2, "abs": 0.01}}}"#);
    let mut g_abs = g.clone();
    g_abs.rules = Some(abs);
    g_abs.bands = None;
    let k100 =
        checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 100, "floor": 0.01}}}}"#);
    let v = judge_run(&record(&run, &k100, &[]), Some(&g_abs)).unwrap();
    let l = loosened(&v);
    assert!(
        l.len() == 1 && l[0].contains("`abs`/`rel` band it was blessed with"),
        "{l:?}"
    );
    assert_eq!(v.outcome, Outcome::Regressed);
}

#[test]
fn a_calibrated_rule_takes_no_abs_or_rel_and_a_positive_k() {
    let bad = |j: &str| {
        serde_json::from_str::<ChecksSpec>(j)
            .unwrap_err()
            .to_string()
    };
    assert!(
        bad(r#"{"golden": {"r": {"abs": 0.1, "calibrated": {"k": 3}}}}"#)
            .contains("`calibrated` replaces `abs` and `rel`")
    );
    assert!(bad(r#"{"golden": {"r": {"calibrated": {"k": 0}}}}"#).contains("k > 0"));
    assert!(
        bad(r#"{"golden": {"r": {"calibrated": {"k": 3, "floor": -1}}}}"#).contains("floor >= 0")
    );
}

#[test]
fn an_mfu_expectation_fails_on_the_value_the_series_dropped() {
    // The runner kept MFU 1.3 at step 2 out of the series (NaN marks the hole here).
    let t = table(&[("perf/mfu/actor", &[0.3, f64::NAN, 0.3])]);
    let c = checks(r#"{"expect": ["max(perf/mfu/actor) <= 1"]}"#);
    let dropped = [DroppedValue::new(2, "perf/mfu/actor", 1.3)];
    let v = judge_run(&record(&t, &c, &dropped), None).unwrap();
    assert_eq!(v.outcome, Outcome::Regressed);
    let e = v.rule("expect:max(perf/mfu/actor) <= 1").unwrap();
    assert_eq!(e.status, RuleStatus::Regressed, "{e:?}");
    assert_eq!(e.evidence.value, Some(1.3));
    let s = v.rule("sanity:0 < perf/mfu/actor <= 1").unwrap();
    assert_eq!(s.failing_steps, vec![2]);
    // Without the dropped value the expectation would have held.
    let v = judge_run(&record(&t, &c, &[]), None).unwrap();
    assert_eq!(v.outcome, Outcome::Passed);
}

#[test]
fn replay_and_watchdog_are_rules_of_the_verdict() {
    let t = table(&[("m", &[1.0, 1.0])]);
    let c = ChecksSpec::default();
    let replay = ReplayRecord {
        cassette: "c".into(),
        recorded: 4,
        served: 4,
        mismatches: vec!["replay mismatch at POST /forward call 1".into()],
    };
    let mut r = record(&t, &c, &[]);
    r.replay = Some(&replay);
    let v = judge_run(&r, None).unwrap();
    assert_eq!(v.outcome, Outcome::Regressed);
    assert_eq!(v.rule(REPLAY_RULE).unwrap().status, RuleStatus::Regressed);
    let mut r = record(&t, &c, &[]);
    r.status = RunStatus::Aborted;
    r.reason = Some("watched metric m is NaN at step 2");
    r.failed_step = Some(2);
    let v = judge_run(&r, None).unwrap();
    let w = v.rule("watchdog:aborted").unwrap();
    assert_eq!(w.status, RuleStatus::Regressed);
    assert_eq!(w.failing_steps, vec![2]);
    assert!(w.evidence.message.contains("NaN at step 2"));
    assert_eq!(v.outcome, Outcome::Regressed);
    // A crash with no rule to judge has no verdict; a completed run always has one.
    r.status = RunStatus::Failed;
    assert_eq!(judge_run(&r, None), None);
    assert!(judge_run(&record(&t, &c, &[]), None).is_some());
}

#[test]
fn golden_presence_and_blessed_rules_are_judged() {
    let g = table(&[("critic/rewards/mean", &[0.5, 0.5]), ("x", &[1.0, 1.0])]);
    let run = table(&[
        ("critic/rewards/mean", &[0.5, 0.5]),
        ("x", &[1.0, f64::NAN]),
    ]);
    let blessed = checks(r#"{"golden": {"critic/rewards/mean": {"abs": 0.05}}}"#);
    let now = checks(r#"{"golden": {"critic/rewards/mean": {"abs": 0.2}}}"#);
    let v = judge_run(&record(&run, &now, &[]), Some(&golden(g, Some(blessed)))).unwrap();
    assert_eq!(v.outcome, Outcome::Regressed);
    let l = v.rule("loosened:golden:critic/rewards/mean").unwrap();
    assert!(
        l.evidence
            .message
            .contains("rules loosened since the golden was blessed"),
        "{}",
        l.evidence.message
    );
    let p = v.rule("presence:x").unwrap();
    assert_eq!(p.failing_steps, vec![2]);
}

/// Runs of `r` over four steps: window 1..2 spreads with the run, window 3..4 is flat; `g`
/// (a positive, skewed metric) spreads as a factor.
fn budget_runs(n: usize) -> Vec<MetricTable> {
    (0..n)
        .map(|i| {
            let d = (i as f64 - (n as f64 - 1.0) / 2.0) * 0.01;
            let f = (d * 2.0).exp();
            table(&[("r", &[0.5 + d, 0.5 + d, 0.5, 0.5]), ("g", &[f, f, f, f])])
        })
        .collect()
}

#[test]
fn a_band_without_k_is_sized_by_the_runs_budget() {
    let c = checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"floor": 0.001}}}}"#);
    let runs = budget_runs(20);
    let mut g = golden(table(&[("r", &[0.5, 0.5, 0.5, 0.5])]), None);
    let cal = Calibration::of_test_runs(&runs, &c);
    let w = cal.windows["r"][0].clone();
    g.calibration = Some(cal);
    // One window measured a spread, the flat one costs no share: m = 1, a = 0.5 × 0.01.
    let b = Budget::of(&c, Some(&g));
    assert_eq!(b.tests, 1);
    let k = crate::judge::budget::t_quantile(0.005, 20);
    assert!((b.k(20) - k).abs() < 1e-12);
    let v = judge_run(&record(&g.table, &c, &[]), Some(&g)).unwrap();
    let r = v.rule("golden:r").unwrap();
    let half = k * w.std * (1.0 + 1.0 / 20.0f64).sqrt();
    let band = r.points[0].band;
    assert!((band.hi() - w.mean - half).abs() < 1e-9, "{band:?} {half}");
    assert!(
        r.evidence
            .message
            .contains("of the run's false-alarm budget 0.01 over 1 test(s)"),
        "{}",
        r.evidence.message
    );
    // A smaller budget widens the band.
    let strict = checks(
        r#"{"alpha": 0.001, "golden": {"r": {"window": 2, "calibrated": {"floor": 0.001}}}}"#,
    );
    let v = judge_run(&record(&g.table, &strict, &[]), Some(&g)).unwrap();
    assert!(v.rule("golden:r").unwrap().points[0].band.hi() > band.hi());
    // And a budget outside (0, 0.5) is refused where the scenario is read.
    assert!(serde_json::from_str::<ChecksSpec>(r#"{"alpha": 0.5}"#).is_err());
}

#[test]
fn a_log_scale_band_is_a_factor_either_way() {
    let c = checks(r#"{"golden": {"g": {"window": 2, "calibrated": {"log": true}}}}"#);
    let runs = budget_runs(20);
    let mut g = golden(table(&[("g", &[1.0, 1.0, 1.0, 1.0])]), None);
    let cal = Calibration::of_test_runs(&runs, &c);
    let (centre, sd) = cal.windows["g"][0].log_stats().unwrap();
    g.calibration = Some(cal);
    let v = judge_run(&record(&g.table, &c, &[]), Some(&g)).unwrap();
    let r = v.rule("golden:g").unwrap();
    let band = r.points[0].band;
    let half = Budget::of(&c, Some(&g)).k(20) * sd * (1.05f64).sqrt();
    assert!((band.lo() - (centre - half).exp()).abs() < 1e-9, "{band:?}");
    assert!((band.hi() - (centre + half).exp()).abs() < 1e-9, "{band:?}");
    // A factor: as far above the centre as below, on the log scale.
    let c_lin = centre.exp();
    assert!(((band.hi() / c_lin) - (c_lin / band.lo())).abs() < 1e-9);
    assert!(r.evidence.message.contains("×÷"), "{}", r.evidence.message);
    // Five times the run's gradient norm fails it.
    let big = table(&[("g", &[5.0, 5.0, 5.0, 5.0])]);
    let v = judge_run(&record(&big, &c, &[]), Some(&g)).unwrap();
    assert_eq!(v.rule("golden:g").unwrap().status, RuleStatus::Regressed);
    // However noisy the calibration, ten times its centre fails (the band stops at a factor
    // of 10 either way): healthy runs spread over a factor of 1000 here.
    let wild: Vec<MetricTable> = (0..20)
        .map(|i| {
            let f = 10f64.powf(i as f64 / 19.0 * 3.0 - 1.5);
            table(&[("g", &[f, f, f, f])])
        })
        .collect();
    g.calibration = Some(Calibration::of_test_runs(&wild, &c));
    let v = judge_run(&record(&g.table, &c, &[]), Some(&g)).unwrap();
    let band = v.rule("golden:g").unwrap().points[0].band;
    assert!(
        (band.hi() - 10.0).abs() < 1e-9 && (band.lo() - 0.1).abs() < 1e-9,
        "{band:?}"
    );
    let v = judge_run(&record(&table(&[("g", &[10.5; 4])]), &c, &[]), Some(&g)).unwrap();
    assert_eq!(v.rule("golden:g").unwrap().status, RuleStatus::Regressed);
}

/// A run interrupted after step 2 of 4 is not judged on what it never reached: a rule that
/// failed at a step it ran stays failed, the rules about later steps (here the expectation over
/// the last steps, and the golden rule whose only miss would be its missing steps) are listed
/// as not judged, and the verdict says no grid mismatch (the stop already says so).
#[test]
fn an_interrupted_run_is_not_judged_past_its_last_step() {
    let c = checks(
        r#"{"golden": {"a": {"abs": 0.1}, "r": {"abs": 0.1}},
            "expect": ["mean(r, last 2) >= 0.9"]}"#,
    );
    let gold = table(&[("a", &[1.0, 1.0, 1.0, 1.0]), ("r", &[0.5, 0.6, 0.9, 1.0])]);
    let ran = table(&[("a", &[1.0, 2.0]), ("r", &[0.5, 0.6])]);
    let dropped: Vec<DroppedValue> = Vec::new();
    let run = RunRecord {
        status: RunStatus::Interrupted,
        ..record(&ran, &c, &dropped)
    };
    let v = judge_run(&run, Some(&golden(gold.clone(), None))).unwrap();
    let a = v.rule("golden:a").expect("a failure at step 2 stays");
    assert_eq!(
        (a.status, a.failing_steps.clone()),
        (RuleStatus::Regressed, vec![2])
    );
    let nj = v.not_judged.as_ref().expect("rules left unjudged");
    assert_eq!(nj.last_step, Some(2));
    assert!(
        nj.rules.iter().any(|r| r.starts_with("expect:")),
        "{nj:?} {:?}",
        v.rules
    );
    assert!(v.rules.iter().all(|r| !r.rule.starts_with("expect:")));
    assert_eq!(v.grid_mismatch, None);
    // The same series, completed: every rule judged.
    let done = judge_run(&record(&ran, &c, &dropped), Some(&golden(gold, None))).unwrap();
    assert!(done.not_judged.is_none());
    assert!(done.rules.iter().any(|r| r.rule.starts_with("expect:")));
}
