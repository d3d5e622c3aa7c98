//! How a commit is judged: the sequential test of scenario mode (its window, calibration,
//! effect and error rates, read from the golden store) or the propagation matrix, and the
//! verdict of a commit's trials with its evidence in words.

use std::path::{Path, PathBuf};

use super::sprt::{Decision, Sprt};
use super::{BisectError, TestStated, Trial, Verdict};
use crate::judge::default_direction;
use crate::judge::expr::fmt_num;
use crate::model::checks::Direction;
use crate::model::golden::GoldenStore;
use crate::run::driver::DriverSpec;
use crate::scenario::Scenario;
use crate::tools::propagate::command::MatrixOptions;

/// What the sequential test is asked (`bisect`'s options).
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) scenario: PathBuf,
    pub(crate) hardware: Option<String>,
    pub(crate) metric: Option<String>,
    pub(crate) effect: Option<f64>,
    pub(crate) alpha: f64,
    pub(crate) beta: f64,
    pub(crate) max_seeds: usize,
}

/// How a commit is judged.
pub(crate) enum Judge {
    /// The scenario's seeds, one window value each, against the calibration.
    Scenario { test: TestStated, sprt: Sprt },
    /// The propagation matrix of these knobs.
    Propagate(MatrixOptions),
}

impl Judge {
    /// What the cache key holds of the judge besides the scenario.
    pub(crate) fn key(&self) -> String {
        match self {
            Judge::Scenario { test, .. } => format!(
                "scenario {} {}..{} median={}",
                test.metric, test.window.0, test.window.1, test.median
            ),
            // The conditions only when given: caches made before `--condition` stay valid.
            Judge::Propagate(o) if o.conditions.is_empty() => {
                format!("propagate {:?} {:?}", o.knobs, o.until)
            }
            Judge::Propagate(o) => {
                format!("propagate {:?} {:?} {:?}", o.knobs, o.until, o.conditions)
            }
        }
    }
    pub(crate) fn mode(&self) -> String {
        match self {
            Judge::Scenario { .. } => "scenario (sequential test of seeds)".into(),
            Judge::Propagate(o) => format!(
                "propagate (knobs {}{}; a knob flagged without a known gap is bad)",
                if o.knobs.is_empty() {
                    "all".into()
                } else {
                    o.knobs.join(", ")
                },
                if o.conditions.is_empty() {
                    String::new()
                } else {
                    format!("; only under {}", o.conditions.join(", "))
                }
            ),
        }
    }

    /// Scenario mode's test in words, as the bisect states it before it starts.
    pub(crate) fn test_line(&self) -> Option<String> {
        let Judge::Scenario { test, sprt } = self else {
            return None;
        };
        let (g, b) = sprt.expected_seeds(test.alpha, test.beta);
        Some(format!(
            "test: Wald's SPRT on {} (mean of steps {}-{}): good = {} (calibrated, σ {}), bad = {} \
             (effect {}, {}); α = {}, β = {}; at most {} seeds a commit (about {:.1} for a good \
             one, {:.1} for a bad one)",
            test.metric,
            test.window.0,
            test.window.1,
            fmt_num(test.good_mean),
            fmt_num(test.sigma),
            fmt_num(test.bad_mean),
            fmt_num(test.effect),
            test.effect_from,
            fmt_num(test.alpha),
            fmt_num(test.beta),
            test.max_seeds,
            g,
            b
        ))
    }

    /// The verdict of a commit's trials, its evidence in words, and Wald's statistic.
    pub(crate) fn verdict(&self, trials: &[Trial]) -> (Verdict, String, Option<f64>) {
        if let Some(f) = trials.iter().find(|t| t.failed) {
            return (Verdict::Skip, format!("could not run: {}", f.note), None);
        }
        match self {
            Judge::Propagate(_) => match trials.last() {
                Some(t) if t.value.unwrap_or(0.0) > 0.0 => (Verdict::Bad, t.note.clone(), None),
                Some(t) => (Verdict::Good, t.note.clone(), None),
                None => (Verdict::Skip, "no trial".into(), None),
            },
            Judge::Scenario { test, sprt } => {
                let values: Vec<f64> = trials.iter().filter_map(|t| t.value).collect();
                let l = sprt.llr(&values);
                let shown: Vec<String> = values.iter().map(|v| fmt_num(*v)).collect();
                let verdict = match sprt.decide(&values) {
                    Decision::Good => Verdict::Good,
                    Decision::Bad => Verdict::Bad,
                    Decision::Continue => Verdict::Skip,
                };
                let why = match verdict {
                    Verdict::Good => format!("Λ = {l:.2} ≤ {:.2}", sprt.lower),
                    Verdict::Bad => format!("Λ = {l:.2} ≥ {:.2}", sprt.upper),
                    Verdict::Skip => format!(
                        "unclear after {} seeds: Λ = {l:.2} between {:.2} and {:.2}",
                        values.len(),
                        sprt.lower,
                        sprt.upper
                    ),
                };
                (
                    verdict,
                    format!(
                        "{} over seeds [{}] = [{}] (good {}, bad {}): {why}",
                        test.metric,
                        trials
                            .iter()
                            .filter_map(|t| t.seed.map(|s| s.to_string()))
                            .collect::<Vec<_>>()
                            .join(", "),
                        shown.join(", "),
                        fmt_num(sprt.good_mean),
                        fmt_num(sprt.bad_mean)
                    ),
                    Some(l),
                )
            }
        }
    }
}

/// The setting that points the scenario at the trainer's sources: `--source`, else the one
/// entry of the command driver's `sources`.
pub(crate) fn source_var(scenario: &Scenario, given: Option<&str>) -> Result<String, BisectError> {
    let sources = match &scenario.driver {
        DriverSpec::Command(c) => c.sources.clone(),
        _ => Vec::new(),
    };
    match (given, sources.as_slice()) {
        (Some(v), _) => Ok(v.to_string()),
        (None, [one]) => Ok(one.clone()),
        (None, []) => Err(BisectError::Input(format!(
            "{}: the scenario names no trainer sources (a command driver's `sources`): name the \
             setting with --source",
            scenario.name
        ))),
        (None, many) => Err(BisectError::Input(format!(
            "{}: the scenario's trainer sources are {}: name the one in --repo with --source",
            scenario.name,
            many.join(", ")
        ))),
    }
}

/// The sequential test of scenario mode: the judged window and its calibration, the effect,
/// and the golden's hardware key.
pub(crate) fn sequential_test(
    args: &Ask,
    scenario: &Scenario,
    golden_root: &Path,
) -> Result<(TestStated, Sprt, String), BisectError> {
    let base = golden_root.join(&scenario.name);
    let hardware = match &args.hardware {
        Some(h) => h.clone(),
        None => {
            let mut found: Vec<String> = std::fs::read_dir(&base)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.path().join("calibration.json").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            found.sort();
            match found.as_slice() {
                [one] => one.clone(),
                [] => "cpu".into(),
                many => {
                    return Err(BisectError::Input(format!(
                        "{} has calibrations for several hardware keys ({}): name one with \
                         --hardware",
                        base.display(),
                        many.join(", ")
                    )))
                }
            }
        }
    };
    let store = GoldenStore::with_ci(golden_root, true);
    let golden = store
        .load(&scenario.name, &hardware)
        .map_err(|e| BisectError::Input(e.to_string()))?
        .ok_or_else(|| {
            BisectError::Input(format!(
            "no golden of {} for {hardware} in {}: bless one, then `rlharness golden calibrate` \
             (the sequential test needs the calibration's σ), or use --propagate",
            scenario.name,
            golden_root.display()
        ))
        })?;
    let cal = golden.calibration.as_ref().ok_or_else(|| {
        BisectError::Input(format!(
            "{} on {hardware} has a golden but no calibration: run `rlharness golden calibrate \
             {}` first",
            scenario.name,
            args.scenario.display()
        ))
    })?;
    let metric = match &args.metric {
        Some(m) => m.clone(),
        None => ["reward", "score"]
            .iter()
            .find_map(|w| cal.windows.keys().find(|k| k.contains(w)).cloned())
            .or_else(|| cal.windows.keys().next().cloned())
            .ok_or_else(|| BisectError::Input("the calibration has no windowed rule".into()))?,
    };
    let point = cal
        .windows
        .get(&metric)
        .and_then(|p| p.last())
        .ok_or_else(|| {
            BisectError::Input(format!(
                "`{metric}` has no calibrated window (calibrated: {})",
                cal.windows.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
    let rule = scenario.checks.golden.get(&metric);
    let direction = rule
        .map(|r| r.resolved(&metric).direction())
        .unwrap_or_else(|| default_direction(&metric));
    let (effect, effect_from) = match (args.effect, rule.and_then(|r| r.calibrated.as_ref())) {
        (Some(e), _) => (e.abs(), "--effect".to_string()),
        (None, Some(c)) => {
            let k = c.k.unwrap_or_else(|| {
                crate::judge::budget::Budget::of_calibration(&scenario.checks, cal).k(point.n)
            });
            let band = k * point.std * (1.0 + 1.0 / point.n.max(1) as f64).sqrt();
            (
                band.max(c.floor),
                format!(
                    "the golden rule's calibrated band: max({} σ √(1 + 1/{}), {})",
                    fmt_num(k),
                    point.n,
                    fmt_num(c.floor)
                ),
            )
        }
        (None, None) => (3.0 * point.std, "3 σ".to_string()),
    };
    if effect <= 0.0 {
        return Err(BisectError::Input(format!(
            "the effect to detect on `{metric}` is 0 (a calibration without spread): give \
             --effect"
        )));
    }
    let higher = direction != Direction::LowerIsBetter;
    let sprt = Sprt::new(point.mean, effect, point.std, higher, args.alpha, args.beta);
    let test = TestStated {
        metric,
        window: (point.first, point.last),
        median: point.median.unwrap_or(false),
        good_mean: point.mean,
        bad_mean: sprt.bad_mean,
        sigma: point.std,
        effect,
        effect_from,
        alpha: args.alpha,
        beta: args.beta,
        max_seeds: args.max_seeds,
        calibration: cal.source(),
    };
    Ok((test, sprt, hardware))
}
