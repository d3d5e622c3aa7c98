//! A gating rule's power: the smallest move of its metric to the bad side it catches 80 % of
//! the time, and whether any move at all makes it fail.

use rand_chacha::ChaCha8Rng;

use super::model::Model;
use super::verdict_of;
use crate::judge::budget::POWER;
use crate::judge::verdict::RuleStatus;
use crate::model::checks::domain::positive;
use crate::model::checks::{ChecksSpec, Direction};
use crate::model::golden::Golden;
use crate::model::metrics::MetricTable;

/// `table` with `metric` moved to its bad side: by `shift` in its units, or by the factor
/// `shift` (> 1: up, < 1: down) on the log scale.
pub(super) fn shifted(table: &MetricTable, metric: &str, shift: Shift) -> MetricTable {
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
pub(super) enum Shift {
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

    pub(super) fn text(self) -> String {
        match self {
            Shift::Add(d) => format!("{d:+.4}"),
            Shift::Times(f) => format!("×{f:.3}"),
        }
    }
}

/// The smallest move of `metric` to its bad side that `rule` catches in [`POWER`] of
/// `draws` verdicts against today's calibration, and whether no move at all is caught.
#[allow(clippy::too_many_arguments)]
pub(super) fn power(
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
        .unwrap_or_else(|| crate::judge::default_direction(metric));
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
