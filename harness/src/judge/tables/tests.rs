use super::expectation::can_still_pass;
use super::*;
use crate::judge::{judge_tables, Outcome};
use crate::model::error::ExitStatus;
use crate::model::metrics::StepRange;

fn table(metric: &str, values: &[f64]) -> MetricTable {
    MetricTable::from_columns(&[(metric, values)])
}

fn checks(json: &str) -> ChecksSpec {
    serde_json::from_str(json).unwrap()
}

fn one(run: &[f64], golden: &[f64], rule: &str) -> RuleVerdict {
    let c = checks(&format!(r#"{{"golden": {{"m": {rule}}}}}"#));
    let v = judge_tables(&table("m", run), Some(&table("m", golden)), &c);
    v.rules.into_iter().next().unwrap()
}

#[test]
fn abs_and_rel_bands_take_the_wider() {
    let r = one(&[1.04], &[1.0], r#"{"abs": 0.05}"#);
    assert_eq!(r.status, RuleStatus::Pass);
    assert!((r.evidence.margin.unwrap() - 0.01).abs() < 1e-9);
    let r = one(&[1.06], &[1.0], r#"{"abs": 0.05}"#);
    assert_eq!(r.status, RuleStatus::Regressed);
    assert_eq!(r.evidence.step_or_window.as_deref(), Some("step 1"));
    assert_eq!(r.evidence.golden, Some(1.0));
    assert!(r.evidence.margin.unwrap() < 0.0);
    // rel 10% of 1.0 is wider than abs 0.05.
    assert_eq!(
        one(&[1.06], &[1.0], r#"{"abs": 0.05, "rel": 0.1}"#).status,
        RuleStatus::Pass
    );
    // No tolerance: exact.
    assert_eq!(one(&[1.0], &[1.0], "{}").status, RuleStatus::Pass);
    assert_eq!(
        one(&[1.0000001], &[1.0], "{}").status,
        RuleStatus::Regressed
    );
}

#[test]
fn direction_only_fails_the_bad_side() {
    // The good side never fails with `improvement_limit: unlimited`.
    let hib = r#"{"rel": 0.05, "direction": "higher_is_better", "improvement_limit": "unlimited"}"#;
    assert_eq!(one(&[2.0], &[1.0], hib).status, RuleStatus::Pass);
    assert_eq!(one(&[0.9], &[1.0], hib).status, RuleStatus::Regressed);
    let lib = r#"{"rel": 0.05, "direction": "lower_is_better", "improvement_limit": "unlimited"}"#;
    assert_eq!(one(&[0.1], &[1.0], lib).status, RuleStatus::Pass);
    assert_eq!(one(&[1.1], &[1.0], lib).status, RuleStatus::Regressed);
    // Without a limit the good side is closed at the band's own width: improved, not pass.
    let hib = r#"{"rel": 0.05, "direction": "higher_is_better"}"#;
    assert_eq!(one(&[1.04], &[1.0], hib).status, RuleStatus::Pass);
    assert_eq!(one(&[2.0], &[1.0], hib).status, RuleStatus::Improved);
    // Two-sided: a rise fails too.
    assert_eq!(
        one(&[1.1], &[1.0], r#"{"rel": 0.05}"#).status,
        RuleStatus::Regressed
    );
}

/// Judge `run` against `golden` for a metric with its default direction (no `direction:`).
fn named(metric: &str, run: &[f64], golden: &[f64], rule: &str) -> RuleVerdict {
    let c = checks(&format!(r#"{{"golden": {{"{metric}": {rule}}}}}"#));
    let v = judge_tables(&table(metric, run), Some(&table(metric, golden)), &c);
    v.rules.into_iter().next().unwrap()
}

#[test]
fn default_directions_fail_the_bad_side_and_flag_the_good_one() {
    // A 43% throughput gain and a 30% faster step no longer pass silently.
    let r = named("perf/throughput", &[143.0], &[100.0], r#"{"rel": 0.1}"#);
    assert_eq!(r.status, RuleStatus::Improved);
    assert!(r
        .evidence
        .message
        .contains("bless the change if it is real"));
    assert_eq!(
        named("perf/throughput", &[85.0], &[100.0], r#"{"rel": 0.1}"#).status,
        RuleStatus::Regressed
    );
    let r = named("timing_s/step", &[0.7], &[1.0], r#"{"rel": 0.1}"#);
    assert_eq!(r.status, RuleStatus::Improved);
    assert_eq!(
        named("timing_s/step", &[1.2], &[1.0], r#"{"rel": 0.1}"#).status,
        RuleStatus::Regressed
    );
    // The same holds for an explicit direction without a limit (the mock smoke's step).
    let r = named(
        "timing_s/step",
        &[0.7],
        &[1.0],
        r#"{"rel": 0.1, "direction": "lower_is_better"}"#,
    );
    assert_eq!(r.status, RuleStatus::Improved);
    // Rewards: a drop regresses, a rise beyond twice the tolerance (the default
    // improvement limit) is an improvement to bless; one inside it passes.
    let rw = r#"{"abs": 0.05}"#;
    assert_eq!(
        named("critic/rewards/mean", &[0.4], &[0.5], rw).status,
        RuleStatus::Regressed
    );
    assert_eq!(
        named("critic/rewards/mean", &[0.61], &[0.5], rw).status,
        RuleStatus::Improved
    );
    for v in [0.54, 0.59] {
        assert_eq!(
            named("critic/rewards/mean", &[v], &[0.5], rw).status,
            RuleStatus::Pass,
            "{v}"
        );
    }
    // Memory: lower is better.
    let mem = "perf/max_memory_allocated_gb";
    assert_eq!(
        named(mem, &[12.0], &[10.0], r#"{"rel": 0.05}"#).status,
        RuleStatus::Regressed
    );
    assert_eq!(
        named(mem, &[8.0], &[10.0], r#"{"rel": 0.05}"#).status,
        RuleStatus::Improved
    );
    // Entropy and grad norm stay two-sided unless the scenario says otherwise.
    assert_eq!(
        named("actor/entropy", &[0.6], &[0.5], rw).status,
        RuleStatus::Regressed
    );
    assert_eq!(
        named(
            "actor/grad_norm",
            &[0.35],
            &[0.5],
            r#"{"abs": 0.05, "direction": "lower_is_better"}"#
        )
        .status,
        RuleStatus::Improved
    );
}

#[test]
fn improvement_limit_flags_too_good_to_be_true() {
    let rule = r#"{"rel": 0.05, "direction": "higher_is_better", "improvement_limit": 0.2}"#;
    assert_eq!(one(&[1.15], &[1.0], rule).status, RuleStatus::Pass);
    let r = one(&[1.3], &[1.0], rule);
    assert_eq!(r.status, RuleStatus::Improved);
    assert!(
        r.evidence.message.contains("bless"),
        "{}",
        r.evidence.message
    );
    let b = r.evidence.band.unwrap();
    assert_eq!((b.lo, b.hi), (Some(0.95), Some(1.2)));
    let low = r#"{"abs": 1, "direction": "lower_is_better", "improvement_limit": 0.5}"#;
    // The band is never narrower than the tolerance: 10 - max(5, 1) = 5.
    assert_eq!(one(&[4.0], &[10.0], low).status, RuleStatus::Improved);
    assert_eq!(one(&[6.0], &[10.0], low).status, RuleStatus::Pass);
    let v = judge_tables(
        &table("m", &[1.3]),
        Some(&table("m", &[1.0])),
        &checks(&format!(r#"{{"golden": {{"m": {rule}}}}}"#)),
    );
    assert_eq!(v.outcome, Outcome::Improved);
    assert_eq!(v.outcome.exit_status(), ExitStatus::CheckFailed);
}

#[test]
fn windows_compare_means_and_name_the_window() {
    // Step 3 alone is far off, but the window 1..4 mean is within 0.3.
    let run = [1.0, 1.0, 2.0, 1.0, 5.0, 5.0];
    let gold = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    let r = one(&run, &gold, r#"{"window": 4, "abs": 0.3}"#);
    assert_eq!(r.points.len(), 2);
    assert_eq!(r.points[0].status, RuleStatus::Pass);
    assert_eq!(r.points[1].at(), "steps 5..6");
    assert_eq!(r.status, RuleStatus::Regressed);
    assert_eq!(r.evidence.step_or_window.as_deref(), Some("steps 5..6"));
    assert_eq!(r.evidence.value, Some(5.0));
    assert_eq!(r.failing_steps, vec![5, 6]);
    assert!(r.evidence.message.contains("1 of 2 windows"));
}

#[test]
fn median_windows_ignore_one_spike_and_catch_a_shift() {
    // One spike (step 3) lifts the mean of 1..5 to 2.6 but not its median.
    let spike = [1.0, 1.0, 9.0, 1.0, 1.0];
    let gold = [1.0; 5];
    let mean = one(&spike, &gold, r#"{"window": 5, "abs": 0.5}"#);
    assert_eq!(mean.status, RuleStatus::Regressed);
    let median = one(
        &spike,
        &gold,
        r#"{"window": 5, "abs": 0.5, "median": true}"#,
    );
    assert_eq!(median.status, RuleStatus::Pass, "{median:?}");
    assert_eq!(median.points[0].value, Some(1.0));
    // A shift of the whole window moves the median too.
    let shifted = one(
        &[3.0, 3.0, 9.0, 3.0, 3.0],
        &gold,
        r#"{"window": 5, "abs": 0.5, "median": true}"#,
    );
    assert_eq!(shifted.status, RuleStatus::Regressed);
    assert_eq!(shifted.points[0].value, Some(3.0));
    assert_eq!(
        crate::model::checks::window_value(&[4.0, 1.0, 2.0, 3.0], true),
        2.5
    );
    assert!(crate::model::checks::window_value(&[1.0, f64::NAN], true).is_nan());
}

#[test]
fn steps_and_budget_limit_what_counts() {
    let run = [9.0, 1.0, 1.0, 9.0, 1.0];
    let gold = [1.0; 5];
    let r = one(&run, &gold, r#"{"abs": 0.1, "steps": "2.."}"#);
    assert_eq!(r.status, RuleStatus::Regressed);
    assert_eq!(r.failing_steps, vec![4]);
    let r = one(&run, &gold, r#"{"abs": 0.1, "steps": "2..", "budget": 1}"#);
    assert_eq!(r.status, RuleStatus::Pass);
    assert!(r.evidence.message.contains("within the budget"));
    assert_eq!(
        one(&run, &gold, r#"{"abs": 0.1, "steps": "2..3"}"#).status,
        RuleStatus::Pass
    );
    let r = one(&run, &gold, r#"{"abs": 0.1, "steps": "7.."}"#);
    assert_eq!(r.status, RuleStatus::Missing);
    assert!(
        r.evidence.message.contains("steps 7.."),
        "{}",
        r.evidence.message
    );
}

#[test]
fn nan_never_passes_a_golden_rule() {
    let r = one(
        &[f64::NAN],
        &[1.0],
        r#"{"abs": 1e9, "direction": "higher_is_better"}"#,
    );
    assert_eq!(r.status, RuleStatus::Regressed);
    let r = one(
        &[f64::INFINITY],
        &[1.0],
        r#"{"rel": 0.1, "direction": "higher_is_better"}"#,
    );
    assert_eq!(r.status, RuleStatus::Regressed);
    // A NaN inside a window poisons the window mean.
    let r = one(&[1.0, f64::NAN], &[1.0, 1.0], r#"{"window": 2, "abs": 10}"#);
    assert_eq!(r.status, RuleStatus::Regressed);
    // A NaN golden cannot vouch for anything either.
    let r = one(&[1.0], &[f64::NAN], r#"{"abs": 10}"#);
    assert_eq!(r.status, RuleStatus::Regressed);
}

#[test]
fn grid_mismatch_is_reported_not_a_crash() {
    let gold: Vec<f64> = (0..20).map(|i| i as f64).collect();
    let run: Vec<f64> = (0..15).map(|i| i as f64).collect();
    let c = checks(r#"{"golden": {"m": {"abs": 0.1}}}"#);
    let v = judge_tables(&table("m", &run), Some(&table("m", &gold)), &c);
    assert_eq!(v.outcome, Outcome::GridMismatch);
    let msg = v.grid_mismatch.unwrap();
    assert!(
        msg.contains("20 steps (1..20)")
            && msg.contains("15 (1..15)")
            && msg.contains("not in the run: 16..20"),
        "{msg}"
    );
    // The common steps were still judged.
    assert_eq!(v.rules[0].points.len(), 15);
    assert_eq!(v.rules[0].status, RuleStatus::Pass);
}

#[test]
fn missing_metrics_and_missing_golden() {
    let c = checks(r#"{"golden": {"m": {"abs": 0.1}}, "expect": ["max(m) < 10"]}"#);
    let v = judge_tables(&table("x", &[1.0]), Some(&table("m", &[1.0])), &c);
    assert_eq!(v.outcome, Outcome::Missing);
    assert!(v.rules[0].evidence.message.contains("the run has no `m`"));
    assert_eq!(v.rules[1].status, RuleStatus::Missing);
    let v = judge_tables(&table("m", &[1.0]), Some(&table("x", &[1.0])), &c);
    assert!(v.rules[0]
        .evidence
        .message
        .contains("the golden has no `m`"));
    // No golden: golden rules wait, expressions still judge.
    let v = judge_tables(&table("m", &[1.0]), None, &c);
    assert_eq!(v.outcome, Outcome::NoGolden);
    assert_eq!(v.rules[1].status, RuleStatus::Pass);
    let v = judge_tables(&table("m", &[11.0]), None, &c);
    assert_eq!(v.outcome, Outcome::Regressed);
}

#[test]
fn expressions_give_evidence() {
    let c = checks(
        r#"{"expect": ["mean(m, last 2) >= mean(m, first 2) + 0.2", {"expr": "all(m, finite)", "name": "finite"}]}"#,
    );
    let v = judge_tables(&table("m", &[0.0, 0.1, 0.1, 0.2]), None, &c);
    assert_eq!(v.outcome, Outcome::Regressed);
    let r = &v.rules[0];
    assert_eq!(r.status, RuleStatus::Regressed);
    assert!((r.evidence.value.unwrap() - 0.15).abs() < 1e-12);
    assert!((r.evidence.band.unwrap().lo.unwrap() - 0.25).abs() < 1e-12);
    assert!(r.evidence.margin.unwrap() < 0.0);
    assert!(
        r.evidence.message.contains("mean(m, last 2) = 0.15"),
        "{}",
        r.evidence.message
    );
    assert_eq!(v.rules[1].rule, "expect:finite");
    assert_eq!(v.rules[1].status, RuleStatus::Pass);
    let v = judge_tables(&table("m", &[0.0, f64::NAN]), None, &c);
    assert_eq!(v.rules[1].failing_steps, vec![2]);
    assert_eq!(
        v.rules[1].evidence.step_or_window.as_deref(),
        Some("step 2")
    );
}

#[test]
fn rule_spec_errors_are_clear() {
    for (json, needle) in [
        (r#"{"golden": {"m": {"abs": -1}}}"#, "`abs` must be"),
        (r#"{"golden": {"m": {"window": 0}}}"#, "at least 1"),
        (
            r#"{"golden": {"m": {"improvement_limit": 0.2}}}"#,
            "needs `direction",
        ),
        (
            r#"{"golden": {"m": {"steps": "5..2"}}}"#,
            "empty step range",
        ),
        (
            r#"{"golden": {"m": {"tolerance": 1}}}"#,
            "unknown field `tolerance`",
        ),
        (
            r#"{"golden": {"m": {"direction": "up"}}}"#,
            "unknown variant",
        ),
        (
            r#"{"expect": ["max(m) <="]}"#,
            "invalid expression `max(m) <=`: column 10",
        ),
        (
            r#"{"expect": [{"expr": "max(m) < 1", "bogus": 1}]}"#,
            "unknown field `bogus`",
        ),
        (r#"{"golden": {"m": {}, "m": {}}}"#, "two golden rules"),
        (r#"{"goldens": {}}"#, "unknown field `goldens`"),
    ] {
        let e = serde_json::from_str::<ChecksSpec>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{json}: {e}");
    }
    assert_eq!(StepRange::parse("7").unwrap().to_string(), "7");
}

#[test]
fn checks_round_trip_through_json_in_order() {
    let json = r#"{"golden":{"z/b":{"abs":0.05,"window":5,"direction":"higher_is_better"},"a/b":{"rel":0.1,"steps":"2..","budget":1,"direction":"lower_is_better","fail_fast":true}},"expect":["max(perf/mfu/actor) <= 1",{"expr":"all(g, finite)","name":"g-finite","fail_fast":true}]}"#;
    let c: ChecksSpec = serde_json::from_str(json).unwrap();
    assert_eq!(c.golden.0[0].0, "z/b");
    assert_eq!(serde_json::to_string(&c).unwrap(), json);
    assert_eq!(c.metrics(), vec!["z/b", "a/b", "perf/mfu/actor", "g"]);
}

#[test]
fn fail_fast_on_golden_rules_waits_for_complete_windows() {
    let c = checks(
        r#"{"golden": {"m": {"window": 2, "abs": 0.1, "fail_fast": true}, "n": {"abs": 0.1}}}"#,
    );
    let gold = table("m", &[1.0, 1.0, 1.0, 1.0]);
    // Step 1 alone is off but its window is not finished yet.
    let partial = table("m", &[3.0]);
    assert_eq!(first_settled_failure(&c, Some(&gold), &partial, 4), None);
    let partial = table("m", &[3.0, 1.0]);
    assert_eq!(
        first_settled_failure(&c, Some(&gold), &partial, 4).as_deref(),
        Some("golden:m")
    );
    // Without a golden nothing is settled.
    assert!(can_still_pass(c.rules()[0], None, &partial, 4));
    // A budget absorbs one bad step.
    let c = checks(r#"{"golden": {"m": {"abs": 0.1, "budget": 1, "fail_fast": true}}}"#);
    assert!(can_still_pass(
        c.rules()[0],
        Some(&gold),
        &table("m", &[3.0]),
        4
    ));
    assert!(!can_still_pass(
        c.rules()[0],
        Some(&gold),
        &table("m", &[3.0, 3.0]),
        4
    ));
}

#[test]
fn verdict_json_keeps_non_finite_numbers() {
    let r = one(
        &[f64::NAN],
        &[1.0],
        r#"{"abs": 0.1, "direction": "higher_is_better", "improvement_limit": "unlimited"}"#,
    );
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["evidence"]["value"], "NaN");
    assert_eq!(j["points"][0]["band"]["hi"], serde_json::Value::Null);
    let back: RuleVerdict = serde_json::from_value(j).unwrap();
    assert!(back.evidence.value.unwrap().is_nan());
}
