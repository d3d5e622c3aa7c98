//! The power of a multi-seed verdict: the smallest shift of a window's mean its t-test
//! catches 4 times in 5, and how many seeds it takes to catch a given shift.

use statrs::distribution::{ContinuousCDF, StudentsT};

use super::{family_alpha, tails};
use crate::judge::budget::POWER;
use crate::model::checks::{ChecksSpec, Direction};
use crate::model::golden::calibration::PointStats;

/// The smallest shift of the true window mean that the t-test of `n` seeds against
/// `reference`, each tail at `alpha`, catches with probability `POWER`, assuming the seeds
/// spread as the calibration did: (t₁₋α + t_power) × σ √(1/n + 1/n_ref) at n + n_ref − 2
/// degrees of freedom (the usual approximation of the non-central t). `None` below 2 seeds or
/// 2 calibration runs.
pub(crate) fn detectable_shift(reference: &PointStats, n: usize, alpha: f64) -> Option<f64> {
    if n < 2 || reference.n < 2 {
        return None;
    }
    let se = reference.std * (1.0 / n as f64 + 1.0 / reference.n as f64).sqrt();
    let t = StudentsT::new(0.0, 1.0, (n + reference.n - 2) as f64).ok()?;
    Some((t.inverse_cdf(1.0 - alpha) + t.inverse_cdf(POWER)) * se)
}

/// How many seeds a multi-seed verdict needs to catch a shift of a window's mean, 80% of the
/// time, at the α the verdict would test it at (`golden calibrate --detect`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeedsNeeded {
    pub(crate) metric: String,
    pub(crate) window: (u64, u64),
    pub(crate) mean: f64,
    pub(crate) sigma: f64,
    /// The shift to catch (the asked fraction of |mean|).
    pub(crate) shift: f64,
    /// `None`: not within 1000 seeds (the calibration's own n bounds what any number of
    /// seeds can see: calibrate with more runs).
    pub(crate) seeds: Option<usize>,
}

/// Per windowed golden rule of `checks` and per window of `cal`, the seeds needed to catch a
/// shift of `fraction` × |the window's mean| (each tail at the verdict's Bonferroni α).
pub(crate) fn seeds_needed(
    checks: &ChecksSpec,
    cal: &crate::model::golden::calibration::Calibration,
    fraction: f64,
) -> Vec<SeedsNeeded> {
    let rules: Vec<(&str, Direction, &Vec<PointStats>)> = checks
        .golden
        .iter()
        .filter(|(_, r)| r.window.unwrap_or(1) > 1)
        .filter_map(|(m, r)| {
            cal.windows
                .get(m)
                .map(|w| (m, r.resolved(m).direction(), w))
        })
        .collect();
    let m = rules
        .iter()
        .map(|(_, d, w)| w.len() * tails(*d))
        .sum::<usize>()
        .max(1);
    let alpha = family_alpha(checks) / m as f64;
    let mut out = Vec::new();
    for (metric, direction, windows) in rules {
        let tail = match direction {
            Direction::TwoSided => alpha / 2.0,
            _ => alpha,
        };
        for w in windows {
            let shift = fraction * w.mean.abs();
            let seeds =
                (2..=1000).find(|n| detectable_shift(w, *n, tail).is_some_and(|d| d <= shift));
            out.push(SeedsNeeded {
                metric: metric.to_string(),
                window: (w.first, w.last),
                mean: w.mean,
                sigma: w.std,
                shift,
                seeds,
            });
        }
    }
    out
}
