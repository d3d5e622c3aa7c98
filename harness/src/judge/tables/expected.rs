//! The strict match of a run's result against its scenario's `expected_verdict`.

use crate::judge::verdict::{Band, Outcome, RuleStatus, RuleVerdict, RunOutcome, Verdict};
use crate::model::checks::{ExpectedOutcome, ExpectedVerdict};
use crate::model::rundir::RunStatus;

/// Why a run's result is not the verdict its scenario declared (`expected_verdict`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ExpectedMismatch(pub(crate) String);

fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Does a name from `expected_verdict` denote this rule? Only its full id does
/// (whitespace-insensitive): the spec refuses bare names and patterns.
fn names_rule(name: &str, rule: &str) -> bool {
    norm(rule) == norm(name)
}

/// Strict match of the actual result against the declared one: an unexpected pass is a
/// mismatch too. `Err` says why it does not match.
pub(crate) fn match_expected(
    actual: Option<&Verdict>,
    run: &RunOutcome,
    expected: &ExpectedVerdict,
) -> Result<(), ExpectedMismatch> {
    why_not_expected(actual, run, expected).map_err(ExpectedMismatch)
}

/// Why the actual result is not the declared one, in words.
fn why_not_expected(
    actual: Option<&Verdict>,
    run: &RunOutcome,
    expected: &ExpectedVerdict,
) -> Result<(), String> {
    if expected.outcome == ExpectedOutcome::Failed {
        return match_expected_failure(actual, run, expected);
    }
    if !matches!(run.status, RunStatus::Completed | RunStatus::Aborted) {
        return Err(format!(
            "expected verdict {:?}, but the run ended {}{}",
            expected.outcome,
            run.status.as_str(),
            run.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    // A pass is a completed run: one stopped early (fail fast, a non-finite watched metric)
    // may have judged well on its few steps, but it did not do what the scenario promises.
    if expected.outcome == ExpectedOutcome::Passed && run.status != RunStatus::Completed {
        return Err(format!(
            "expected verdict passed, which needs a completed run, but the run ended {}{}",
            run.status.as_str(),
            run.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    let Some(v) = actual else {
        return Err("expected a verdict, but the run was not judged".into());
    };
    let want = match expected.outcome {
        ExpectedOutcome::Passed => Outcome::Passed,
        ExpectedOutcome::Regressed => Outcome::Regressed,
        ExpectedOutcome::Improved => Outcome::Improved,
        ExpectedOutcome::Missing => Outcome::Missing,
        ExpectedOutcome::GridMismatch => Outcome::GridMismatch,
        ExpectedOutcome::Failed => unreachable!("handled above"),
    };
    if v.outcome != want {
        let failing: Vec<&str> = v.failing().map(|r| r.rule.as_str()).collect();
        return Err(format!(
            "expected verdict {}, got {}{}",
            want.as_str(),
            v.outcome.as_str(),
            if failing.is_empty() {
                String::new()
            } else {
                format!(" (failing: {})", failing.join(", "))
            }
        ));
    }
    if !expected.rules.is_empty() {
        match_expected_rules(v, expected)?;
    }
    if let Some(m) = &expected.margin {
        match_margin(v, &m.rule, m.within)?;
    }
    match_expected_evidence(v, run, expected)
}

/// Case-insensitive substring test, as `expected_verdict.reason` is matched.
fn contains_ci(hay: &str, needle: &str) -> bool {
    hay.to_lowercase().contains(&needle.to_lowercase())
}

/// `match_expected` for a scenario that expects the run itself to fail: it must have failed
/// (aborted, timed out), with the declared reason and at the declared step.
fn match_expected_failure(
    actual: Option<&Verdict>,
    run: &RunOutcome,
    expected: &ExpectedVerdict,
) -> Result<(), String> {
    if !matches!(
        run.status,
        RunStatus::Failed | RunStatus::Aborted | RunStatus::TimedOut
    ) {
        return Err(format!(
            "expected the run to fail, but it {}",
            match (run.status, actual) {
                (RunStatus::Completed, Some(v)) =>
                    format!("completed with verdict {}", v.outcome.as_str()),
                (s, _) => format!("ended {}", s.as_str()),
            }
        ));
    }
    if let Some(want) = &expected.reason {
        let got = run.reason.as_deref().unwrap_or("");
        if !contains_ci(got, want) {
            return Err(format!(
                "expected a failure reason containing `{want}`, got `{got}`"
            ));
        }
    }
    if let Some(want) = expected.step {
        if run.step != Some(want) {
            return Err(format!(
                "expected the run to fail at step {want}, it failed at {}",
                run.step
                    .map(|s| format!("step {s}"))
                    .unwrap_or_else(|| "no known step".into())
            ));
        }
    }
    Ok(())
}

/// The declared failing rules against the verdict's: each must be a rule of the scenario that
/// failed, and no other rule may fail unless `may_also_fail` allows it.
fn match_expected_rules(v: &Verdict, expected: &ExpectedVerdict) -> Result<(), String> {
    for name in &expected.rules {
        match v.rules.iter().find(|r| names_rule(name, &r.rule)) {
            None => {
                return Err(format!(
                    "expected rule `{name}` is not a rule of the scenario"
                ))
            }
            Some(r) if r.status == RuleStatus::Pass => {
                return Err(format!("expected rule `{}` to fail, but it passed", r.rule))
            }
            Some(_) => {}
        }
    }
    for entry in &expected.may_also_fail {
        let id = entry
            .in_seed()
            .map_or(entry.rule.as_str(), |(seed, _)| seed);
        if !v.rules.iter().any(|r| names_rule(id, &r.rule)) {
            return Err(format!(
                "`may_also_fail` names `{}`, but `{id}` is not a rule of the scenario",
                entry.rule
            ));
        }
    }
    // The watchdog's rule restates how the run ended (a fail-fast stop names the rule
    // that caused it): the rules that caused it are what a scenario lists.
    let unexpected: Vec<String> = v
        .failing()
        .filter(|r| !r.rule.starts_with("watchdog:"))
        .filter(|r| !expected.rules.iter().any(|n| names_rule(n, &r.rule)))
        .filter_map(|r| unexpected_failure(r, expected))
        .collect();
    if !unexpected.is_empty() {
        return Err(format!(
            "rules failed that the scenario does not expect: {}",
            unexpected.join(", ")
        ));
    }
    Ok(())
}

/// Why a failing rule that `rules` does not list is not allowed by `may_also_fail`, or `None`
/// when it is: named by its full id, or a seed's own verdict (`seed:<S>`) inside which every
/// failing rule is named (`seed:<S>/<rule id>`).
fn unexpected_failure(r: &RuleVerdict, expected: &ExpectedVerdict) -> Option<String> {
    let entries = &expected.may_also_fail;
    if entries.iter().any(|e| names_rule(&e.rule, &r.rule)) {
        return None;
    }
    let named: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.in_seed())
        .filter(|(seed, _)| names_rule(seed, &r.rule))
        .map(|(_, inner)| inner)
        .collect();
    if named.is_empty() {
        return Some(r.rule.clone());
    }
    let inside: Vec<&str> = r
        .evidence
        .failing_rules
        .iter()
        .map(String::as_str)
        .filter(|id| !id.starts_with("watchdog:"))
        .collect();
    if inside.is_empty() {
        return Some(format!(
            "{} (no rule of its own verdict failed: {})",
            r.rule, r.evidence.message
        ));
    }
    let others: Vec<&str> = inside
        .iter()
        .copied()
        .filter(|id| !named.iter().any(|n| names_rule(n, id)))
        .collect();
    (!others.is_empty()).then(|| {
        format!(
            "{} (inside it {}; `may_also_fail` names {} only)",
            r.rule,
            others.join(", "),
            named.join(", ")
        )
    })
}

/// A near-threshold self-test's `margin`: `rule` failed, and no further past its threshold than
/// `within` times its tolerance ([`overshoot`]).
fn match_margin(v: &Verdict, rule: &str, within: f64) -> Result<(), String> {
    let Some(r) = v.rules.iter().find(|r| names_rule(rule, &r.rule)) else {
        return Err(format!(
            "`margin` names `{rule}`, not a rule of the scenario"
        ));
    };
    if r.status == RuleStatus::Pass {
        return Err(format!(
            "`margin`: `{}` did not fail, so it lies past no threshold",
            r.rule
        ));
    }
    let Some((over, at)) = overshoot(r) else {
        return Err(format!(
            "`margin`: `{}` records no band to measure a margin against",
            r.rule
        ));
    };
    if over > within {
        return Err(format!(
            "`{}` failed {over:.3} times its tolerance past its threshold (at {at}), more than \
             its declared margin ({within}): the plant is no longer near the threshold",
            r.rule
        ));
    }
    Ok(())
}

/// How far a failing rule lies past its threshold, in units of its tolerance, and where: over
/// its failing points (its evidence, for a rule without points), the largest distance of the
/// value past the band's edge, divided by the distance from the band's centre (a calibrated
/// band's centre, else the golden) to that edge. A non-finite value is infinitely far. `None`
/// when a failing point records no band, value or centre to measure with.
fn overshoot(r: &RuleVerdict) -> Option<(f64, String)> {
    let failing: Vec<_> = r
        .points
        .iter()
        .filter(|p| p.status != RuleStatus::Pass)
        .collect();
    let measured: Vec<(f64, String)> = if failing.is_empty() {
        let e = &r.evidence;
        let at = e
            .step_or_window
            .clone()
            .unwrap_or_else(|| "its worst point".into());
        vec![(past_edge(e.value?, e.golden?, &e.band?)?, at)]
    } else {
        failing
            .iter()
            .map(|p| {
                Some((
                    past_edge(p.value?, p.centre.or(p.golden)?, &p.band)?,
                    p.at(),
                ))
            })
            .collect::<Option<_>>()?
    };
    measured.into_iter().max_by(|a, b| a.0.total_cmp(&b.0))
}

/// How far `value` lies past the edge of `band`, over the distance from `centre` to that edge
/// (0 inside the band).
fn past_edge(value: f64, centre: f64, band: &Band) -> Option<f64> {
    if !value.is_finite() {
        return Some(f64::INFINITY);
    }
    let (past, tolerance) = if value < band.lo() {
        (band.lo() - value, centre - band.lo())
    } else if value > band.hi() {
        (value - band.hi(), band.hi() - centre)
    } else {
        return Some(0.0);
    };
    (tolerance.is_finite() && tolerance > 0.0).then(|| past / tolerance)
}

/// The declared reason (in a failing rule's evidence or the run's reason) and first failing
/// step against the verdict's.
fn match_expected_evidence(
    v: &Verdict,
    run: &RunOutcome,
    expected: &ExpectedVerdict,
) -> Result<(), String> {
    if let Some(want) = &expected.reason {
        let found = v.failing().any(|r| contains_ci(&r.evidence.message, want))
            || run.reason.as_deref().is_some_and(|r| contains_ci(r, want));
        if !found {
            return Err(format!("no failing rule's evidence mentions `{want}`"));
        }
    }
    if let Some(want) = expected.step {
        let first = v
            .failing()
            .filter_map(|r| r.failing_steps.iter().min().copied())
            .min()
            .or(run.step);
        if first != Some(want) {
            return Err(format!(
                "expected the first failing step to be {want}, got {}",
                first
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "none".into())
            ));
        }
    }
    Ok(())
}
