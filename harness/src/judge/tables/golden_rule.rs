//! A golden rule judged point by point (steps or windows) against the golden's band.

use crate::judge::verdict::{Band, Evidence, PointCheck, RuleStatus, RuleVerdict};
use crate::model::checks::expr::fmt_num;
use crate::model::checks::{Direction, GoldenRule, ImprovementLimit, WindowBand};
use crate::model::metrics::MetricTable;

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
    /// improvement limit and floor; a log-scale band's edges are `exp` of the edges around
    /// `centre` on the log scale (its `keep_above` applies to the value, not to its log).
    fn band_around(&self, b: &WindowBand) -> Band {
        if !b.log {
            return GoldenRule {
                abs: Some(b.half),
                rel: None,
                window_bands: None,
                ..self.clone()
            }
            .band(b.centre);
        }
        let log_band = GoldenRule {
            abs: Some(b.half),
            rel: None,
            keep_above: None,
            window_bands: None,
            ..self.clone()
        }
        .band(b.centre);
        let band = Band {
            lo: Some(log_band.lo.map_or(0.0, f64::exp)),
            hi: log_band.hi.map(f64::exp),
        };
        match self.keep_above {
            Some(f) => Band {
                lo: band.lo.map(|l| l.max(f * b.centre.exp())),
                ..band
            },
            None => band,
        }
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
    pub(super) fn points(
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
                Some(b) => (
                    self.band_around(&b),
                    Some(if b.log { b.centre.exp() } else { b.centre }),
                ),
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
pub(super) fn judge_golden_rule(
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
            ..Evidence::default()
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
