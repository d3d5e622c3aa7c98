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
mod tests;
