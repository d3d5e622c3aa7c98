//! `golden calibrate`'s judgement of its runs: which runs a calibration accepts (completed,
//! and passing every rule that does not depend on a calibration), the calibration they measure
//! (finite series only; the default stability rules' windows too), what a new calibration
//! should warn about, and how many windows will share the run's budget before any run.

use super::verdict::{RuleStatus, Verdict};
use super::{budget, stability};
use crate::model::checks::ChecksSpec;
use crate::model::golden::calibration::Calibration;
use crate::model::metrics::{MetricTable, StepRange};
use crate::model::rundir::RunStatus;
use crate::scenario::Scenario;

/// Why a calibration cannot be made of its runs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CalibrateError {
    #[error("no completed run to calibrate from")]
    NoRuns,
    #[error("calibration run with seed {seed} did not complete ({dir}): {reason}")]
    Incomplete {
        seed: u64,
        dir: String,
        reason: String,
    },
    #[error(
        "calibration run with seed {seed} failed rules that do not depend on the calibration \
         ({dir}): {}; a calibration measures healthy runs only",
        failed.join("; ")
    )]
    Unhealthy {
        seed: u64,
        dir: String,
        failed: Vec<String>,
    },
    #[error(
        "calibration run with seed {seed} ({dir}) has `{metric}` = {value} at step {step}: a \
         calibration measures finite series only"
    )]
    NotFinite {
        seed: u64,
        dir: String,
        metric: String,
        value: f64,
        step: u64,
    },
}

/// What a calibration reads of one of its runs.
#[derive(Debug, Clone)]
pub(crate) struct CalibrationRun {
    pub(crate) seed: u64,
    pub(crate) dir: String,
    pub(crate) status: Option<RunStatus>,
    pub(crate) reason: Option<String>,
    pub(crate) verdict: Option<Verdict>,
    pub(crate) metrics: MetricTable,
    pub(crate) hardware: String,
    pub(crate) host: String,
    pub(crate) git_commit: Option<String>,
    pub(crate) fingerprint: Option<String>,
}

/// A run a calibration accepts: it completed, and failed no rule that does not depend on the
/// calibration (a calibration measures healthy runs only).
pub(crate) fn accept(run: &CalibrationRun, checks: &ChecksSpec) -> Result<(), CalibrateError> {
    if run.status != Some(RunStatus::Completed) {
        return Err(CalibrateError::Incomplete {
            seed: run.seed,
            dir: run.dir.clone(),
            reason: run
                .reason
                .clone()
                .unwrap_or_else(|| "no reason recorded".into()),
        });
    }
    let failed = failed_uncalibrated_rules(run.verdict.as_ref(), checks);
    if !failed.is_empty() {
        return Err(CalibrateError::Unhealthy {
            seed: run.seed,
            dir: run.dir.clone(),
            failed,
        });
    }
    Ok(())
}

/// The calibration `runs` measure for `scenario` (sorted by seed), and the checks it measured:
/// the scenario's, with the default stability rules' windows, so their bands are calibrated
/// too. A golden rule's series must be finite in every run: a calibration never drops a value.
pub(crate) fn measure(
    scenario: &str,
    checks: &ChecksSpec,
    mut runs: Vec<CalibrationRun>,
) -> Result<(Calibration, ChecksSpec), CalibrateError> {
    if runs.is_empty() {
        return Err(CalibrateError::NoRuns);
    }
    runs.sort_by_key(|r| r.seed);
    let tables: Vec<MetricTable> = runs.iter().map(|r| r.metrics.clone()).collect();
    let mut measured = checks.clone();
    let columns = tables.first().map(|t| t.columns()).unwrap_or_default();
    measured
        .golden
        .0
        .extend(stability::rules(checks, &columns, |_| true).0);
    for (r, t) in runs.iter().zip(&tables) {
        for (metric, _) in measured.golden.iter() {
            if let Some((step, v)) = t.series(metric).into_iter().find(|(_, v)| !v.is_finite()) {
                return Err(CalibrateError::NotFinite {
                    seed: r.seed,
                    dir: r.dir.clone(),
                    metric: metric.to_string(),
                    value: v,
                    step,
                });
            }
        }
    }
    let (steps, windows) = Calibration::measure(&tables, &measured);
    let first = &runs[0];
    let cal = Calibration {
        scenario: scenario.to_string(),
        hardware: first.hardware.clone(),
        date: chrono::Utc::now().to_rfc3339(),
        host: first.host.clone(),
        git_commit: first.git_commit.clone(),
        numeric_fingerprint: first.fingerprint.clone(),
        runs: runs.len(),
        seeds: runs.iter().map(|r| r.seed).collect(),
        steps,
        windows,
    };
    Ok((cal, measured))
}

/// About how many calibrated windows of `scenario` will share its budget, before any run: the
/// windows of its calibrated golden rules without a hand-set `k`, and, where the default
/// stability rules are on, those of the entropy and the gradient norm (the stability metrics
/// that move in a healthy run; an on-policy KL measures no spread and costs no share).
pub(crate) fn planned_tests(scenario: &Scenario) -> usize {
    let steps: Vec<u64> = (1..=scenario.steps).collect();
    let windows = |range: Option<StepRange>, w: u64| {
        let range = range.unwrap_or_default();
        let n = steps.iter().filter(|s| range.contains(**s)).count() as u64;
        n.div_ceil(w.max(1)) as usize
    };
    let golden: usize = scenario
        .checks
        .golden
        .iter()
        .filter(|(_, r)| budget::in_budget(r))
        .map(|(_, r)| windows(r.steps, r.window.unwrap_or(1)))
        .sum();
    let stable = if scenario.checks.stability == Some(true) {
        ["actor/entropy", "actor/grad_norm"]
            .iter()
            .filter(|m| scenario.checks.golden.get(m).is_none())
            .count()
            * windows(None, stability::WINDOW)
    } else {
        0
    };
    golden + stable
}

/// What a new calibration should say about itself: a calibration too small for its windows at
/// the run's budget, and windows of a calibrated rule that measured no spread (runs that
/// repeated themselves: one seed of a deterministic backend).
pub(crate) fn calibration_warnings(checks: &ChecksSpec, cal: &Calibration) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(budget::too_small(
        budget::Budget::of_calibration(checks, cal),
        cal.runs,
    ));
    for (metric, rule) in checks.golden.iter() {
        if rule.calibrated.is_none() {
            continue;
        }
        let flat: Vec<String> = cal
            .windows
            .get(metric)
            .into_iter()
            .flatten()
            .filter(|w| w.std == 0.0 && w.n > 1)
            .map(|w| format!("{}..{}", w.first, w.last))
            .collect();
        if !flat.is_empty() {
            out.push(format!(
                "`{metric}` measured σ = 0 over {} runs at steps {}: its runs repeated \
                 themselves ({}); its band there is the floor alone. Calibrate over seeds \
                 (no count, or --seeds A..B) for the noise a run of another seed has",
                cal.runs,
                flat.join(", "),
                if cal.seeds.iter().all(|s| Some(s) == cal.seeds.first()) {
                    "one seed of a deterministic backend"
                } else {
                    "a metric that does not move"
                }
            ));
        }
    }
    // Runs of one seed that all gave the same values measured no noise at all, whatever the
    // rules (a deterministic backend repeats itself).
    let one_seed = cal.seeds.iter().all(|s| Some(s) == cal.seeds.first());
    // (A mean of equal values may differ from them in its last bit.)
    let all_flat = cal
        .windows
        .values()
        .flatten()
        .all(|w| w.std <= 1e-12 * w.mean.abs().max(1.0));
    if cal.runs > 1 && one_seed && all_flat && !out.iter().any(|w| w.contains("σ = 0")) {
        out.push(format!(
            "every window measured σ = 0 over {} runs of one seed: the backend repeats itself, \
             so this calibration measures no noise. Calibrate over seeds (no count, or --seeds \
             A..B) for the noise a run of another seed has",
            cal.runs
        ));
    }
    out
}

/// The rules a calibration run failed that do not depend on a calibration or a golden's draw:
/// expectations, sanity and presence rules, and golden rules with fixed (`abs`/`rel`) bands.
/// Calibrated golden rules, stability rules (their bands come from the calibration) and the
/// exact lane (another seed is another run) are not asked to pass.
fn failed_uncalibrated_rules(verdict: Option<&Verdict>, checks: &ChecksSpec) -> Vec<String> {
    let Some(v) = verdict else {
        return Vec::new();
    };
    v.rules
        .iter()
        .filter(|r| {
            use RuleStatus::{Missing, Regressed};
            // A golden rule with a fixed band, when there is a golden to fail against.
            let fixed_golden = r
                .rule
                .strip_prefix("golden:")
                .and_then(|m| checks.golden.get(m))
                .is_some_and(|g| g.calibrated.is_none());
            let own = ["expect:", "sanity:", "presence:"]
                .iter()
                .any(|p| r.rule.starts_with(p));
            (fixed_golden && r.status == Regressed)
                || (own && matches!(r.status, Regressed | Missing))
        })
        .map(|r| format!("{} ({})", r.rule, r.evidence.message))
        .collect()
}
