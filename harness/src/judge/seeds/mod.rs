//! Multi-seed verdicts (`rlharness run SCENARIO --seeds A..B`), in the manner of MLPerf's
//! reference convergence points: one run of a learning scenario is one draw from the
//! distribution of its seeds, and a band wide enough never to cry wolf on one draw cannot see a
//! small shift. Several seeds can: their window means are compared with the distribution the
//! golden's calibration measured (`golden calibrate --seeds`), by Student's two-sample t-test
//! with a pooled variance.
//!
//! Why the pooled t: the null hypothesis is "these seeds are draws of the calibrated
//! distribution", which has one variance on both sides, and under it the pooled t is exact for
//! normal window means, with more degrees of freedom (n + n_ref − 2) than Welch's
//! unequal-variance t, used before, whose exactness under that null is only approximate. The
//! calibration stores per window
//! what the test needs (n, mean, standard deviation), not the raw runs; window means of a
//! learning curve over 10 steps are close to normal. A bootstrap would need the calibration's
//! raw values and more than 5 seeds to say anything.
//!
//! The test is one-sided on a metric's bad side for metrics with a direction (a reward lower,
//! a step time higher), with "improved, bless if real" on the good side; two-sided otherwise.
//! Both tails of a directional window fail the verdict (exit 1), so each counts as one test:
//! the family of all window tests of a verdict is held at the run's false-alarm budget
//! (`checks.alpha`, 1% by default) by Bonferroni over m tails, each at α / m (a two-sided
//! window is one test, its p already doubled). Only windowed rules (`window` > 1) are tested: windows of a learning curve are
//! what varies with the seed; per-step rules stay with each seed's own verdict.
//!
//! The budget is spent on the `seeds:` rules alone. Each seed's own verdict (`seed:<S>`, its
//! run against the golden) still decides on what a distribution test cannot see: a crash, a
//! non-finite or extreme value, a failed expectation, presence, a hand-set band; its calibrated
//! bands, which the `seeds:` family judges better, are shown but do not gate
//! (`judge::budget`, `seed_gating_status`). `seeds_false_alarm_rate_is_held` simulates the
//! `seeds:` family; `rlharness golden audit --seeds N` the whole verdict.
//!
//! Every window's message states its power: the smallest shift of the true mean that the test
//! catches 4 times in 5 with the seeds it had (`detectable_shift`).//!
//! `power` holds the power analysis: the shift a test can catch and the seeds it takes.

mod power;

use statrs::distribution::{ContinuousCDF, StudentsT};

use super::budget::POWER;
use super::verdict::{
    seed_rule_id, seeds_rule_id, Band, Evidence, Outcome, PointCheck, RuleStatus, RuleVerdict,
    Verdict,
};
use crate::model::checks::expr::fmt_num;
use crate::model::checks::{ChecksSpec, Direction};
use crate::model::golden::calibration::PointStats;
use crate::model::golden::Golden;
use crate::model::metrics::MetricTable;

pub(crate) use crate::model::checks::parse_seed_range;
pub(crate) use power::{detectable_shift, seeds_needed};

/// What the `seeds:` family spends: the part of the run's budget tests are sized for
/// ([`super::budget::SIZED`]; the rest is held back for tails heavier than the t-test's).
pub(crate) fn family_alpha(checks: &ChecksSpec) -> f64 {
    super::budget::SIZED * checks.alpha()
}

/// The one-sided tests a window of a rule with this direction counts for in the family: a
/// directional window fails on either tail (regressed below, improved above, both exit 1); a
/// two-sided one is one test whose p is already doubled.
pub(crate) fn tails(direction: Direction) -> usize {
    match direction {
        Direction::TwoSided => 1,
        _ => 2,
    }
}

/// One seed's run as the combined verdict reads it.
#[derive(Debug, Clone)]
pub(crate) struct SeedRun<'a> {
    pub(crate) seed: u64,
    pub(crate) table: &'a MetricTable,
    /// The seed's own verdict (against the golden), as its report words it.
    pub(crate) status: RuleStatus,
    pub(crate) summary: String,
    /// Its run directory.
    pub(crate) dir: String,
}

/// Student's two-sample t-test (pooled variance) of a sample against a reference given by its
/// summary statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TTest {
    pub(crate) n: usize,
    pub(crate) mean: f64,
    pub(crate) sd: f64,
    pub(crate) t: f64,
    pub(crate) df: f64,
    /// P(T <= t): small when the sample's mean is below the reference's.
    pub(crate) p_below: f64,
}

impl TTest {
    /// `None` when either side has fewer than 2 values (no variance to test with).
    pub(crate) fn test(xs: &[f64], reference: &PointStats) -> Option<TTest> {
        let n = xs.len();
        if n < 2 || reference.n < 2 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let df = (n + reference.n - 2) as f64;
        let pooled = ((n - 1) as f64 * var + (reference.n - 1) as f64 * reference.std.powi(2)) / df;
        let se2 = pooled * (1.0 / n as f64 + 1.0 / reference.n as f64);
        let diff = mean - reference.mean;
        let (t, df, p_below) = if se2 > 0.0 {
            let t = diff / se2.sqrt();
            // df > 0 and finite here, so the distribution exists.
            let p = StudentsT::new(0.0, 1.0, df)
                .map(|d| d.cdf(t))
                .unwrap_or(f64::NAN);
            (t, df, p)
        } else {
            // No spread on either side: equal means are the same, any difference is certain.
            let t = if diff == 0.0 {
                0.0
            } else {
                diff.signum() * f64::INFINITY
            };
            let p = if diff < 0.0 {
                0.0
            } else if diff > 0.0 {
                1.0
            } else {
                0.5
            };
            (t, df, p)
        };
        Some(TTest {
            n,
            mean,
            sd: var.sqrt(),
            t,
            df,
            p_below,
        })
    }

    /// The p-value of a move to the bad side (the two-sided p for a two-sided metric), and of
    /// one to the good side (`None` for a two-sided metric).
    pub(crate) fn p_values(&self, direction: Direction) -> (f64, Option<f64>) {
        let (below, above) = (self.p_below, 1.0 - self.p_below);
        match direction {
            Direction::HigherIsBetter => (below, Some(above)),
            Direction::LowerIsBetter => (above, Some(below)),
            Direction::TwoSided => ((2.0 * below.min(above)).min(1.0), None),
        }
    }
}

/// One window of one metric: the seeds' window means against the calibration's.
struct WindowTest {
    reference: PointStats,
    values: Vec<(u64, f64)>,
    welch: Option<TTest>,
    /// The seeds whose window holds a non-finite value, with the first such step: the window
    /// fails (it is never tested without them).
    non_finite: Vec<(u64, u64)>,
}

/// A seed's value of one window (its mean, or median for a `median` rule): `None` when the
/// seed has no step there, `Err(step)` at the first non-finite value.
fn window_mean(
    table: &MetricTable,
    metric: &str,
    w: &PointStats,
    rule: &super::GoldenRule,
) -> Option<Result<f64, u64>> {
    let range = rule.steps.unwrap_or_default();
    let inside: Vec<(u64, f64)> = table
        .series(metric)
        .into_iter()
        .filter(|(s, _)| *s >= w.first && *s <= w.last && range.contains(*s))
        .collect();
    if let Some((s, _)) = inside.iter().find(|(_, v)| !v.is_finite()) {
        return Some(Err(*s));
    }
    let xs: Vec<f64> = inside.into_iter().map(|(_, v)| v).collect();
    (!xs.is_empty()).then(|| Ok(rule.window_value(&xs)))
}

/// The combined verdict of a multi-seed run: each seed's own verdict (`seed:<S>`), then per
/// golden rule the distribution test of its windows (`seeds:<metric>`).
pub(crate) fn judge_seeds(
    runs: &[SeedRun<'_>],
    checks: &ChecksSpec,
    golden: Option<&Golden>,
) -> Verdict {
    let mut rules: Vec<RuleVerdict> = runs.iter().map(seed_rule).collect();
    // Every window test first, so the Bonferroni split knows how many there are.
    let mut tests: Vec<(String, Direction, Result<Vec<WindowTest>, String>)> = Vec::new();
    // Windowed rules only: a learning curve's windows are what varies from seed to seed;
    // per-step rules (perf metrics, a schedule) stay with each seed's own bands, and testing
    // every step would split the family's budget too thin to see anything.
    for (metric, rule) in checks
        .golden
        .iter()
        .filter(|(_, r)| r.window.unwrap_or(1) > 1)
    {
        let direction = rule.resolved(metric).direction();
        let windows = window_tests(runs, metric, rule, golden);
        tests.push((metric.to_string(), direction, windows));
    }
    let m = tests
        .iter()
        .map(|(_, d, w)| w.as_ref().map_or(0, Vec::len) * tails(*d))
        .sum::<usize>()
        .max(1);
    let alpha = family_alpha(checks) / m as f64;
    for (metric, direction, windows) in tests {
        rules.push(match windows {
            Err(why) => RuleVerdict {
                rule: seeds_rule_id(&metric),
                status: RuleStatus::Missing,
                evidence: Evidence {
                    message: why,
                    ..Evidence::default()
                },
                metrics: vec![metric],
                failing_steps: Vec::new(),
                points: Vec::new(),
                fail_fast: None,
            },
            Ok(ws) => window_rule(&metric, direction, &ws, alpha, m, runs.len()),
        });
    }
    let mut verdict = Verdict {
        outcome: Outcome::Passed,
        rules,
        grid_mismatch: None,
        not_judged: None,
        exact_lane: None,
    };
    // The one precedence of outcomes (`judge::run`).
    verdict.outcome =
        super::verdict::outcome_of(&verdict, golden.is_none() && !checks.golden.is_empty());
    verdict
}

/// One seed's own verdict as a rule of the combined one (`seed:<S>`).
fn seed_rule(r: &SeedRun<'_>) -> RuleVerdict {
    RuleVerdict {
        rule: seed_rule_id(r.seed),
        status: r.status,
        evidence: Evidence {
            message: format!("seed {}: {} ({})", r.seed, r.summary, r.dir),
            ..Evidence::default()
        },
        metrics: Vec::new(),
        failing_steps: Vec::new(),
        points: Vec::new(),
        fail_fast: None,
    }
}

/// The window tests of one golden rule over the seeds' runs, one per window of the golden's
/// calibration; or why there are none (no golden, no calibration of `metric`, or a calibration
/// of one seed).
fn window_tests(
    runs: &[SeedRun<'_>],
    metric: &str,
    rule: &super::GoldenRule,
    golden: Option<&Golden>,
) -> Result<Vec<WindowTest>, String> {
    let calibration = golden.and_then(|g| g.calibration.as_ref());
    match calibration.and_then(|c| c.windows.get(metric).map(|w| (c, w))) {
        None => Err(match golden {
            None => "no golden for this scenario and hardware yet".to_string(),
            Some(_) => format!(
                "the golden has no calibration of `{metric}`: run `rlharness golden \
                 calibrate SCENARIO --seeds A..B` to measure the seeds' distribution"
            ),
        }),
        Some((cal, _))
            if cal
                .seeds
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                < 2 =>
        {
            Err(format!(
                "the golden's calibration ran one seed only ({}): a multi-seed verdict needs \
                 a calibration over seeds (`golden calibrate --seeds A..B`)",
                cal.source()
            ))
        }
        Some((_, ws)) => Ok(ws
            .iter()
            .map(|w| {
                let mut values = Vec::new();
                let mut non_finite = Vec::new();
                for r in runs {
                    match window_mean(r.table, metric, w, rule) {
                        Some(Ok(v)) => values.push((r.seed, v)),
                        Some(Err(step)) => non_finite.push((r.seed, step)),
                        None => {}
                    }
                }
                let xs: Vec<f64> = values.iter().map(|(_, v)| *v).collect();
                WindowTest {
                    reference: w.clone(),
                    welch: TTest::test(&xs, w),
                    values,
                    non_finite,
                }
            })
            .collect()),
    }
}

/// One window's test, judged.
struct WindowJudgement {
    status: RuleStatus,
    /// The p-value on the bad side.
    p_bad: f64,
    message: String,
    point: PointCheck,
}

/// The `seeds:<metric>` rule: every window of the metric tested at `alpha` (the run's budget
/// over `m` tests), decided by the first failing window, else the one nearest to failing.
fn window_rule(
    metric: &str,
    direction: Direction,
    windows: &[WindowTest],
    alpha: f64,
    m: usize,
    seeds: usize,
) -> RuleVerdict {
    let mut points = Vec::new();
    let mut failing_steps = Vec::new();
    // The deciding window: the first failing one, else the one nearest to failing.
    let mut decisive: Option<WindowJudgement> = None;
    let mut missing: Option<String> = None;
    for w in windows {
        let r = &w.reference;
        let judged = if let Some(&(seed, step)) = w.non_finite.first() {
            non_finite_window(w, metric, seed, step)
        } else if let Some(welch) = w.welch {
            judge_window(w, welch, direction, alpha, m)
        } else {
            missing.get_or_insert_with(|| {
                format!(
                    "steps {}..{}: {} of {seeds} seeds have `{metric}` there; the test needs \
                     at least 2",
                    r.first,
                    r.last,
                    w.values.len()
                )
            });
            continue;
        };
        if judged.status != RuleStatus::Pass {
            failing_steps.extend(r.first..=r.last);
        }
        let rank = |s: RuleStatus| match s {
            RuleStatus::Regressed => 3,
            RuleStatus::Improved => 2,
            _ => 1,
        };
        let replace = match &decisive {
            None => true,
            Some(d) => {
                rank(judged.status) > rank(d.status)
                    || (rank(judged.status) == rank(d.status) && judged.p_bad < d.p_bad)
            }
        };
        points.push(judged.point.clone());
        if replace {
            decisive = Some(judged);
        }
    }
    let (status, evidence) = match (decisive, missing) {
        // A failing window decides; without one, a window that could not be tested does.
        (Some(d), m) if d.status != RuleStatus::Pass || m.is_none() => (
            d.status,
            Evidence {
                step_or_window: Some(d.point.at()),
                value: d.point.value,
                golden: d.point.golden,
                band: Some(d.point.band),
                margin: Some(margin_of(&d.point)),
                message: d.message,
                ..Evidence::default()
            },
        ),
        (_, Some(why)) => (
            RuleStatus::Missing,
            Evidence {
                message: why,
                ..Evidence::default()
            },
        ),
        (_, None) => (
            RuleStatus::Missing,
            Evidence {
                message: format!("the calibration has no window of `{metric}`"),
                ..Evidence::default()
            },
        ),
    };
    RuleVerdict {
        rule: seeds_rule_id(metric),
        status,
        evidence,
        metrics: vec![metric.to_string()],
        failing_steps,
        points,
        fail_fast: None,
    }
}

/// A window where a seed's `metric` is not finite: it fails, never tested without that seed.
fn non_finite_window(w: &WindowTest, metric: &str, seed: u64, step: u64) -> WindowJudgement {
    let r = &w.reference;
    WindowJudgement {
        status: RuleStatus::Regressed,
        p_bad: 0.0,
        message: format!(
            "steps {}..{}: seed {seed} has a non-finite `{metric}` at step {step} ({} of the \
             seeds' windows are not finite): the window fails",
            r.first,
            r.last,
            w.non_finite.len()
        ),
        point: PointCheck {
            first: r.first,
            last: r.last,
            value: Some(f64::NAN),
            golden: Some(r.mean),
            band: Band { lo: None, hi: None },
            status: RuleStatus::Regressed,
            centre: None,
        },
    }
}

/// One window's t-test against its calibrated reference, at `alpha` (the run's budget over
/// `m` tests): its status, its point (with the band a seeds' mean would pass in) and its
/// message.
fn judge_window(
    w: &WindowTest,
    welch: TTest,
    direction: Direction,
    alpha: f64,
    m: usize,
) -> WindowJudgement {
    let r = &w.reference;
    let at = format!("steps {}..{}", r.first, r.last);
    let (p_bad, p_good) = welch.p_values(direction);
    let status = if p_bad < alpha {
        RuleStatus::Regressed
    } else if p_good.is_some_and(|p| p < alpha) {
        RuleStatus::Improved
    } else {
        RuleStatus::Pass
    };
    let point = PointCheck {
        first: r.first,
        last: r.last,
        value: Some(welch.mean),
        golden: Some(r.mean),
        band: passing_band(&welch, r, direction, alpha),
        status,
        centre: None,
    };
    let side = match direction {
        Direction::TwoSided => "two-sided",
        _ => "one-sided",
    };
    let seeds_text: Vec<String> = w
        .values
        .iter()
        .map(|(s, v)| format!("{s}: {}", fmt_num(*v)))
        .collect();
    let tail_alpha = match direction {
        Direction::TwoSided => alpha / 2.0,
        _ => alpha,
    };
    let power = detectable_shift(r, welch.n, tail_alpha).map_or_else(String::new, |d| {
        format!(
            "; with {} seeds it catches a shift of {} ({} σ) {:.0}% of the time",
            welch.n,
            fmt_num(d),
            if r.std > 0.0 {
                format!("{:.1}", d / r.std)
            } else {
                "-".into()
            },
            POWER * 100.0
        )
    });
    let message = format!(
        "{at}: seeds' mean {} (n {}, sd {}) against the calibrated {} (n {}, σ {}): Student's \
         t {:.2}, df {:.1}, {side} p {} {} α {} ({} of the run's budget, {}, over {m} tails){}{power}; \
         per seed {}",
        fmt_num(welch.mean),
        welch.n,
        fmt_num(welch.sd),
        fmt_num(r.mean),
        r.n,
        fmt_num(r.std),
        welch.t,
        welch.df,
        fmt_p(p_bad),
        if p_bad < alpha { "<" } else { ">=" },
        fmt_p(alpha),
        super::budget::SIZED,
        fmt_num(alpha * m as f64 / super::budget::SIZED),
        match status {
            RuleStatus::Improved => format!(
                "; better than the calibration (p {} on the good side): bless if real",
                fmt_p(p_good.unwrap_or(1.0))
            ),
            _ => String::new(),
        },
        seeds_text.join(", ")
    );
    WindowJudgement {
        status,
        p_bad,
        message,
        point,
    }
}

/// The band a seeds' mean of this size would pass in: the reference mean ± the critical
/// difference at this alpha (for the plots and the tables).
fn passing_band(welch: &TTest, r: &PointStats, direction: Direction, alpha: f64) -> Band {
    let pooled =
        ((welch.n - 1) as f64 * welch.sd.powi(2) + (r.n - 1) as f64 * r.std.powi(2)) / welch.df;
    let se = (pooled * (1.0 / welch.n as f64 + 1.0 / r.n as f64)).sqrt();
    let crit = StudentsT::new(0.0, 1.0, welch.df)
        .map(|d| match direction {
            Direction::TwoSided => d.inverse_cdf(1.0 - alpha / 2.0),
            _ => d.inverse_cdf(1.0 - alpha),
        })
        .unwrap_or(f64::INFINITY);
    let half = crit * se;
    match direction {
        Direction::HigherIsBetter => Band {
            lo: Some(r.mean - half),
            hi: None,
        },
        Direction::LowerIsBetter => Band {
            lo: None,
            hi: Some(r.mean + half),
        },
        Direction::TwoSided => Band {
            lo: Some(r.mean - half),
            hi: Some(r.mean + half),
        },
    }
}

/// The distance of a window's seeds' mean from the test's limit (positive inside).
fn margin_of(p: &PointCheck) -> f64 {
    let v = p.value.unwrap_or(f64::NAN);
    (v - p.band.lo()).min(p.band.hi() - v)
}

fn fmt_p(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

#[cfg(test)]
mod tests;
