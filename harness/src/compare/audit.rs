//! The judge audits itself (`rlharness golden audit SCENARIO`): the false-alarm rate of a
//! scenario's whole verdict, every rule and every seed, and each gating rule's power, measured
//! by judging thousands of synthetic runs with the real judge ([`judge_run`], and
//! [`judge_seeds`] for `--seeds N`).
//!
//! The synthetic runs come from the stored calibration runs. Each calibration run is one
//! vector of every (metric, step) value it logged; a synthetic run is the runs' mean plus a
//! random combination of their deviations, Σ zᵢ (xᵢ − x̄) / √(n − 1) with zᵢ standard normal:
//! a Gaussian draw with exactly the calibration's covariance between every pair of steps and
//! metrics (a seed whose reward runs high runs high in every window, as real seeds do). A
//! positive metric (a gradient norm, a time, a length) is drawn on the log scale, so its tail
//! is a factor, as a healthy run's is. A calibration that kept only its summaries (made before
//! the runs' values were stored) is drawn step by step, independently, which understates a
//! window's noise; the audit says so.
//!
//! The false-alarm rate is of the verdict's design: each draw makes a fresh calibration of
//! the stored one's size from the model, bands are resolved from it exactly as the judge does,
//! and one more run (or N seeds) is judged against them; an alarm is any outcome but `passed`
//! (the exit code 1). The rules loosened since a bless are change control, not a property of
//! a run, and are left out. The interval is Clopper–Pearson's, 95 %.
//!
//! Power is judged against the stored calibration (the bands a run gets today): the metric of
//! each gating rule is moved to its bad side at every step, by growing multiples of its
//! calibrated spread (a factor for a positive metric), until the rule catches the move in 80 %
//! of the draws. A rule that catches no move at all, however large, cannot fail.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use statrs::distribution::{Beta, ContinuousCDF};

use super::budget::{standard_normal, Budget};
use super::combined::seed_status;
use super::headline::Judged;
use super::run::{judge_run, RunRecord};
use super::seeds::{judge_seeds, SeedRun, POWER};
use super::stability;
use super::verdict::{Outcome, RuleStatus, Verdict};
use crate::checks::domain::positive;
use crate::checks::{ChecksSpec, Direction};
use crate::golden::calibration::Calibration;
use crate::golden::Golden;
use crate::metrics::{MetricTable, StepMetrics};
use crate::rundir::RunStatus;

/// What to simulate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuditOptions {
    /// Synthetic verdicts for the false-alarm rate.
    pub(crate) draws: usize,
    /// Draws per shift for a rule's power (0: no power analysis).
    pub(crate) power_draws: usize,
    /// Seeds per verdict: 1 is a single run, more a multi-seed verdict.
    pub(crate) seeds: usize,
    pub(crate) rng_seed: u64,
}

/// One gating rule's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RuleAudit {
    pub(crate) rule: String,
    /// Its share of the run's budget (calibrated windows sized by it), or `None` for a rule
    /// the budget does not size (a hand-set band, presence, an expectation).
    pub(crate) share: Option<f64>,
    /// Its band as the stored calibration resolves it (the first window's).
    pub(crate) band: Option<String>,
    /// How often it failed in the synthetic verdicts.
    pub(crate) fire_rate: f64,
    /// The calibration's own runs it fails, each judged against the stored calibration.
    pub(crate) fires_on_calibration_runs: usize,
    /// The smallest move to the bad side it catches 80 % of the time (`None`: not analysed).
    pub(crate) smallest_shift: Option<String>,
    /// No move to the bad side, however large, makes it fail.
    pub(crate) cannot_fail: bool,
}

/// The audit of one scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Audit {
    pub(crate) schema: u32,
    pub(crate) scenario: String,
    pub(crate) alpha_run: f64,
    pub(crate) seeds: usize,
    pub(crate) draws: usize,
    pub(crate) false_alarms: usize,
    pub(crate) false_alarm_rate: f64,
    pub(crate) false_alarm_ci: [f64; 2],
    pub(crate) calibration_runs: usize,
    /// The calibration kept its runs' values (else the draws are step by step).
    pub(crate) calibration_values: bool,
    pub(crate) budget_tests: usize,
    pub(crate) rules: Vec<RuleAudit>,
    /// Why the audit fails: a false-alarm interval above the budget, a rule that cannot fail.
    pub(crate) problems: Vec<String>,
    /// What it says without failing: a rule that fires on its own calibration runs.
    pub(crate) warnings: Vec<String>,
}

/// The schema version of `golden audit --format json`.
pub(crate) const AUDIT_SCHEMA: u32 = 1;

/// The generative model of a run: every (metric, step) cell of the calibration.
struct Model {
    cells: Vec<Cell>,
    /// Deviations of each run from the cells' means, one row per run (values mode).
    deviations: Vec<Vec<f64>>,
    runs: usize,
}

struct Cell {
    metric: String,
    step: u64,
    mean: f64,
    /// Spread for step-by-step draws (summaries mode).
    std: f64,
    log: bool,
}

impl Model {
    fn of(cal: &Calibration) -> Model {
        let mut cells = Vec::new();
        let mut columns: Vec<Vec<f64>> = Vec::new();
        let values = cal
            .steps
            .values()
            .flatten()
            .any(|p| p.values.len() == cal.runs && cal.runs > 1);
        for (metric, points) in &cal.steps {
            for p in points {
                let aligned = p.values.len() == cal.runs && cal.runs > 1;
                let log = positive(metric) && p.min > 0.0 && less_skewed_in_log(&p.values);
                let xs: Vec<f64> = if aligned {
                    p.values
                        .iter()
                        .map(|v| if log { v.ln() } else { *v })
                        .collect()
                } else {
                    Vec::new()
                };
                let (mean, std) = if !xs.is_empty() {
                    (xs.iter().sum::<f64>() / xs.len() as f64, 0.0)
                } else if log {
                    let s2 = (1.0 + (p.std / p.mean).powi(2)).ln();
                    (p.mean.ln() - s2 / 2.0, s2.sqrt())
                } else {
                    (p.mean, p.std)
                };
                columns.push(xs.iter().map(|x| x - mean).collect());
                cells.push(Cell {
                    metric: metric.clone(),
                    step: p.first,
                    mean,
                    std: if values { 0.0 } else { std },
                    log,
                });
            }
        }
        let runs = if values { cal.runs } else { 0 };
        let deviations = (0..runs)
            .map(|i| {
                columns
                    .iter()
                    .map(|c| c.get(i).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect();
        Model {
            cells,
            deviations,
            runs,
        }
    }

    /// One synthetic run.
    fn draw(&self, rng: &mut ChaCha8Rng) -> MetricTable {
        let z: Vec<f64> = (0..self.runs).map(|_| standard_normal(rng)).collect();
        let scale = 1.0 / ((self.runs.max(2) - 1) as f64).sqrt();
        let mut rows: BTreeMap<u64, StepMetrics> = BTreeMap::new();
        for (j, c) in self.cells.iter().enumerate() {
            let x = if self.runs > 0 {
                c.mean
                    + scale
                        * z.iter()
                            .zip(&self.deviations)
                            .map(|(z, d)| z * d[j])
                            .sum::<f64>()
            } else {
                c.mean + c.std * standard_normal(rng)
            };
            let v = if c.log { x.exp() } else { x };
            rows.entry(c.step)
                .or_insert_with(|| StepMetrics::new(c.step))
                .insert(c.metric.clone(), v);
        }
        let mut t = MetricTable::new();
        for (_, r) in rows {
            t.push(r);
        }
        t
    }

    /// The calibration's own runs, rebuilt from their stored values (values mode only).
    fn calibration_runs(&self) -> Vec<MetricTable> {
        (0..self.runs)
            .map(|i| {
                let mut rows: BTreeMap<u64, StepMetrics> = BTreeMap::new();
                for (j, c) in self.cells.iter().enumerate() {
                    let x = c.mean + self.deviations[i][j];
                    rows.entry(c.step)
                        .or_insert_with(|| StepMetrics::new(c.step))
                        .insert(c.metric.clone(), if c.log { x.exp() } else { x });
                }
                let mut t = MetricTable::new();
                for (_, r) in rows {
                    t.push(r);
                }
                t
            })
            .collect()
    }
}

/// Whether a positive metric's runs look log-normal rather than normal: their values are less
/// skewed on the log scale (a gradient norm's right tail) than as they are. Without values
/// (summaries only), a positive metric is drawn on the log scale.
fn less_skewed_in_log(values: &[f64]) -> bool {
    if values.len() < 3 {
        return true;
    }
    let skew = |xs: &[f64]| {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt();
        if sd == 0.0 {
            return 0.0;
        }
        xs.iter().map(|x| ((x - m) / sd).powi(3)).sum::<f64>() / n
    };
    let ln: Vec<f64> = values.iter().map(|v| v.ln()).collect();
    skew(&ln).abs() < skew(values).abs()
}

/// `table` with `metric` moved to its bad side: by `shift` in its units, or by the factor
/// `shift` (> 1: up, < 1: down) on the log scale.
fn shifted(table: &MetricTable, metric: &str, shift: Shift) -> MetricTable {
    let mut t = MetricTable::new();
    for r in table.rows() {
        let mut r = r.clone();
        if let Some(v) = r.get(metric) {
            r.insert(
                metric,
                match shift {
                    Shift::Add(d) => v + d,
                    Shift::Times(f) => v * f,
                },
            );
        }
        t.push(r);
    }
    t
}

#[derive(Debug, Clone, Copy)]
enum Shift {
    Add(f64),
    Times(f64),
}

/// Bisection steps between the last shift missed and the first caught.
const REFINE: usize = 5;

impl Shift {
    /// How far it moves: the added amount's size, or the factor's log.
    fn size(self) -> f64 {
        match self {
            Shift::Add(d) => d.abs(),
            Shift::Times(f) => f.ln().abs(),
        }
    }

    /// The same direction, moved by `size`.
    fn with_size(self, size: f64) -> Shift {
        match self {
            Shift::Add(d) => Shift::Add(d.signum() * size),
            Shift::Times(f) => Shift::Times((f.ln().signum() * size).exp()),
        }
    }

    fn text(self) -> String {
        match self {
            Shift::Add(d) => format!("{d:+.4}"),
            Shift::Times(f) => format!("×{f:.3}"),
        }
    }
}

/// The golden the draws are judged against: `golden` with `cal` as its calibration and no
/// blessed rules or bands (loosening is change control, not a property of a run).
fn with_calibration(golden: &Golden, cal: Calibration) -> Golden {
    Golden {
        calibration: Some(cal),
        rules: None,
        bands: None,
        ..golden.clone()
    }
}

/// The checks a calibration measures: the scenario's golden rules and its default stability
/// rules (as `golden calibrate` measures them).
fn measured_checks(checks: &ChecksSpec, golden: &Golden) -> ChecksSpec {
    let mut c = checks.clone();
    c.golden
        .0
        .extend(stability::rules(checks, &golden.table.columns(), |_| true).0);
    c
}

/// A synthetic calibration of `runs` draws, as `golden calibrate` would write it.
fn synthetic_calibration(
    model: &Model,
    stored: &Calibration,
    checks: &ChecksSpec,
    rng: &mut ChaCha8Rng,
) -> Calibration {
    let tables: Vec<MetricTable> = (0..stored.runs).map(|_| model.draw(rng)).collect();
    let (steps, windows) = Calibration::measure(&tables, checks);
    Calibration {
        steps,
        windows,
        ..stored.clone()
    }
}

/// One verdict of `seeds` runs (a single run for 1) against `golden`.
fn verdict_of(runs: &[MetricTable], checks: &ChecksSpec, golden: &Golden, seed: u64) -> Verdict {
    let judge = |t: &MetricTable| {
        judge_run(&RunRecord::completed(t, checks, seed), Some(golden)).unwrap_or(Verdict {
            outcome: Outcome::Passed,
            rules: Vec::new(),
            grid_mismatch: None,
            exact_lane: None,
        })
    };
    if runs.len() == 1 {
        return judge(&runs[0]);
    }
    let verdicts: Vec<Verdict> = runs.iter().map(judge).collect();
    let seed_runs: Vec<SeedRun> = runs
        .iter()
        .zip(&verdicts)
        .enumerate()
        .map(|(i, (t, v))| {
            let judged = Judged {
                verdict: Some(v),
                status: Some(RunStatus::Completed),
                ..Judged::default()
            };
            SeedRun {
                seed: 1000 + i as u64,
                table: t,
                status: seed_status(&judged),
                summary: String::new(),
                dir: String::new(),
            }
        })
        .collect();
    judge_seeds(&seed_runs, checks, Some(golden))
}

fn alarm(v: &Verdict) -> bool {
    !matches!(v.outcome, Outcome::Passed | Outcome::NoGolden)
}

/// Clopper–Pearson 95 % interval of `k` successes in `n`.
pub(crate) fn clopper_pearson(k: usize, n: usize) -> [f64; 2] {
    if n == 0 {
        return [0.0, 1.0];
    }
    let (k, n) = (k as f64, n as f64);
    let lo = if k == 0.0 {
        0.0
    } else {
        Beta::new(k, n - k + 1.0).map_or(0.0, |b| b.inverse_cdf(0.025))
    };
    let hi = if k == n {
        1.0
    } else {
        Beta::new(k + 1.0, n - k).map_or(1.0, |b| b.inverse_cdf(0.975))
    };
    [lo, hi]
}

/// Audit `checks` against `golden` (which must hold a calibration).
pub(crate) fn audit(
    scenario: &str,
    checks: &ChecksSpec,
    golden: &Golden,
    opts: AuditOptions,
) -> Result<Audit, String> {
    let stored = golden.calibration.clone().ok_or_else(|| {
        format!(
            "the golden of `{scenario}` has no calibration: nothing to audit (run `rlharness \
             golden calibrate` on the scenario first)"
        )
    })?;
    let model = Model::of(&stored);
    let measured = measured_checks(checks, golden);
    let seed = golden.provenance.seed.unwrap_or(0).wrapping_add(1);
    let mut rng = ChaCha8Rng::seed_from_u64(opts.rng_seed);
    let seeds = opts.seeds.max(1);
    // The false-alarm rate of the design: a fresh calibration and a fresh verdict per draw.
    let mut alarms = 0;
    let mut fired: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..opts.draws {
        let cal = synthetic_calibration(&model, &stored, &measured, &mut rng);
        let g = with_calibration(golden, cal);
        let runs: Vec<MetricTable> = (0..seeds).map(|_| model.draw(&mut rng)).collect();
        let v = verdict_of(&runs, checks, &g, seed);
        if alarm(&v) {
            alarms += 1;
        }
        for r in v.rules.iter().filter(|r| r.status != RuleStatus::Pass) {
            *fired.entry(r.rule.clone()).or_default() += 1;
        }
    }
    // Today's bands: the stored calibration.
    let today = with_calibration(golden, stored.clone());
    let reference = verdict_of(std::slice::from_ref(&golden.table), checks, &today, seed);
    let budget = Budget::of(checks, Some(&today));
    let own = model.calibration_runs();
    let mut rules = Vec::new();
    let mut ids: Vec<String> = reference.rules.iter().map(|r| r.rule.clone()).collect();
    if seeds > 1 {
        let probe = verdict_of(&vec![golden.table.clone(); seeds], checks, &today, seed);
        ids.extend(
            probe
                .rules
                .iter()
                .filter(|r| r.rule.starts_with("seeds:"))
                .map(|r| r.rule.clone()),
        );
    }
    for id in ids {
        let r = reference.rule(&id);
        let metric = id
            .strip_prefix("golden:")
            .or_else(|| id.strip_prefix("stability:"))
            .or_else(|| id.strip_prefix("seeds:"))
            .map(str::to_string);
        let windows = metric
            .as_deref()
            .and_then(|m| stored.windows.get(m))
            .filter(|_| {
                let m = metric.as_deref().unwrap_or_default();
                measured.golden.get(m).is_some_and(super::budget::in_budget)
            });
        let floor = metric
            .as_deref()
            .and_then(|m| measured.golden.get(m))
            .and_then(|r| r.calibrated)
            .map_or(0.0, |c| c.floor);
        let share = windows.filter(|_| !id.starts_with("seeds:")).map(|ws| {
            ws.iter()
                .filter(|w| super::budget::is_test(w, floor))
                .count() as f64
                * budget.per_test()
        });
        let band = r
            .and_then(|r| r.points.first())
            .map(|p| format!("[{}, {}] at {}", fmt(p.band.lo()), fmt(p.band.hi()), p.at()));
        let fires_on_calibration_runs = own
            .iter()
            .filter(|t| {
                let v = verdict_of(std::slice::from_ref(*t), checks, &today, seed);
                v.rule(&id).is_some_and(|r| r.status != RuleStatus::Pass)
            })
            .count();
        let (smallest_shift, cannot_fail) = match (&metric, opts.power_draws) {
            // Each seed's own rules are analysed in a single-run audit (in a multi-seed verdict
            // their calibrated bands do not gate).
            (Some(m), n) if n > 0 && (seeds == 1 || id.starts_with("seeds:")) => {
                let (s, never) = power(
                    &model, m, &id, checks, &measured, &today, seeds, n, seed, &mut rng,
                );
                (s.map(Shift::text), never)
            }
            _ => (None, false),
        };
        rules.push(RuleAudit {
            fire_rate: *fired.get(&id).unwrap_or(&0) as f64 / opts.draws.max(1) as f64,
            rule: id,
            share,
            band,
            fires_on_calibration_runs,
            smallest_shift,
            cannot_fail,
        });
    }
    let ci = clopper_pearson(alarms, opts.draws);
    let mut problems = Vec::new();
    if ci[0] > checks.alpha() {
        problems.push(format!(
            "the verdict's false-alarm rate {:.2}% (95% interval {:.2}%..{:.2}%) is above its \
             budget {}%",
            100.0 * alarms as f64 / opts.draws.max(1) as f64,
            100.0 * ci[0],
            100.0 * ci[1],
            100.0 * checks.alpha()
        ));
    }
    let mut warnings = Vec::new();
    for r in &rules {
        if r.cannot_fail {
            problems.push(format!(
                "`{}` cannot fail: no move of its metric to the bad side makes it fail",
                r.rule
            ));
        }
        if r.fires_on_calibration_runs > 0 {
            warnings.push(format!(
                "`{}` fails {} of the calibration's own {} runs",
                r.rule, r.fires_on_calibration_runs, stored.runs
            ));
        }
    }
    if model.runs == 0 {
        warnings.push(
            "the calibration kept only its summaries (made before runs' values were stored): \
             the draws are step by step, independent, which understates a window's noise; \
             calibrate again for a full audit"
                .into(),
        );
    }
    Ok(Audit {
        schema: AUDIT_SCHEMA,
        scenario: scenario.to_string(),
        alpha_run: checks.alpha(),
        seeds,
        draws: opts.draws,
        false_alarms: alarms,
        false_alarm_rate: alarms as f64 / opts.draws.max(1) as f64,
        false_alarm_ci: ci,
        calibration_runs: stored.runs,
        calibration_values: model.runs > 0,
        budget_tests: budget.tests,
        rules,
        problems,
        warnings,
    })
}

/// The smallest move of `metric` to its bad side that `rule` catches in [`POWER`] of
/// `draws` verdicts against today's calibration, and whether no move at all is caught.
#[allow(clippy::too_many_arguments)]
fn power(
    model: &Model,
    metric: &str,
    rule: &str,
    checks: &ChecksSpec,
    measured: &ChecksSpec,
    today: &Golden,
    seeds: usize,
    draws: usize,
    seed: u64,
    rng: &mut ChaCha8Rng,
) -> (Option<Shift>, bool) {
    let direction = measured
        .golden
        .get(metric)
        .map(|r| r.resolved(metric).direction())
        .unwrap_or_else(|| super::default_direction(metric));
    let cal = today.calibration.as_ref();
    let spread = cal
        .and_then(|c| c.windows.get(metric).or_else(|| c.steps.get(metric)))
        .map(|ws| ws.iter().map(|w| w.std).fold(0.0, f64::max))
        .unwrap_or(0.0);
    let level = today
        .table
        .series(metric)
        .iter()
        .map(|(_, v)| v.abs())
        .fold(0.0, f64::max);
    let unit = if spread > 0.0 {
        spread
    } else {
        (level * 0.01).max(1e-9)
    };
    // A factor for a positive metric that moves (a zero-valued one, an on-policy KL, moves
    // by adding).
    let factor = positive(metric)
        && cal
            .and_then(|c| c.windows.get(metric).or_else(|| c.steps.get(metric)))
            .is_some_and(|ws| ws.iter().all(|w| w.min > 0.0));
    // The bad side: down for higher-is-better, up otherwise (a two-sided rule: up).
    let down = direction == Direction::HigherIsBetter;
    let steps: &[f64] = &[
        0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0,
    ];
    let shifts: Vec<Shift> = if factor {
        [1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 100.0]
            .iter()
            .map(|f| Shift::Times(if down { 1.0 / f } else { *f }))
            .collect()
    } else {
        steps
            .iter()
            .map(|k| Shift::Add(if down { -k * unit } else { k * unit }))
            .collect()
    };
    let caught = |s: Shift, n: usize, rng: &mut ChaCha8Rng| {
        (0..n)
            .filter(|_| {
                let runs: Vec<MetricTable> = (0..seeds)
                    .map(|_| shifted(&model.draw(rng), metric, s))
                    .collect();
                verdict_of(&runs, checks, today, seed)
                    .rule(rule)
                    .is_some_and(|r| r.status != RuleStatus::Pass)
            })
            .count()
    };
    let enough = |n: usize| n as f64 >= POWER * draws as f64;
    let mut below: Option<Shift> = None;
    for s in &shifts {
        if enough(caught(*s, draws, rng)) {
            // Narrow it down between the last shift missed and this one.
            let (mut lo, mut hi) = (below.map_or(0.0, Shift::size), s.size());
            for _ in 0..REFINE {
                let mid = (lo + hi) / 2.0;
                if enough(caught(s.with_size(mid), draws, rng)) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            return (Some(s.with_size(hi)), false);
        }
        below = Some(*s);
    }
    // Never at 80 %: does anything, however large, make it fail?
    let huge = if factor {
        Shift::Times(if down { 1e-6 } else { 1e6 })
    } else {
        Shift::Add(if down { -1e6 } else { 1e6 } * unit.max(level).max(1.0))
    };
    (None, caught(huge, draws.min(20), rng) == 0)
}

fn fmt(v: f64) -> String {
    super::expr::fmt_num(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::Provenance;

    /// A golden of 6 steps of `r` (calibrated windows of 3) and `u` (a hand-set band whose
    /// budget is as large as its windows: it cannot fail), calibrated from `n` seeds whose
    /// reward level varies with the seed.
    fn scenario(n: usize) -> (ChecksSpec, Golden) {
        let checks: ChecksSpec = serde_json::from_str(
            r#"{"golden": {"r": {"window": 3, "calibrated": {"floor": 0.001}},
                           "u": {"window": 3, "abs": 0.01, "budget": 2}}}"#,
        )
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let runs: Vec<MetricTable> = (0..n)
            .map(|_| {
                let level = 0.05 * standard_normal(&mut rng);
                let r: Vec<f64> = (0..6)
                    .map(|s| 0.3 + 0.05 * s as f64 + level + 0.02 * standard_normal(&mut rng))
                    .collect();
                let u: Vec<f64> = (0..6)
                    .map(|_| 1.0 + 0.01 * standard_normal(&mut rng))
                    .collect();
                MetricTable::from_columns(&[("r", &r), ("u", &u)])
            })
            .collect();
        let golden = Golden {
            scenario: "s".into(),
            hardware: "cpu".into(),
            table: runs[0].clone(),
            provenance: Provenance::default(),
            rules: None,
            bands: None,
            dir: "golden/s/cpu".into(),
            calibration: Some(Calibration::of_test_runs(&runs, &checks)),
            digest: Default::default(),
        };
        (checks, golden)
    }

    #[test]
    fn the_audit_measures_the_verdicts_rate_and_finds_a_rule_that_cannot_fail() {
        let (checks, golden) = scenario(30);
        let opts = AuditOptions {
            draws: 400,
            power_draws: 40,
            seeds: 1,
            rng_seed: 1,
        };
        let a = audit("s", &checks, &golden, opts).unwrap();
        assert!(a.calibration_values);
        assert_eq!(a.budget_tests, 2);
        // Both windows of `r` at their share: within the budget (the interval's lower end
        // at or below it), and not a judge that never fires at all when moved.
        assert!(a.false_alarm_ci[0] <= checks.alpha(), "{a:#?}");
        let r = a.rules.iter().find(|r| r.rule == "golden:r").unwrap();
        assert!(r.share.is_some_and(|s| (s - 0.005).abs() < 1e-12), "{r:?}");
        assert!(!r.cannot_fail && r.smallest_shift.is_some(), "{r:?}");
        let u = a.rules.iter().find(|r| r.rule == "golden:u").unwrap();
        assert!(u.cannot_fail, "{u:?}");
        assert!(a
            .problems
            .iter()
            .any(|p| p.contains("`golden:u` cannot fail")));
        // The JSON keys scripts read.
        let json = serde_json::to_value(&a).unwrap();
        for key in ["false_alarm_rate", "false_alarm_ci", "rules", "schema"] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn a_multi_seed_audit_judges_the_seeds_family() {
        let (checks, golden) = scenario(30);
        let opts = AuditOptions {
            draws: 60,
            power_draws: 0,
            seeds: 3,
            rng_seed: 2,
        };
        let a = audit("s", &checks, &golden, opts).unwrap();
        assert_eq!(a.seeds, 3);
        assert!(a.rules.iter().any(|r| r.rule == "seeds:r"), "{a:#?}");
    }

    #[test]
    fn clopper_pearson_matches_known_intervals() {
        // 0 of 300: [0, 1.22 %]; 11 of 300: [1.85 %, 6.46 %].
        let [lo, hi] = clopper_pearson(0, 300);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.01222).abs() < 2e-4, "{hi}");
        let [lo, hi] = clopper_pearson(11, 300);
        assert!((lo - 0.0185).abs() < 5e-4, "{lo}");
        assert!((hi - 0.0646).abs() < 5e-4, "{hi}");
    }
}
