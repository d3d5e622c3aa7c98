//! One false-alarm budget per run. A scenario's verdict states `checks.alpha` (α_run, 1 % by
//! default): the probability that a healthy run fails it. Every calibrated test of a single run
//! draws on it: each window of a calibrated golden rule and of a calibrated stability rule
//! whose calibration measured some spread is one test, and Bonferroni gives each the share
//! α_run / (2 m): half the budget sizes the bands, half is held back ([`SIZED`]). A window's band is the two-sided prediction interval for one more run at that
//! share: the calibration's mean ± t(1 − a/2, n − 1) × σ × √(1 + 1/n), σ and n the window's
//! own (exact for normal window values, whatever n, so a small calibration widens its bands
//! instead of failing more often). A window whose calibration measured no spread at all (an
//! on-policy KL that is exactly 0 in every run) is judged by its floor and costs no share.
//!
//! What does not draw on it: rules with a band written by hand (`abs`/`rel`, or a calibrated
//! rule with a hand-set `k`), which have no measured noise to size a share from; presence,
//! expectations and sanity rules, which a healthy run never fails; the exact lane, which is
//! deterministic. `rlharness golden audit` measures the whole verdict's rate, those included.
//!
//! A multi-seed verdict spends the whole budget on its `seeds:` family (`judge::seeds`);
//! each seed's own calibrated bands are then shown but do not gate (`seed_gating_status`).

use statrs::distribution::{ContinuousCDF, StudentsT};

use super::stability;
use super::verdict::{PointCheck, RuleStatus, RuleVerdict};
use crate::model::checks::{ChecksSpec, GoldenRule};
use crate::model::golden::calibration::{Calibration, PointStats};
use crate::model::golden::Golden;

/// The part of α_run the calibrated bands are sized for; the rest is held back for what a
/// band's normal theory cannot see: window values whose far tails are heavier than a normal's
/// (a median of five steps is a mixture), and the rules a budget does not size (hand-set
/// bands). `golden audit` measures the whole verdict against all of α_run.
pub(crate) const SIZED: f64 = 0.5;

/// The power the judge states for what it catches: 80% (a calibrated band's smallest caught
/// move, a multi-seed t-test's detectable shift, the audit's caught moves).
pub(crate) const POWER: f64 = 0.8;

/// The run's budget and the calibrated tests that share it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Budget {
    pub(crate) alpha: f64,
    /// Calibrated windows that draw on it (at least 1 where any does).
    pub(crate) tests: usize,
}

impl Budget {
    /// The budget of a single run of `checks` against `golden` (its calibration decides which
    /// windows are tests).
    pub(crate) fn of(checks: &ChecksSpec, golden: Option<&Golden>) -> Budget {
        let tests = match (golden, golden.and_then(|g| g.calibration.as_ref())) {
            (Some(g), Some(cal)) => budget_windows(checks, &g.table.columns(), cal).len(),
            _ => 0,
        };
        Budget {
            alpha: checks.alpha(),
            tests,
        }
    }

    /// The budget of a single run of `checks` against a golden with this calibration (the
    /// golden's metrics taken as those the calibration measured).
    pub(crate) fn of_calibration(checks: &ChecksSpec, cal: &Calibration) -> Budget {
        let columns: Vec<String> = cal.steps.keys().cloned().collect();
        Budget {
            alpha: checks.alpha(),
            tests: budget_windows(checks, &columns, cal).len(),
        }
    }

    /// One test's share: [`SIZED`] × α_run / m.
    pub(crate) fn per_test(&self) -> f64 {
        SIZED * self.alpha / self.tests.max(1) as f64
    }

    /// The band's multiplier of σ × √(1 + 1/n) for a window calibrated from `n` runs.
    pub(crate) fn k(&self, n: usize) -> f64 {
        t_quantile(self.per_test(), n)
    }
}

/// The two-sided Student's t quantile t(1 − a/2, n − 1); infinite below 2 runs (no spread is
/// known, so nothing can be sized).
pub(crate) fn t_quantile(a: f64, n: usize) -> f64 {
    if n < 2 {
        return f64::INFINITY;
    }
    StudentsT::new(0.0, 1.0, (n - 1) as f64)
        .map(|d| d.inverse_cdf(1.0 - a / 2.0))
        .unwrap_or(f64::INFINITY)
}

/// Whether a rule's calibrated band is sized by the budget (calibrated, no hand-set `k`).
pub(crate) fn in_budget(rule: &GoldenRule) -> bool {
    rule.calibrated.is_some_and(|c| c.k.is_none())
}

/// Whether a calibrated window is a test: its calibration measured a spread, and its floor does
/// not decide its band (a window that is the same in every run, or whose spread is far under
/// its floor, such as the sampler-vs-trainer mismatch of a healthy run, is judged by its floor
/// alone and costs no share).
pub(crate) fn is_test(w: &PointStats, floor: f64) -> bool {
    w.std > 0.0 && floor < FLOOR_DECIDES * w.std
}

/// A floor this many σ wide decides a window's band whatever the budget's share.
pub(crate) const FLOOR_DECIDES: f64 = 10.0;

/// Every window that draws on a single run's budget: (metric, window) of the calibrated
/// golden rules without a hand-set `k` and of the calibrated default stability rules, where
/// the calibration measured a spread. `columns`: the golden's metrics.
pub(crate) fn budget_windows<'c>(
    checks: &ChecksSpec,
    columns: &[String],
    cal: &'c Calibration,
) -> Vec<(String, &'c PointStats)> {
    let stab = stability::rules(checks, columns, |m| cal.sigma(m).is_some());
    checks
        .golden
        .iter()
        .chain(stab.iter())
        .filter(|(_, r)| in_budget(r))
        .flat_map(|(m, r)| {
            let floor = r.calibrated.map_or(0.0, |c| c.floor);
            cal.windows
                .get(m)
                .into_iter()
                .flatten()
                .filter(move |w| is_test(w, floor))
                .map(move |w| (m.to_string(), w))
        })
        .collect()
}

/// The smallest number of calibration runs whose bands are within 10 % of those an endless
/// calibration would give at this per-test share (t(1 − a/2, n − 1) × √(1 + 1/n) ≤ 1.1 ×
/// z(1 − a/2)), at least `min` and at most `max`. What `golden calibrate` runs by default.
pub(crate) fn runs_for(per_test: f64, min: usize, max: usize) -> usize {
    let z = statrs::distribution::Normal::standard().inverse_cdf(1.0 - per_test / 2.0);
    (min.max(2)..=max)
        .find(|n| t_quantile(per_test, *n) * (1.0 + 1.0 / *n as f64).sqrt() <= 1.1 * z)
        .unwrap_or(max)
}

/// The fewest and the most runs `golden calibrate` picks without `--runs` or `--seeds`.
pub(crate) const MIN_RUNS: usize = 10;
pub(crate) const MAX_RUNS: usize = 60;

/// How much wider than an endless calibration's a band may be before the calibration is
/// called too small for its windows.
pub(crate) const TOO_WIDE: f64 = 1.25;

/// Why a calibration of `runs` runs is too small for `budget` (its bands more than
/// [`TOO_WIDE`] times an endless calibration's), or `None`.
pub(crate) fn too_small(budget: Budget, runs: usize) -> Option<String> {
    let w = widening(budget.per_test(), runs);
    (budget.tests > 0 && w > TOO_WIDE).then(|| {
        format!(
            "{runs} calibration runs cannot gate {} window(s) at a false-alarm budget of {}: k \
             would be {:.1}, {:.0}% wider than an endless calibration's; calibrate >= {} runs \
             (`rlharness golden calibrate SCENARIO` with no count)",
            budget.tests,
            budget.alpha,
            budget.k(runs),
            (w - 1.0) * 100.0,
            runs_for(budget.per_test(), MIN_RUNS, MAX_RUNS)
        )
    })
}

/// How much wider than an endless calibration's a window's band is with `n` runs.
pub(crate) fn widening(per_test: f64, n: usize) -> f64 {
    let z = statrs::distribution::Normal::standard().inverse_cdf(1.0 - per_test / 2.0);
    t_quantile(per_test, n) * (1.0 + 1.0 / n.max(1) as f64).sqrt() / z
}

/// How far from a calibrated band's centre a value is a hard failure whatever the budget: more
/// than this many times the centre, or less than its inverse (a positive centre only).
pub(crate) const EXTREME: f64 = 10.0;

/// Whether a failing rule of one seed's own verdict decides that seed in a multi-seed verdict.
/// Every rule does, except a calibrated band (every failing point has a calibration's centre)
/// whose failing values are all finite and within [`EXTREME`] of the centre: the `seeds:`
/// family spends the run's budget on those windows, better than one seed's band can.
pub(crate) fn gates_in_a_seed(rule: &RuleVerdict) -> bool {
    if rule.status == RuleStatus::Pass {
        return false;
    }
    if !(rule.status == RuleStatus::Regressed || rule.status == RuleStatus::Improved) {
        return true;
    }
    let failing: Vec<&PointCheck> = rule
        .points
        .iter()
        .filter(|p| p.status != RuleStatus::Pass)
        .collect();
    let statistical = |p: &&PointCheck| match (p.centre, p.value) {
        (Some(c), Some(v)) if v.is_finite() => c <= 0.0 || (v <= EXTREME * c && v >= c / EXTREME),
        _ => false,
    };
    failing.is_empty() || !failing.iter().all(statistical)
}

/// A standard normal draw (Box–Muller).
pub(crate) fn standard_normal(rng: &mut impl rand::Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quantile_is_students() {
        // t(0.975, 9) = 2.262, t(0.995, 24) = 2.797.
        assert!((t_quantile(0.05, 10) - 2.262157).abs() < 1e-5);
        assert!((t_quantile(0.01, 25) - 2.796940).abs() < 1e-5);
        assert!(t_quantile(0.01, 1).is_infinite());
    }

    #[test]
    fn the_default_runs_grow_with_the_number_of_tests() {
        let few = runs_for(0.01 / 2.0, 10, 60);
        let many = runs_for(0.01 / 20.0, 10, 60);
        assert!(few <= many, "{few} {many}");
        assert!((20..=50).contains(&many), "{many}");
        assert!(widening(0.01 / 20.0, many) <= 1.1);
        assert!(widening(0.01 / 20.0, 5) > 1.5);
    }

    /// The band of a window from n normal runs holds one more run at the per-test rate: the
    /// simulated rate of a fresh run outside a fresh calibration's band is the share.
    #[test]
    fn a_band_holds_its_share() {
        use rand::SeedableRng;
        let normal = standard_normal;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (a, n, draws) = (0.05, 8, 40_000);
        let k = t_quantile(a, n) * (1.0 + 1.0 / n as f64).sqrt();
        let mut out = 0;
        for _ in 0..draws {
            let xs: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
            let y = normal(&mut rng);
            if (y - mean).abs() > k * sd {
                out += 1;
            }
        }
        let rate = out as f64 / draws as f64;
        let se = (a * (1.0 - a) / draws as f64).sqrt();
        assert!((rate - a).abs() < 4.0 * se, "{rate}");
    }
}

#[cfg(test)]
mod seed_gating_tests {
    use super::*;
    use crate::judge::verdict::{Band, Evidence};

    fn rule(points: Vec<(Option<f64>, Option<f64>, RuleStatus)>) -> RuleVerdict {
        RuleVerdict {
            rule: "golden:r".into(),
            status: RuleStatus::Regressed,
            evidence: Evidence::default(),
            metrics: vec!["r".into()],
            failing_steps: vec![1],
            points: points
                .into_iter()
                .map(|(value, centre, status)| PointCheck {
                    first: 1,
                    last: 5,
                    value,
                    golden: Some(1.0),
                    band: Band::new(0.9, 1.1),
                    status,
                    centre,
                })
                .collect(),
            fail_fast: None,
        }
    }

    #[test]
    fn a_seeds_calibrated_band_gates_only_on_hard_failures() {
        use RuleStatus::*;
        // Outside a calibrated band, finite and near: the `seeds:` family judges it.
        assert!(!gates_in_a_seed(&rule(vec![(
            Some(1.3),
            Some(1.0),
            Regressed
        )])));
        // Non-finite, or more than ten times the centre (or under a tenth): a hard failure.
        assert!(gates_in_a_seed(&rule(vec![(
            Some(f64::NAN),
            Some(1.0),
            Regressed
        )])));
        assert!(gates_in_a_seed(&rule(vec![(
            Some(10.5),
            Some(1.0),
            Regressed
        )])));
        assert!(gates_in_a_seed(&rule(vec![(
            Some(0.05),
            Some(1.0),
            Regressed
        )])));
        // A hand-set band (no calibration's centre) always gates.
        assert!(gates_in_a_seed(&rule(vec![(Some(1.3), None, Regressed)])));
        // A missing rule gates; a passing one never does.
        let mut missing = rule(vec![]);
        missing.status = Missing;
        assert!(gates_in_a_seed(&missing));
        let mut pass = rule(vec![(Some(1.0), Some(1.0), Pass)]);
        pass.status = Pass;
        assert!(!gates_in_a_seed(&pass));
    }
}

/// What a verdict states about its false-alarm budget (`verdict.json`'s `budget`, a line of
/// report.md and report.html): α_run, the calibrated tests sharing it, and the audit of this
/// design stored beside the golden (`golden audit --save`), when one was made for this golden,
/// calibration and checks.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct BudgetStatement {
    pub(crate) alpha_run: f64,
    /// Seeds per verdict (1: a single run).
    pub(crate) seeds: usize,
    /// Calibrated windows sized by the budget (a single run's; a multi-seed verdict spends its
    /// budget on the `seeds:` family instead).
    pub(crate) tests: usize,
    /// Each one's share.
    pub(crate) per_test: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) audit: Option<crate::model::golden::audit_record::AuditFigures>,
    /// Why no audit is stated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) unaudited: Option<String>,
}

impl BudgetStatement {
    /// The statement of a verdict of `seeds` seed(s) of `checks` against `golden`.
    pub(crate) fn of(checks: &ChecksSpec, golden: &Golden, seeds: usize) -> BudgetStatement {
        let budget = Budget::of(checks, Some(golden));
        let how = "`rlharness golden audit SCENARIO --save` measures it";
        let (audit, unaudited) = match (&golden.calibration, &golden.audit) {
            (None, _) => (
                None,
                Some("no calibration: every band is hand-set, outside the budget".to_string()),
            ),
            (Some(_), None) => (None, Some(format!("not audited ({how})"))),
            (Some(_), Some(rec)) if !rec.holds_for(golden, checks) => (
                None,
                Some(format!(
                    "the stored audit was made for another golden, calibration or checks ({how})"
                )),
            ),
            (Some(_), Some(rec)) => match rec.audits.iter().find(|a| a.seeds == seeds) {
                Some(a) => (Some(a.clone()), None),
                None => (
                    None,
                    Some(format!(
                        "no stored audit of {seeds}-seed verdicts (`--seeds {seeds} --save`)"
                    )),
                ),
            },
        };
        BudgetStatement {
            alpha_run: budget.alpha,
            seeds,
            tests: budget.tests,
            per_test: budget.per_test(),
            audit,
            unaudited,
        }
    }

    /// One line, as the reports print it.
    pub(crate) fn text(&self) -> String {
        let pct = |x: f64| {
            let p = 100.0 * x;
            if p >= 0.1 || p == 0.0 {
                format!("{p:.2}%")
            } else {
                format!("{p:.3}%")
            }
        };
        let mut out = format!("α_run {}", pct(self.alpha_run));
        if self.seeds > 1 {
            out.push_str(&format!(
                " ({} seeds: half of it on the `seeds:` tests)",
                self.seeds
            ));
        } else if self.tests > 0 {
            out.push_str(&format!(
                ", {} calibrated window(s) at {} each",
                self.tests,
                pct(self.per_test)
            ));
        }
        match (&self.audit, &self.unaudited) {
            (Some(a), _) => out.push_str(&format!(
                "; audited false-alarm rate of this verdict {} (95% interval {}..{}, {} \
                 synthetic verdicts{})",
                pct(a.false_alarm_rate),
                pct(a.false_alarm_ci[0]),
                pct(a.false_alarm_ci[1]),
                a.draws,
                a.smallest_shift
                    .as_deref()
                    .map(|s| format!("; smallest reward drop caught 80% of the time: {s}"))
                    .unwrap_or_default()
            )),
            (None, Some(why)) => out.push_str(&format!("; {why}")),
            (None, None) => {}
        }
        out
    }
}
