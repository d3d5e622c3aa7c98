//! Judging: golden rules point by point, expressions over the run, the overall outcome, and
//! the strict match against a scenario's expected verdict.

use super::verdict::{
    Band, Evidence, Outcome, PointCheck, RuleStatus, RuleVerdict, RunOutcome, Verdict,
};
use crate::checks::expr::{fmt_num, CmpOp, EvalIssue, Expr};
use crate::checks::{
    ChecksSpec, Direction, Expectation, ExpectedOutcome, ExpectedVerdict, GoldenRule,
    ImprovementLimit, RuleRef,
};
use crate::golden::Golden;
use crate::metrics::MetricTable;
use crate::rundir::RunStatus;

/// Judge a run against its golden (if any) and the scenario's checks.
pub fn judge(run: &MetricTable, golden: Option<&Golden>, checks: &ChecksSpec) -> Verdict {
    judge_tables(run, golden.map(|g| &g.table), checks)
}

/// `judge` against any reference series: a golden's, or another run's (`rlharness compare`).
pub(crate) fn judge_tables(
    run: &MetricTable,
    golden: Option<&MetricTable>,
    checks: &ChecksSpec,
) -> Verdict {
    let mut rules: Vec<RuleVerdict> = checks
        .golden
        .iter()
        .map(|(metric, rule)| judge_golden(metric, rule, run, golden))
        .collect();
    rules.extend(checks.expect.iter().map(|e| judge_expectation(e, run)));
    let grid_mismatch = grid_mismatch_of(run, golden, checks);
    let has = |s: RuleStatus| rules.iter().any(|r| r.status == s);
    let no_golden = golden.is_none() && !checks.golden.is_empty();
    let expect_missing = rules
        .iter()
        .any(|r| r.status == RuleStatus::Missing && r.rule.starts_with("expect:"));
    let outcome = if has(RuleStatus::Regressed) {
        Outcome::Regressed
    } else if no_golden && !expect_missing {
        Outcome::NoGolden
    } else if has(RuleStatus::Missing) {
        Outcome::Missing
    } else if grid_mismatch.is_some() {
        Outcome::GridMismatch
    } else if has(RuleStatus::Improved) {
        Outcome::Improved
    } else {
        Outcome::Passed
    };
    Verdict {
        outcome,
        rules,
        grid_mismatch,
        exact_lane: None,
    }
}

/// One golden rule judged against the reference series, or `missing` without one.
pub(crate) fn judge_golden(
    metric: &str,
    rule: &GoldenRule,
    run: &MetricTable,
    golden: Option<&MetricTable>,
) -> RuleVerdict {
    match golden {
        Some(g) => judge_golden_rule(metric, rule, run, g),
        None => RuleVerdict {
            rule: format!("golden:{metric}"),
            status: RuleStatus::Missing,
            evidence: Evidence {
                message: "no golden for this scenario and hardware yet".into(),
                ..Evidence::default()
            },
            metrics: vec![metric.to_string()],
            failing_steps: vec![],
            points: vec![],
            fail_fast: rule.fail_fast.then_some(true),
        },
    }
}

/// How the run's steps and the reference's differ, when golden rules compare them.
pub(crate) fn grid_mismatch_of(
    run: &MetricTable,
    golden: Option<&MetricTable>,
    checks: &ChecksSpec,
) -> Option<String> {
    match golden {
        Some(g) if !checks.golden.is_empty() => grid_mismatch(run, g),
        _ => None,
    }
}

/// `1..5, 7, 9..10`: step lists stay readable in messages.
pub(crate) fn ranges(steps: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            steps[i].to_string()
        } else {
            format!("{}..{}", steps[i], steps[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

fn grid_mismatch(run: &MetricTable, golden: &MetricTable) -> Option<String> {
    let (r, g) = (run.steps(), golden.steps());
    if r == g {
        return None;
    }
    let only_g: Vec<u64> = g.iter().copied().filter(|s| !r.contains(s)).collect();
    let only_r: Vec<u64> = r.iter().copied().filter(|s| !g.contains(s)).collect();
    let mut msg = format!(
        "the golden has {} steps ({}), the run has {} ({})",
        g.len(),
        ranges(&g),
        r.len(),
        ranges(&r)
    );
    if !only_g.is_empty() {
        msg.push_str(&format!("; not in the run: {}", ranges(&only_g)));
    }
    if !only_r.is_empty() {
        msg.push_str(&format!("; not in the golden: {}", ranges(&only_r)));
    }
    msg.push_str("; rules compare the common steps");
    Some(msg)
}

/// A one-sided rule's good side, when no `improvement_limit` is written: this many times its
/// tolerance. A change past the tolerance the good way is as rare by chance as one the bad way;
/// flagging it at the same distance would double a verdict's false alarms for a change nobody
/// minds, while one past twice the tolerance is still "too good to be true" (a metric
/// computed wrong, a step skipped) long before it looks plausible.
pub(crate) const DEFAULT_IMPROVEMENT_FACTOR: f64 = 2.0;

impl GoldenRule {
    fn tolerance(&self, golden: f64) -> f64 {
        self.abs
            .unwrap_or(0.0)
            .max(self.rel.unwrap_or(0.0) * golden.abs())
    }

    /// The pass region around a golden value; outside it a value is regressed or improved.
    /// On a one-sided rule's good side the edge is the improvement limit: twice the
    /// tolerance when none is written (`DEFAULT_IMPROVEMENT_FACTOR`), `improvement_limit·|golden|`
    /// (never narrower than the tolerance), or open with `unlimited`.
    pub(crate) fn band(&self, golden: f64) -> Band {
        let tol = self.tolerance(golden);
        let good = match self.improvement_limit {
            None => Some(DEFAULT_IMPROVEMENT_FACTOR * tol),
            Some(ImprovementLimit::Fraction(l)) => Some((l * golden.abs()).max(tol)),
            Some(ImprovementLimit::Unlimited) => None,
        };
        let band = match self.direction() {
            Direction::TwoSided => Band::new(golden - tol, golden + tol),
            Direction::HigherIsBetter => Band {
                lo: Some(golden - tol),
                hi: good.map(|l| golden + l),
            },
            Direction::LowerIsBetter => Band {
                lo: good.map(|l| golden - l),
                hi: Some(golden + tol),
            },
        };
        match self.keep_above {
            Some(f) => Band {
                lo: Some(
                    band.lo
                        .map_or(f * golden.abs(), |l| l.max(f * golden.abs())),
                ),
                ..band
            },
            None => band,
        }
    }

    /// A calibrated window's band: `half` around `centre`, with the rule's direction,
    /// improvement limit and floor.
    fn band_around(&self, centre: f64, half: f64) -> Band {
        GoldenRule {
            abs: Some(half),
            rel: None,
            window_bands: None,
            ..self.clone()
        }
        .band(centre)
    }

    /// The golden's windows (inside `steps`) that the calibration has no band for, when the
    /// rule is calibrated: the rule changed since `golden calibrate`.
    fn uncalibrated_windows(&self, metric: &str, golden: &MetricTable) -> Vec<String> {
        let Some(bands) = &self.window_bands else {
            return Vec::new();
        };
        let range = self.steps.unwrap_or_default();
        let steps: Vec<u64> = golden
            .series(metric)
            .into_iter()
            .map(|(s, _)| s)
            .filter(|s| range.contains(*s))
            .collect();
        let w = self.window.unwrap_or(1).max(1) as usize;
        steps
            .chunks(w)
            .map(|c| (c[0], c[c.len() - 1]))
            .filter(|(a, b)| !bands.iter().any(|x| x.first == *a && x.last == *b))
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}..{b}")
                }
            })
            .collect()
    }

    fn classify(&self, value: f64, golden: f64, band: &Band) -> RuleStatus {
        if !value.is_finite() || !golden.is_finite() {
            return RuleStatus::Regressed;
        }
        let below = value < band.lo();
        let above = value > band.hi();
        match (self.direction(), below, above) {
            (_, false, false) => RuleStatus::Pass,
            (Direction::TwoSided, _, _) => RuleStatus::Regressed,
            (Direction::HigherIsBetter, true, _) => RuleStatus::Regressed,
            (Direction::HigherIsBetter, _, true) => RuleStatus::Improved,
            (Direction::LowerIsBetter, _, true) => RuleStatus::Regressed,
            (Direction::LowerIsBetter, true, _) => RuleStatus::Improved,
        }
    }

    /// Compare the steps both series have (inside `steps`), one point per step or window.
    /// With `complete_through`, a window is only compared once all its golden steps are done.
    fn points(
        &self,
        metric: &str,
        run: &MetricTable,
        golden: &MetricTable,
        complete_through: Option<u64>,
    ) -> Vec<PointCheck> {
        let range = self.steps.unwrap_or_default();
        let g: Vec<(u64, f64)> = golden
            .series(metric)
            .into_iter()
            .filter(|(s, _)| range.contains(*s))
            .collect();
        let r = run.series(metric);
        let w = self.window.unwrap_or(1).max(1) as usize;
        let mut out = Vec::new();
        // The windows are the golden's: a step the run lacks leaves its window with fewer
        // points (compared over the steps both have), and never shifts the later windows.
        for gc in g.chunks(w) {
            let chunk: Vec<(u64, f64, f64)> = gc
                .iter()
                .filter_map(|(s, gv)| {
                    r.binary_search_by_key(s, |(rs, _)| *rs)
                        .ok()
                        .map(|i| (*s, r[i].1, *gv))
                })
                .collect();
            if chunk.is_empty() {
                continue;
            }
            // During a run, a window is compared once all its golden steps are done.
            if let Some(done) = complete_through {
                if gc.last().is_some_and(|(s, _)| *s > done) || chunk.len() < gc.len() {
                    continue;
                }
            }
            let (first, last) = (gc[0].0, gc[gc.len() - 1].0);
            let value = self.window_value(&chunk.iter().map(|c| c.1).collect::<Vec<_>>());
            let gold = self.window_value(&chunk.iter().map(|c| c.2).collect::<Vec<_>>());
            let calibrated = self.window_bands.as_ref().and_then(|b| {
                b.iter()
                    .find(|x| x.first == first && x.last == last)
                    .copied()
            });
            let (band, centre) = match calibrated {
                Some(b) => (self.band_around(b.centre, b.half), Some(b.centre)),
                // Not calibrated, or a window the calibration lacks (the rule says so, see
                // `uncalibrated_windows`): around the golden.
                None => (self.band(gold), None),
            };
            out.push(PointCheck {
                first,
                last,
                value: Some(value),
                golden: Some(gold),
                band,
                status: self.classify(value, gold, &band),
                centre,
            });
        }
        out
    }
}

/// Judge one golden rule of `metric`: the run's points (steps or windows) against the
/// golden's band, failing when more than the rule's budget fall outside it.
fn judge_golden_rule(
    metric: &str,
    rule: &GoldenRule,
    run: &MetricTable,
    golden: &MetricTable,
) -> RuleVerdict {
    // The metric's default direction applies where the scenario does not give one.
    let rule = &rule.resolved(metric);
    let id = format!("golden:{metric}");
    let missing = |message: String| RuleVerdict {
        rule: id.clone(),
        status: RuleStatus::Missing,
        evidence: Evidence {
            message,
            ..Evidence::default()
        },
        metrics: vec![metric.to_string()],
        failing_steps: vec![],
        points: vec![],
        fail_fast: rule.fail_fast.then_some(true),
    };
    if golden.series(metric).is_empty() {
        return missing(format!("the golden has no `{metric}`"));
    }
    if run.series(metric).is_empty() {
        return missing(format!("the run has no `{metric}`"));
    }
    let lacking = rule.uncalibrated_windows(metric, golden);
    if !lacking.is_empty() {
        let have: Vec<String> = rule
            .window_bands
            .iter()
            .flatten()
            .map(|b| format!("{}..{}", b.first, b.last))
            .collect();
        return missing(format!(
            "the golden's calibration has no band for the window(s) {} of `{metric}` (it \
             measured {}): the rule's `window` or `steps` changed since `rlharness golden \
             calibrate`; run it again",
            lacking.join(", "),
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            }
        ));
    }
    let points = rule.points(metric, run, golden, None);
    if points.is_empty() {
        let within = rule
            .steps
            .map(|s| format!(" in steps {s}"))
            .unwrap_or_default();
        return missing(format!(
            "the run and the golden share no step of `{metric}`{within}"
        ));
    }
    let count = |s: RuleStatus| points.iter().filter(|p| p.status == s).count() as u64;
    let (regressed, improved) = (count(RuleStatus::Regressed), count(RuleStatus::Improved));
    let status = if regressed > rule.budget {
        RuleStatus::Regressed
    } else if improved > rule.budget {
        RuleStatus::Improved
    } else {
        RuleStatus::Pass
    };
    // The point that speaks for the status: the worst failing one, or the closest call.
    let worst = points
        .iter()
        .filter(|p| status == RuleStatus::Pass || p.status == status)
        .min_by(|a, b| a.margin().total_cmp(&b.margin()))
        .unwrap_or(&points[0]);
    let message = golden_rule_message(rule, status, &points, worst, (regressed, improved));
    let failing_steps = points
        .iter()
        .filter(|p| p.status != RuleStatus::Pass)
        .flat_map(|p| {
            let mut steps = run.steps();
            steps.retain(|s| *s >= p.first && *s <= p.last);
            steps
        })
        .collect();
    RuleVerdict {
        rule: id.clone(),
        status,
        evidence: Evidence {
            step_or_window: Some(worst.at()),
            value: worst.value,
            golden: worst.golden,
            band: Some(worst.band),
            margin: Some(worst.margin()),
            message,
        },
        metrics: vec![metric.to_string()],
        failing_steps,
        points,
        fail_fast: rule.fail_fast.then_some(true),
    }
}

/// A golden rule's evidence message: how many of its points (`steps` or `windows`) fell
/// outside the band against its budget, and the `worst` point for a failing rule.
fn golden_rule_message(
    rule: &GoldenRule,
    status: RuleStatus,
    points: &[PointCheck],
    worst: &PointCheck,
    (regressed, improved): (u64, u64),
) -> String {
    let unit = if rule.window.unwrap_or(1) > 1 {
        "windows"
    } else {
        "steps"
    };
    let budget = if rule.budget > 0 {
        format!(" (budget {})", rule.budget)
    } else {
        String::new()
    };
    match status {
        RuleStatus::Pass if regressed + improved == 0 => {
            format!("all {} {unit} within the band", points.len())
        }
        RuleStatus::Pass => format!(
            "{} of {} {unit} outside the band, within the budget of {}",
            regressed + improved,
            points.len(),
            rule.budget
        ),
        RuleStatus::Regressed => format!(
            "{regressed} of {} {unit} regressed{budget}; worst at {}: {} against {}",
            points.len(),
            worst.at(),
            fmt_num(worst.value.unwrap_or(f64::NAN)),
            reference_text(worst),
        ),
        _ => format!(
            "{improved} of {} {unit} improved beyond the limit{budget}; bless the change if it \
             is real; largest at {}: {} against {}",
            points.len(),
            worst.at(),
            fmt_num(worst.value.unwrap_or(f64::NAN)),
            reference_text(worst),
        ),
    }
}

/// What a point was compared against: the golden, or a calibrated band's centre.
fn reference_text(p: &PointCheck) -> String {
    let golden = fmt_num(p.golden.unwrap_or(f64::NAN));
    match p.centre {
        Some(c) => format!("the calibration mean {} (golden {golden})", fmt_num(c)),
        None => format!("golden {golden}"),
    }
}

pub(crate) fn judge_expectation(e: &Expectation, run: &MetricTable) -> RuleVerdict {
    let mut v = RuleVerdict {
        rule: e.id(),
        status: RuleStatus::Pass,
        evidence: Evidence::default(),
        metrics: e.expr.metrics(),
        failing_steps: vec![],
        points: vec![],
        fail_fast: e.fail_fast.then_some(true),
    };
    match e.expr.evaluate(run) {
        Err(EvalIssue::Missing(m)) => {
            v.status = RuleStatus::Missing;
            v.evidence.message = m;
        }
        Ok(ev) => {
            v.status = if ev.holds {
                RuleStatus::Pass
            } else {
                RuleStatus::Regressed
            };
            if let (Expr::Cmp(_, op, _), Some(l), Some(r)) = (&e.expr, ev.lhs, ev.rhs) {
                v.evidence.value = Some(l);
                v.evidence.band = Some(match op {
                    CmpOp::Lt | CmpOp::Le => Band {
                        lo: None,
                        hi: Some(r),
                    },
                    CmpOp::Gt | CmpOp::Ge => Band {
                        lo: Some(r),
                        hi: None,
                    },
                    CmpOp::Eq | CmpOp::Ne => Band::new(r, r),
                });
                v.evidence.margin = Some(match op {
                    CmpOp::Lt | CmpOp::Le => r - l,
                    CmpOp::Gt | CmpOp::Ge => l - r,
                    CmpOp::Eq => -(l - r).abs(),
                    CmpOp::Ne => (l - r).abs(),
                });
            }
            if let Some(s) = ev.step {
                v.evidence.step_or_window = Some(format!("step {s}"));
                if !ev.holds {
                    v.failing_steps.push(s);
                }
            }
            let verb = if ev.holds { "holds" } else { "does not hold" };
            v.evidence.message = if ev.trace.is_empty() {
                verb.to_string()
            } else {
                format!("{verb}: {}", ev.trace.join("; "))
            };
        }
    }
    v
}

/// Fail fast: can `rule` still pass when the run reaches `total_steps`, given its steps so far?
/// `false` only when the steps already seen decide the failure, so the runner may stop.
fn can_still_pass(
    rule: RuleRef<'_>,
    golden: Option<&MetricTable>,
    partial: &MetricTable,
    total_steps: u64,
) -> bool {
    match rule {
        RuleRef::Expect(e) => e.expr.can_still_hold(partial, total_steps),
        RuleRef::Golden(metric, r) => {
            let Some(g) = golden else { return true };
            let r = &r.resolved(metric);
            let done = partial.last_step().unwrap_or(0);
            let points = r.points(metric, partial, g, Some(done));
            let count = |s: RuleStatus| points.iter().filter(|p| p.status == s).count() as u64;
            count(RuleStatus::Regressed) <= r.budget && count(RuleStatus::Improved) <= r.budget
        }
    }
}

/// The first rule marked `fail_fast` that can no longer pass, if any: the runner's stop signal.
pub(crate) fn first_settled_failure(
    checks: &ChecksSpec,
    golden: Option<&MetricTable>,
    partial: &MetricTable,
    total_steps: u64,
) -> Option<String> {
    checks
        .rules()
        .into_iter()
        .filter(|r| r.fail_fast())
        .find(|r| !can_still_pass(*r, golden, partial, total_steps))
        .map(|r| r.id())
}

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
    // The watchdog's rule restates how the run ended (a fail-fast stop names the rule
    // that caused it): the rules that caused it are what a scenario lists.
    let unexpected: Vec<&str> = v
        .failing()
        .filter(|r| !r.rule.starts_with("watchdog:"))
        .filter(|r| !expected.rules.iter().any(|n| names_rule(n, &r.rule)))
        .filter(|r| {
            !expected
                .may_also_fail
                .iter()
                .any(|n| names_rule(n, &r.rule))
        })
        .map(|r| r.rule.as_str())
        .collect();
    if !unexpected.is_empty() {
        return Err(format!(
            "rules failed that the scenario does not expect: {}",
            unexpected.join(", ")
        ));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitStatus;
    use crate::metrics::StepRange;

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
        let hib =
            r#"{"rel": 0.05, "direction": "higher_is_better", "improvement_limit": "unlimited"}"#;
        assert_eq!(one(&[2.0], &[1.0], hib).status, RuleStatus::Pass);
        assert_eq!(one(&[0.9], &[1.0], hib).status, RuleStatus::Regressed);
        let lib =
            r#"{"rel": 0.05, "direction": "lower_is_better", "improvement_limit": "unlimited"}"#;
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
            crate::checks::window_value(&[4.0, 1.0, 2.0, 3.0], true),
            2.5
        );
        assert!(crate::checks::window_value(&[1.0, f64::NAN], true).is_nan());
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
            why.contains("expected verdict regressed, got passed"),
            "{why}"
        );
        // An extra failing rule is a mismatch.
        let both = verdict_with(
            Outcome::Regressed,
            &[("golden:critic/rewards/mean", 3), ("expect:max(m) <= 1", 2)],
        );
        let why = match_expected(Some(&both), &done(), &e).unwrap_err();
        assert!(why.contains("expect:max(m) <= 1"), "{why}");
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
            .contains("step 3"));
        let passed = verdict_with(Outcome::Passed, &[]);
        let why = match_expected(Some(&passed), &done(), &e).unwrap_err();
        assert!(why.contains("completed with verdict passed"), "{why}");
        // A crash where a regression was declared is a mismatch.
        let e = expected(r#"{"outcome": "regressed"}"#);
        let crash = RunOutcome {
            status: RunStatus::Failed,
            reason: Some("backend exited 1".into()),
            step: None,
        };
        assert!(match_expected(None, &crash, &e)
            .unwrap_err()
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
            why.contains("needs a completed run") && why.contains("aborted"),
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
            .contains("HTTP 503"));
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
}
