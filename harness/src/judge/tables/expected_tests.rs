//! `expected_verdict` matched strictly: outcomes, rules, reasons, steps and run failures.

use super::*;
use crate::judge::verdict::{Band, Outcome, PointCheck, RunOutcome, Verdict};
use crate::model::checks::ExpectedVerdict;
use crate::model::rundir::RunStatus;

fn verdict_with(outcome: Outcome, failing: &[(&str, u64)]) -> Verdict {
    let mut rules: Vec<RuleVerdict> = ["golden:critic/rewards/mean", "expect:max(m) <= 1"]
        .iter()
        .map(|id| RuleVerdict {
            rule: id.to_string(),
            status: RuleStatus::Pass,
            evidence: Evidence::default(),
            metrics: vec![],
            failing_steps: vec![],
            points: vec![],
            fail_fast: None,
        })
        .collect();
    for (id, step) in failing {
        let r = rules.iter_mut().find(|r| r.rule == *id).unwrap();
        r.status = RuleStatus::Regressed;
        r.failing_steps = vec![*step];
        r.evidence.message = "3 of 4 windows regressed".into();
    }
    Verdict {
        outcome,
        rules,
        grid_mismatch: None,
        not_judged: None,
        exact_lane: None,
    }
}

fn done() -> RunOutcome {
    RunOutcome {
        status: RunStatus::Completed,
        reason: None,
        step: None,
    }
}

fn expected(json: &str) -> ExpectedVerdict {
    serde_json::from_str(json).unwrap()
}

#[test]
fn expected_verdict_is_strict() {
    let regressed = verdict_with(Outcome::Regressed, &[("golden:critic/rewards/mean", 3)]);
    let passed = verdict_with(Outcome::Passed, &[]);
    let e = expected(r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean"]}"#);
    assert_eq!(match_expected(Some(&regressed), &done(), &e), Ok(()));
    // An unexpected pass is a mismatch.
    let why = match_expected(Some(&passed), &done(), &e).unwrap_err();
    assert!(
        why.0.contains("expected verdict regressed, got passed"),
        "{why}"
    );
    // An extra failing rule is a mismatch.
    let both = verdict_with(
        Outcome::Regressed,
        &[("golden:critic/rewards/mean", 3), ("expect:max(m) <= 1", 2)],
    );
    let why = match_expected(Some(&both), &done(), &e).unwrap_err();
    assert!(why.0.contains("expect:max(m) <= 1"), "{why}");
    // Rules are named by their full ids, whitespace aside.
    let e2 = expected(
        r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean", "expect:max(m)  <=  1"], "step": 2}"#,
    );
    assert_eq!(match_expected(Some(&both), &done(), &e2), Ok(()));
    let e3 = expected(r#"{"outcome": "regressed", "step": 3}"#);
    assert!(match_expected(Some(&both), &done(), &e3).is_err());
    let e4 = expected(r#"{"outcome": "regressed", "rules": ["golden:nope"]}"#);
    assert!(match_expected(Some(&regressed), &done(), &e4)
        .unwrap_err()
        .0
        .contains("not a rule"));
    let e5 = expected(r#"{"outcome": "regressed", "reason": "WINDOWS"}"#);
    assert_eq!(match_expected(Some(&regressed), &done(), &e5), Ok(()));
    // `may_also_fail` lets the named rules fail or pass.
    let e6 = expected(
        r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean"], "may_also_fail": [{"rule": "expect:max(m) <= 1", "reason": "r"}]}"#,
    );
    assert_eq!(match_expected(Some(&both), &done(), &e6), Ok(()));
    assert_eq!(match_expected(Some(&regressed), &done(), &e6), Ok(()));
    let e7 = expected(
        r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean"], "may_also_fail": [{"rule": "expect:other", "reason": "r"}]}"#,
    );
    assert!(match_expected(Some(&both), &done(), &e7)
        .unwrap_err()
        .0
        .contains("`expect:other` is not a rule of the scenario"));
    // A bare metric name would also stand for its presence, stability and seeds rules, a
    // pattern for any rule: both are refused when the scenario is read.
    for bad in [
        r#"{"outcome": "regressed", "rules": ["critic/rewards/mean"]}"#,
        r#"{"outcome": "regressed", "rules": ["golden:m"], "may_also_fail": [{"rule": "seed:*", "reason": "r"}]}"#,
        r#"{"outcome": "regressed", "rules": ["reward:m"]}"#,
        r#"{"outcome": "regressed", "may_also_fail": [{"rule": "seed:1/expect:e", "reason": "r"}]}"#,
        r#"{"outcome": "regresed"}"#,
    ] {
        assert!(
            serde_json::from_str::<ExpectedVerdict>(bad).is_err(),
            "{bad}"
        );
    }
    let why = serde_json::from_str::<ExpectedVerdict>(
        r#"{"outcome": "regressed", "rules": ["critic/rewards/mean"]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(why.contains("not a full rule id"), "{why}");
}

#[test]
fn expected_run_failure_matches_reason_and_step() {
    let e = expected(r#"{"outcome": "failed", "reason": "NaN in actor/grad_norm", "step": 3}"#);
    let crashed = RunOutcome {
        status: RunStatus::Aborted,
        reason: Some("watchdog: nan in actor/grad_norm at step 3".into()),
        step: Some(3),
    };
    assert_eq!(match_expected(None, &crashed, &e), Ok(()));
    let wrong_step = RunOutcome {
        step: Some(4),
        ..crashed.clone()
    };
    assert!(match_expected(None, &wrong_step, &e)
        .unwrap_err()
        .0
        .contains("step 3"));
    let passed = verdict_with(Outcome::Passed, &[]);
    let why = match_expected(Some(&passed), &done(), &e).unwrap_err();
    assert!(why.0.contains("completed with verdict passed"), "{why}");
    // A crash where a regression was declared is a mismatch.
    let e = expected(r#"{"outcome": "regressed"}"#);
    let crash = RunOutcome {
        status: RunStatus::Failed,
        reason: Some("backend exited 1".into()),
        step: None,
    };
    assert!(match_expected(None, &crash, &e)
        .unwrap_err()
        .0
        .contains("backend exited 1"));
}

#[test]
fn expected_pass_needs_a_completed_run() {
    let passed = verdict_with(Outcome::Passed, &[]);
    let e = expected(r#"{"outcome": "passed"}"#);
    assert_eq!(match_expected(Some(&passed), &done(), &e), Ok(()));
    let aborted = RunOutcome {
        status: RunStatus::Aborted,
        reason: Some("watched metric actor/grad_norm is NaN at step 3".into()),
        step: Some(3),
    };
    let why = match_expected(Some(&passed), &aborted, &e).unwrap_err();
    assert!(
        why.0.contains("needs a completed run") && why.0.contains("aborted"),
        "{why}"
    );
}

#[test]
fn expected_failure_needs_a_reason() {
    for (json, needle) in [
        (
            r#"{"outcome": "failed"}"#,
            "`outcome: failed` needs a `reason`",
        ),
        (
            r#"{"outcome": "failed", "reason": "  "}"#,
            "`outcome: failed` needs a `reason`",
        ),
        (
            r#"{"outcome": "failed", "reason": "x", "rules": ["m"]}"#,
            "use `reason`",
        ),
        (
            r#"{"outcome": "regressed", "reason": ""}"#,
            "must not be empty",
        ),
        (
            r#"{"outcome": "failed", "reason": "x", "bogus": 1}"#,
            "unknown field",
        ),
    ] {
        let e = serde_json::from_str::<ExpectedVerdict>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{json}: {e}");
    }
    // With a reason, only the failure named matches.
    let e = expected(r#"{"outcome": "failed", "reason": "HTTP 503"}"#);
    let other = RunOutcome {
        status: RunStatus::Failed,
        reason: Some("/step: HTTP 404: job 2 not found".into()),
        step: Some(2),
    };
    assert!(match_expected(None, &other, &e)
        .unwrap_err()
        .0
        .contains("HTTP 503"));
}

/// A verdict of `rules`, regressed when one of them fails.
fn verdict_of(rules: Vec<RuleVerdict>) -> Verdict {
    let outcome = if rules.iter().any(|r| r.status != RuleStatus::Pass) {
        Outcome::Regressed
    } else {
        Outcome::Passed
    };
    Verdict {
        outcome,
        rules,
        grid_mismatch: None,
        not_judged: None,
        exact_lane: None,
    }
}

fn rule(id: &str, status: RuleStatus) -> RuleVerdict {
    RuleVerdict {
        rule: id.to_string(),
        status,
        evidence: Evidence {
            message: format!("{id}: {status:?}"),
            ..Evidence::default()
        },
        metrics: vec![],
        failing_steps: vec![],
        points: vec![],
        fail_fast: None,
    }
}

/// A band rule with one point per `(value, centre)`, each against golden 1.0 and the band
/// [0.9, 1.1] (a calibrated band's centre where `centre` is given).
fn band_rule(id: &str, values: &[(f64, Option<f64>)]) -> RuleVerdict {
    let band = Band::new(0.9, 1.1);
    let points: Vec<PointCheck> = values
        .iter()
        .enumerate()
        .map(|(i, &(v, centre))| PointCheck {
            first: i as u64 + 1,
            last: i as u64 + 1,
            value: Some(v),
            golden: Some(1.0),
            band,
            status: if (0.9..=1.1).contains(&v) {
                RuleStatus::Pass
            } else {
                RuleStatus::Regressed
            },
            centre,
        })
        .collect();
    let failing: Vec<u64> = points
        .iter()
        .filter(|p| p.status != RuleStatus::Pass)
        .map(|p| p.first)
        .collect();
    let status = if failing.is_empty() {
        RuleStatus::Pass
    } else {
        RuleStatus::Regressed
    };
    RuleVerdict {
        failing_steps: failing,
        points,
        ..rule(id, status)
    }
}

#[test]
fn a_margin_bounds_how_far_past_its_band_a_rule_fails() {
    let e = expected(
        r#"{"outcome": "regressed", "rules": ["golden:m"], "margin": {"rule": "golden:m", "within": 0.5}}"#,
    );
    // 1.12 is 0.02 past the upper edge, a fifth of the band's tolerance (0.1): within 0.5.
    let near = verdict_of(vec![band_rule("golden:m", &[(1.0, None), (1.12, None)])]);
    assert_eq!(match_expected(Some(&near), &done(), &e), Ok(()));
    // 0.84 is 0.06 below the lower edge: 0.6 of the tolerance, past the margin; the farthest
    // failing point is the one measured.
    let far = verdict_of(vec![band_rule("golden:m", &[(1.12, None), (0.84, None)])]);
    let why = match_expected(Some(&far), &done(), &e).unwrap_err();
    assert!(
        why.0.contains("0.600 times its tolerance")
            && why.0.contains("(at step 2)")
            && why.0.contains("margin (0.5)"),
        "{why}"
    );
    // A calibrated band is measured from its centre: 1.12 against the centre 1.05 is 0.02 past
    // an edge 0.05 away, 0.4 of the tolerance.
    let calibrated = verdict_of(vec![band_rule("golden:m", &[(1.12, Some(1.05))])]);
    assert_eq!(match_expected(Some(&calibrated), &done(), &e), Ok(()));
    let tight = expected(
        r#"{"outcome": "regressed", "rules": ["golden:m"], "margin": {"rule": "golden:m", "within": 0.3}}"#,
    );
    assert!(match_expected(Some(&calibrated), &done(), &tight).is_err());
    // A non-finite value is infinitely far past.
    let mut nan = verdict_of(vec![band_rule("golden:m", &[(f64::NAN, None)])]);
    nan.outcome = Outcome::Regressed;
    nan.rules[0].status = RuleStatus::Regressed;
    nan.rules[0].points[0].status = RuleStatus::Regressed;
    let why = match_expected(Some(&nan), &done(), &e).unwrap_err();
    assert!(why.0.contains("inf times"), "{why}");
    // A rule that did not fail has no margin: the verdict does not match.
    let passed = verdict_of(vec![
        band_rule("golden:m", &[(1.05, None)]),
        rule("exact:every series bit for bit", RuleStatus::Regressed),
    ]);
    let e2 = expected(
        r#"{"outcome": "regressed", "rules": ["golden:m", "exact:every series bit for bit"], "margin": {"rule": "golden:m", "within": 0.5}}"#,
    );
    let why = match_expected(Some(&passed), &done(), &e2).unwrap_err();
    assert!(why.0.contains("`golden:m` to fail, but it passed"), "{why}");
}

#[test]
fn a_seeds_margin_is_measured_against_the_tests_limit() {
    // A multi-seed test's evidence: the seeds' mean 0.64 against the calibrated mean 0.70, the
    // limit the test put on it 0.66 (one-sided): 0.02 past a limit 0.04 away, 0.5.
    let seeds = RuleVerdict {
        points: vec![PointCheck {
            first: 11,
            last: 20,
            value: Some(0.64),
            golden: Some(0.70),
            band: Band {
                lo: Some(0.66),
                hi: None,
            },
            status: RuleStatus::Regressed,
            centre: None,
        }],
        ..rule("seeds:m", RuleStatus::Regressed)
    };
    let v = verdict_of(vec![seeds]);
    let within = |w: f64| {
        expected(&format!(
            r#"{{"outcome": "regressed", "rules": ["seeds:m"], "margin": {{"rule": "seeds:m", "within": {w}}}}}"#
        ))
    };
    assert_eq!(match_expected(Some(&v), &done(), &within(0.55)), Ok(()));
    let why = match_expected(Some(&v), &done(), &within(0.45)).unwrap_err();
    assert!(
        why.0.contains("0.500 times") && why.0.contains("steps 11..20"),
        "{why}"
    );
    // A rule whose evidence has no band (the exact lane) cannot be measured.
    let exact = verdict_of(vec![rule("golden:x", RuleStatus::Regressed)]);
    let e = expected(
        r#"{"outcome": "regressed", "rules": ["golden:x"], "margin": {"rule": "golden:x", "within": 1}}"#,
    );
    let why = match_expected(Some(&exact), &done(), &e).unwrap_err();
    assert!(why.0.contains("records no band"), "{why}");
}

#[test]
fn a_margin_is_declared_for_a_rule_with_a_tolerance() {
    for (json, needle) in [
        (
            r#"{"outcome": "regressed", "rules": ["exact:every series bit for bit"], "margin": {"rule": "exact:every series bit for bit", "within": 1}}"#,
            "has no tolerance",
        ),
        (
            r#"{"outcome": "regressed", "rules": ["golden:m"], "margin": {"rule": "golden:n", "within": 1}}"#,
            "is not one of `rules`",
        ),
        (
            r#"{"outcome": "regressed", "rules": ["golden:m"], "margin": {"rule": "golden:m", "within": 0}}"#,
            "`margin.within`: 0 is not a positive number",
        ),
        (
            r#"{"outcome": "regressed", "rules": ["golden:m"], "margin": {"rule": "m", "within": 1}}"#,
            "not a full rule id",
        ),
        (
            r#"{"outcome": "regressed", "rules": ["golden:m"], "margin": {"rule": "golden:m", "within": 1, "by": 2}}"#,
            "unknown field `by`",
        ),
        (
            r#"{"outcome": "passed", "margin": {"rule": "golden:m", "within": 1}}"#,
            "is not one of `rules`",
        ),
    ] {
        let e = serde_json::from_str::<ExpectedVerdict>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{json}: {e}");
    }
    // It round-trips (run.json and seeds.json store it).
    let e = expected(
        r#"{"outcome": "regressed", "rules": ["golden:m"], "margin": {"rule": "golden:m", "within": 0.25}, "may_also_fail": [{"rule": "seed:3/expect:e", "reason": "r"}]}"#,
    );
    let back: ExpectedVerdict = serde_json::from_value(serde_json::to_value(&e).unwrap()).unwrap();
    assert_eq!(back, e);
}

#[test]
fn may_also_fail_names_a_rule_inside_a_seed_with_a_reason() {
    for (entries, needle) in [
        (
            r#"["seed:105"]"#,
            "`seed:105` names a whole seed, which would absorb any failure inside it",
        ),
        (
            r#"[{"rule": "seed:105", "reason": "r"}]"#,
            "`seed:105` names a whole seed",
        ),
        (r#"["expect:e"]"#, "`expect:e` gives no reason"),
        (
            r#"[{"rule": "seed:105/expect:e", "reason": " "}]"#,
            "needs a `reason`",
        ),
        (
            r#"[{"rule": "seed:105/expect:e"}]"#,
            "missing field `reason`",
        ),
        (r#"[{"rule": "seed:105/*", "reason": "r"}]"#, "is a pattern"),
        (
            r#"[{"rule": "seed:105/reward-converges", "reason": "r"}]"#,
            "not a full rule id",
        ),
        (
            r#"[{"rule": "seed:x/expect:e", "reason": "r"}]"#,
            "`seed:x` is not a seed",
        ),
        (
            r#"[{"rule": "seed:105/seeds:m", "reason": "r"}]"#,
            "has no `seeds` rule",
        ),
        (
            r#"[{"rule": "seed:105/expect:e", "reason": "r", "why": "r"}]"#,
            "unknown field `why`",
        ),
    ] {
        let json = format!(
            r#"{{"outcome": "regressed", "rules": ["seeds:m"], "may_also_fail": {entries}}}"#
        );
        let e = serde_json::from_str::<ExpectedVerdict>(&json)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{json}: {e}");
    }
    let e = expected(
        r#"{"outcome": "regressed", "rules": ["seeds:m"], "may_also_fail": [{"rule": "seed:105/expect:reward-converges", "reason": "the lowest seed"}]}"#,
    );
    let combined = |inside: &[&str]| {
        let mut seed = rule("seed:105", RuleStatus::Regressed);
        seed.evidence.failing_rules = inside.iter().map(|s| s.to_string()).collect();
        verdict_of(vec![
            rule("seed:101", RuleStatus::Pass),
            seed,
            rule("seeds:m", RuleStatus::Regressed),
        ])
    };
    // Only the named rule failed inside seed 105: as declared (and so is seed 105 passing).
    assert_eq!(
        match_expected(Some(&combined(&["expect:reward-converges"])), &done(), &e),
        Ok(())
    );
    let mut passing = combined(&[]);
    passing.rules[1].status = RuleStatus::Pass;
    assert_eq!(match_expected(Some(&passing), &done(), &e), Ok(()));
    // Another rule failed inside it: named in the mismatch.
    let why = match_expected(
        Some(&combined(&["expect:reward-converges", "presence:m"])),
        &done(),
        &e,
    )
    .unwrap_err();
    assert!(
        why.0.contains("seed:105 (inside it presence:m;")
            && why.0.contains("names expect:reward-converges only"),
        "{why}"
    );
    // A seed failing on no rule of its own (a grid mismatch) is not the named failure.
    let why = match_expected(Some(&combined(&[])), &done(), &e).unwrap_err();
    assert!(why.0.contains("no rule of its own verdict failed"), "{why}");
    // Another seed is not covered, nor is a seed the run does not have.
    let mut other = combined(&[]);
    other.rules[0].status = RuleStatus::Regressed;
    other.rules[0].evidence.failing_rules = vec!["expect:reward-converges".into()];
    other.rules[1].status = RuleStatus::Pass;
    let why = match_expected(Some(&other), &done(), &e).unwrap_err();
    assert!(why.0.contains("does not expect: seed:101"), "{why}");
    let e9 = expected(
        r#"{"outcome": "regressed", "rules": ["seeds:m"], "may_also_fail": [{"rule": "seed:9/expect:e", "reason": "r"}]}"#,
    );
    let why = match_expected(Some(&combined(&[])), &done(), &e9).unwrap_err();
    assert!(
        why.0.contains("`seed:9` is not a rule of the scenario"),
        "{why}"
    );
}
