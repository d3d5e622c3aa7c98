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

use model::Model;
use power::{power, Shift};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use statrs::distribution::{Beta, ContinuousCDF};

use super::budget::Budget;
use super::combined::seed_status;
use super::headline::Judged;
use super::run::{judge_run, RunRecord};
use super::seeds::{judge_seeds, SeedRun};
use super::stability;
use super::verdict::{Outcome, RuleStatus, Verdict};
use crate::model::checks::ChecksSpec;
use crate::model::golden::calibration::Calibration;
use crate::model::golden::Golden;
use crate::model::metrics::MetricTable;
use crate::model::rundir::RunStatus;

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
    /// The golden's stored audit (`audit.json`): `holds` (made for this golden, calibration
    /// and checks), `stale`, or `none`; `saved` after `--save`. Set by the command.
    pub(crate) stored: Option<String>,
}

/// The schema version of `golden audit --format json`.
pub(crate) const AUDIT_SCHEMA: u32 = 1;

mod model;
mod power;
#[cfg(test)]
mod tests;

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
            not_judged: None,
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

/// Why a verdict design cannot be audited.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(
        "the golden of `{0}` has no calibration: nothing to audit (run `rlharness golden \
         calibrate` on the scenario first)"
    )]
    NoCalibration(String),
}

/// Audit `checks` against `golden` (which must hold a calibration).
pub(crate) fn audit(
    scenario: &str,
    checks: &ChecksSpec,
    golden: &Golden,
    opts: AuditOptions,
) -> Result<Audit, AuditError> {
    let stored = golden
        .calibration
        .clone()
        .ok_or_else(|| AuditError::NoCalibration(scenario.to_string()))?;
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
        stored: None,
    })
}

fn fmt(v: f64) -> String {
    super::expr::fmt_num(v)
}
