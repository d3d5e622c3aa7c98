//! Calibrated golden rules: the band a `calibrated` rule gets from the golden's calibration
//! (k σ per window around the calibration's mean), or why it has none; and what a run, a bless
//! and the live watch read of it.

use super::budget::{Budget, POWER};
use crate::model::checks::expr::fmt_num;
use crate::model::checks::{ChecksSpec, WindowBand};
use crate::model::golden::calibration::PointStats;
use crate::model::golden::{BlessedBands, Golden, JudgedAgainst};

/// Where a calibrated metric's band came from (its text), or why it has none.
pub(crate) type BandSource = (String, Result<String, NoBand>);

/// Why a calibrated rule has no band: a missing rule's evidence, naming the command to run.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum NoBand {
    #[error(
        "`{0}` asks for a calibrated band, and the scenario has no golden here yet: bless one (a \
         completed run writes it pending; review it and run `rlharness golden accept`)"
    )]
    NoGolden(String),
    #[error(
        "`{0}` asks for a calibrated band, but the golden has no calibration of it: run \
         `rlharness golden calibrate` on the scenario"
    )]
    NoCalibration(String),
    #[error(
        "`{metric}`: the calibration measured window {measured}, the rule now compares window \
         {compared}: run `rlharness golden calibrate` again"
    )]
    Statistic {
        metric: String,
        measured: &'static str,
        compared: &'static str,
    },
}

/// The source of `metric`'s band among `sources`, if its rule is calibrated.
pub(crate) fn source_of<'a>(
    sources: &'a [BandSource],
    metric: &str,
) -> Option<&'a Result<String, NoBand>> {
    sources.iter().find(|(m, _)| m == metric).map(|(_, s)| s)
}

/// What a run's verdict is judged against, as `run.json` records it: the golden's digests and
/// each calibrated band as resolved (`golden:<metric>` → its text, or why it has none).
pub(crate) fn judged_against(checks: &ChecksSpec, golden: &Golden) -> JudgedAgainst {
    let (_, sources) = resolve_calibrated(checks, Some(golden), Budget::of(checks, Some(golden)));
    JudgedAgainst {
        digest: golden.digest.clone(),
        bands: sources
            .into_iter()
            .map(|(m, b)| {
                let text = b.unwrap_or_else(|why| why.to_string());
                (format!("golden:{m}"), text)
            })
            .collect(),
    }
}

/// The calibrated bands `checks` resolve to with `golden`'s calibration: per calibrated rule
/// the calibration can resolve, each window's (first, last, half-width). What a bless records
/// (`golden.yaml`'s `bands:`) and what the loosening guard compares with it.
pub(crate) fn band_widths(checks: &ChecksSpec, golden: Option<&Golden>) -> BlessedBands {
    let budget = Budget::of(checks, golden);
    // The default stability rules' calibrated bands too, beside the golden rules'.
    let mut all = checks.clone();
    if let Some(g) = golden {
        let calibrated = |m: &str| g.calibration.as_ref().is_some_and(|c| c.sigma(m).is_some());
        all.golden
            .0
            .extend(super::stability::rules(checks, &g.table.columns(), calibrated).0);
    }
    let (resolved, _) = resolve_calibrated(&all, golden, budget);
    resolved
        .map(|r| {
            r.golden
                .iter()
                .filter_map(|(m, rule)| {
                    let bands = rule.window_bands.as_ref()?;
                    Some((
                        m.to_string(),
                        bands.iter().map(|b| (b.first, b.last, b.half)).collect(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The standard normal quantile of [`POWER`] (0.8).
const Z_POWER: f64 = 0.841_621_233_572_914_3;

/// The checks a run watches while it runs (its `fail_fast` rules): calibrated rules with the
/// bands the golden's calibration gives them. A calibrated rule the calibration cannot resolve
/// never fails fast (its final verdict is `missing`, with the command to run); judged raw it
/// would have a band of width 0 and abort the run at its first window.
pub(crate) fn live_checks(checks: &ChecksSpec, golden: Option<&Golden>) -> ChecksSpec {
    let (resolved, sources) = resolve_calibrated(checks, golden, Budget::of(checks, golden));
    let mut live = resolved.unwrap_or_else(|| checks.clone());
    for (metric, source) in sources {
        if source.is_err() {
            for (_, r) in live.golden.0.iter_mut().filter(|(m, _)| *m == metric) {
                r.fail_fast = false;
            }
        }
    }
    live
}

/// `calibrated` golden rules turned into the absolute bands the golden's calibration gives
/// them (`None`: no rule is calibrated), and per calibrated metric where its band came from,
/// or why it has none. `budget`: the run's (from its whole `checks`), which sizes each band
/// without a hand-set `k`.
pub(crate) fn resolve_calibrated(
    checks: &ChecksSpec,
    golden: Option<&Golden>,
    budget: Budget,
) -> (Option<ChecksSpec>, Vec<BandSource>) {
    if checks.golden.iter().all(|(_, r)| r.calibrated.is_none()) {
        return (None, Vec::new());
    }
    let mut resolved = checks.clone();
    let mut sources = Vec::new();
    for (metric, rule) in resolved.golden.0.iter_mut() {
        let Some(c) = rule.calibrated else { continue };
        let cal = golden.and_then(|g| g.calibration.as_ref());
        let windows = cal.and_then(|cal| {
            cal.windows
                .get(metric)
                .filter(|w| !w.is_empty())
                .map(|w| (cal, w))
        });
        let Some((cal, windows)) = windows else {
            let why = if golden.is_none() {
                // The calibration may well exist: what is missing is the golden.
                NoBand::NoGolden(metric.clone())
            } else {
                NoBand::NoCalibration(metric.clone())
            };
            sources.push((metric.clone(), Err(why)));
            continue;
        };
        let stat = |m: bool| if m { "medians" } else { "means" };
        if let Some(m) = windows
            .iter()
            .filter_map(|w| w.median)
            .find(|m| *m != rule.median)
        {
            sources.push((
                metric.clone(),
                Err(NoBand::Statistic {
                    metric: metric.clone(),
                    measured: stat(m),
                    compared: stat(rule.median),
                }),
            ));
            continue;
        }
        let inflate = |n: usize| (1.0 + 1.0 / n.max(1) as f64).sqrt();
        let k_of = |w: &PointStats| c.k.unwrap_or_else(|| budget.k(w.n));
        let bands: Vec<WindowBand> = windows
            .iter()
            .map(|w| {
                let k = k_of(w);
                match c.log.then(|| w.log_stats()).flatten() {
                    // On the log scale the floor is a factor: 1 + floor / the window's centre.
                    Some((centre, sd)) => WindowBand {
                        first: w.first,
                        last: w.last,
                        centre,
                        // Never wider than a factor of EXTREME either way: ten times the
                        // calibration's centre fails, however noisy the calibration.
                        half: (k * sd * inflate(w.n))
                            .max((c.floor / centre.exp()).ln_1p())
                            .min(super::budget::EXTREME.ln()),
                        log: true,
                    },
                    None => WindowBand {
                        first: w.first,
                        last: w.last,
                        centre: w.mean,
                        half: (k * w.std * inflate(w.n)).max(c.floor),
                        log: false,
                    },
                }
            })
            .collect();
        let span = |xs: &mut dyn Iterator<Item = f64>| {
            let (lo, hi) = xs.fold((f64::INFINITY, 0.0_f64), |(lo, hi), x| {
                (lo.min(x), hi.max(x))
            });
            if lo == hi {
                fmt_num(hi)
            } else {
                format!("{}..{}", fmt_num(lo), fmt_num(hi))
            }
        };
        let log = bands.iter().any(|b| b.log);
        let halves = if log {
            format!("×÷{}", span(&mut bands.iter().map(|b| b.half.exp())))
        } else {
            format!("±{}", span(&mut bands.iter().map(|b| b.half)))
        };
        // One run's window lands past the bad edge with probability Φ((δ − half) / σ): 80 %
        // at δ = half + z₀.₈ σ, σ being the window's spread over the calibration runs (on the
        // log scale a factor exp(half + z₀.₈ σ_log)).
        let power = span(&mut bands.iter().zip(windows.iter()).map(|(b, w)| {
            if b.log {
                (b.half + Z_POWER * w.log_stats().map_or(0.0, |(_, sd)| sd)).exp()
            } else {
                b.half + Z_POWER * w.std
            }
        }));
        let ks = span(&mut windows.iter().map(k_of));
        let k_text = match c.k {
            Some(k) => format!(
                "k {} (set by hand: outside the run's false-alarm budget)",
                fmt_num(k)
            ),
            None => format!(
                "k {ks} = Student's t(1 − a/2, n − 1) for the window's share a = {} ({} of the \
                 run's false-alarm budget {} over {} test(s))",
                fmt_num(budget.per_test()),
                super::budget::SIZED,
                fmt_num(budget.alpha),
                budget.tests.max(1)
            ),
        };
        let scale = if log { "ln of the values, " } else { "" };
        let shift = if log { "a factor" } else { "a shift" };
        rule.window_bands = Some(bands);
        sources.push((
            metric.clone(),
            Ok(format!(
                "{halves} calibrated per window ({scale}max(k × the window's σ × √(1 + 1/n), floor {}) \
                 around the calibration's mean of the window; {k_text}), from {}; one run catches \
                 {shift} of {power} on the bad side {:.0}% of the time",
                c.floor,
                cal.source(),
                POWER * 100.0
            )),
        ));
    }
    (Some(resolved), sources)
}
