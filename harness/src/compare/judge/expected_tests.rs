//! `expected_verdict` matched strictly: outcomes, rules, reasons, steps and run failures.

use super::*;
use crate::checks::ExpectedVerdict;
use crate::compare::verdict::{Outcome, RunOutcome};
use crate::rundir::RunStatus;

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
        r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean"], "may_also_fail": ["expect:max(m) <= 1"]}"#,
    );
    assert_eq!(match_expected(Some(&both), &done(), &e6), Ok(()));
    assert_eq!(match_expected(Some(&regressed), &done(), &e6), Ok(()));
    let e7 = expected(
        r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean"], "may_also_fail": ["seed:1"]}"#,
    );
    assert!(match_expected(Some(&both), &done(), &e7).is_err());
    // A bare metric name would also stand for its presence, stability and seeds rules, a
    // pattern for any rule: both are refused when the scenario is read.
    for bad in [
        r#"{"outcome": "regressed", "rules": ["critic/rewards/mean"]}"#,
        r#"{"outcome": "regressed", "rules": ["golden:m"], "may_also_fail": ["seed:*"]}"#,
        r#"{"outcome": "regressed", "rules": ["reward:m"]}"#,
        r#"{"outcome": "regressed", "may_also_fail": ["seed:1"]}"#,
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
