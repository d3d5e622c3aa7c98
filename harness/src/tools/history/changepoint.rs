//! Change points in a series of runs: where the level of a metric's per-run value moved.
//!
//! The method is PELT (Killick, Fearnhead and Eckley, "Optimal detection of changepoints with a
//! linear computational cost", JASA 107(500), 2012): the exact minimiser of
//! `sum over segments of cost(segment) + penalty * (number of changes)`, found in linear time
//! on average by pruning start points that can never again be optimal. The segment cost is the
//! Gaussian mean-change cost with a known noise scale: `sum (x - segment mean)^2 / sigma^2`,
//! twice the negative log-likelihood of the segment up to a constant.
//!
//! Why this one: a history's noise is known. A scenario's calibration measured, per metric
//! window, the spread of the value across seeds (`sigma`), which is exactly the run-to-run
//! noise a nightly sees when nothing changed. With the noise scale known, the penalty is a
//! significance threshold: [`null_penalty`] sets it so that a series of pure noise of that
//! scale reports any change point with probability `alpha` (family-wise over the whole
//! series), by simulating such series. E-divisive means (Matteson and James 2014, as in Apache
//! Otava) needs no noise model, but then pays for it with permutation tests and a weaker
//! localisation on short series; it is the right choice without a calibration, which every
//! scenario the history judges has, or gets from its own series ([`robust_sigma`]).
//!
//! A segment is at least [`MIN_SEGMENT`] runs long: one odd run is an outlier, not a change.
//!
//! A multi-seed run is one point whose value is the mean of its `w` seeds: its noise is
//! `sigma / sqrt(w)`, so it weighs `w` in the cost (`sum w (x - weighted mean)^2 / sigma^2`,
//! [`detect_weighted`]). The penalty stays the one simulated for unit weights: at any one split
//! the drop in cost on pure noise is chi-squared with one degree of freedom whatever the
//! weights, and only how the splits' statistics correlate (and so their maximum) depends on
//! them, slightly.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::model::util::lock;

/// The fewest runs a level holds before it counts as one.
pub const MIN_SEGMENT: usize = 2;

/// One change: the series' level moved at run `index` (the first run at the new level).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangePoint {
    pub index: usize,
    /// The mean of the segment that ends before `index`.
    pub before: f64,
    /// The mean of the segment that starts at `index`.
    pub after: f64,
    /// `(after - before) / sigma`: the size of the move in noise units.
    pub z: f64,
}

/// Weighted prefix sums of a series, for segment costs in constant time.
struct Sums {
    w: Vec<f64>,
    s: Vec<f64>,
    s2: Vec<f64>,
}

impl Sums {
    fn new(x: &[f64]) -> Self {
        Self::weighted(x, &vec![1.0; x.len()])
    }

    fn weighted(x: &[f64], weights: &[f64]) -> Self {
        let mut w = vec![0.0];
        let mut s = vec![0.0];
        let mut s2 = vec![0.0];
        for (v, k) in x.iter().zip(weights) {
            w.push(w.last().unwrap() + k);
            s.push(s.last().unwrap() + k * v);
            s2.push(s2.last().unwrap() + k * v * v);
        }
        Self { w, s, s2 }
    }

    fn mean(&self, a: usize, b: usize) -> f64 {
        (self.s[b] - self.s[a]) / (self.w[b] - self.w[a])
    }

    /// `sum w (x - weighted mean)^2` over `x[a..b]`, never negative.
    fn cost(&self, a: usize, b: usize) -> f64 {
        let m = self.w[b] - self.w[a];
        let s = self.s[b] - self.s[a];
        (self.s2[b] - self.s2[a] - s * s / m).max(0.0)
    }
}

/// The optimal change points of `x` (each the index of a segment's first run) for the noise
/// scale `sigma` and the penalty `penalty` per change.
pub(crate) fn pelt(x: &[f64], sigma: f64, penalty: f64) -> Vec<usize> {
    pelt_weighted(x, &vec![1.0; x.len()], sigma, penalty)
}

/// [`pelt`] where run `i` is the mean of `weights[i]` runs (its noise `sigma / sqrt(w)`).
pub(crate) fn pelt_weighted(x: &[f64], weights: &[f64], sigma: f64, penalty: f64) -> Vec<usize> {
    let n = x.len();
    if n < 2 * MIN_SEGMENT {
        return Vec::new();
    }
    // Centre and scale first: the costs are then in noise units, and the sums stay exact.
    let centre = x.iter().sum::<f64>() / n as f64;
    let scaled: Vec<f64> = x.iter().map(|v| (v - centre) / sigma).collect();
    let sums = Sums::weighted(&scaled, weights);
    // f[t]: the best cost of x[..t]; last[t]: where its last segment starts.
    let mut f = vec![f64::INFINITY; n + 1];
    let mut last = vec![0usize; n + 1];
    f[0] = -penalty;
    let mut candidates: Vec<usize> = vec![0];
    for t in MIN_SEGMENT..=n {
        let mut best = f64::INFINITY;
        let mut arg = 0;
        for &s in candidates.iter().filter(|&&s| t - s >= MIN_SEGMENT) {
            let v = f[s] + sums.cost(s, t) + penalty;
            if v < best {
                best = v;
                arg = s;
            }
        }
        f[t] = best;
        last[t] = arg;
        // PELT's pruning, with the minimum segment: a start `s` that is already worse than
        // ending a segment at `u` (cost is additive and never negative) can never beat `u` at
        // a later end, and `u` is far enough back to be a feasible last start for every later
        // end.
        let u = t + 1 - MIN_SEGMENT;
        if u >= MIN_SEGMENT {
            candidates.retain(|&s| s >= u || f[s] + sums.cost(s, u) <= f[u]);
        }
        candidates.push(t);
    }
    let mut out = Vec::new();
    let mut t = n;
    while t > 0 {
        let s = last[t];
        if s > 0 {
            out.push(s);
        }
        t = s;
    }
    out.reverse();
    out
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The largest drop in cost one change buys in `x`: the single-split statistic.
fn best_single_split(sums: &Sums, n: usize) -> f64 {
    let whole = sums.cost(0, n);
    (MIN_SEGMENT..=n - MIN_SEGMENT)
        .map(|k| whole - sums.cost(0, k) - sums.cost(k, n))
        .fold(0.0, f64::max)
}

/// The smallest penalty at which PELT finds no change in `x` (noise scale 1): the series'
/// critical penalty, `max over k of (the best drop in cost with k changes) / k`. It is at
/// least the single-split statistic, and on noise it almost always is that: one PELT call
/// checks; otherwise a bisection finds it (the number of changes never grows with the
/// penalty).
fn critical_penalty(x: &[f64]) -> f64 {
    let n = x.len();
    if n < 2 * MIN_SEGMENT {
        return 0.0;
    }
    let single = best_single_split(&Sums::new(x), n);
    let mut lo = single;
    let mut hi = single * (1.0 + 1e-9) + 1e-9;
    if pelt(x, 1.0, hi).is_empty() {
        return hi;
    }
    while !pelt(x, 1.0, hi).is_empty() {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if pelt(x, 1.0, mid).is_empty() {
            hi = mid;
        } else {
            lo = mid;
        }
        if hi - lo < 1e-6 * hi {
            break;
        }
    }
    hi
}

/// The penalty at which `n` runs of pure noise report a change point with probability at most
/// `alpha`: the `1 - alpha` quantile of the critical penalty over `reps` simulated series
/// (seeded, so the same `n` always gets the same penalty), taken at its one-sided 95 % upper
/// confidence bound (an order statistic 1.645 binomial standard deviations higher), so that
/// the simulation's own noise errs on the side of fewer false changes. The costs are in
/// noise units, so the penalty does not depend on the noise's scale.
pub(crate) fn null_penalty(n: usize, alpha: f64, reps: usize, seed: u64) -> f64 {
    // Each series has its own seeded stream, so the result does not depend on the threads.
    let one = |r: usize| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((n as u64) << 32) ^ r as u64);
        let x: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
        critical_penalty(&x)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(8);
    let mut crit: Vec<f64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|w| scope.spawn(move || (w..reps).step_by(threads).map(one).collect::<Vec<_>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|h| h.join().expect("a penalty worker panicked"))
            .collect()
    });
    crit.sort_by(f64::total_cmp);
    let r = reps as f64;
    let upper = (1.0 - alpha) * r + 1.645 * (r * alpha * (1.0 - alpha)).sqrt();
    let k = (upper.ceil() as usize).clamp(1, reps);
    crit[k - 1]
}

/// The noise scale of a series that has no calibration: the median absolute difference of
/// neighbouring runs over `0.6745 * sqrt(2)` (a level shift moves one difference only, so it
/// barely moves this estimate). `None` for fewer than three runs.
pub(crate) fn robust_sigma(x: &[f64]) -> Option<f64> {
    if x.len() < 3 {
        return None;
    }
    let mut d: Vec<f64> = x.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    d.sort_by(f64::total_cmp);
    let mid = d.len() / 2;
    let median = if d.len() % 2 == 0 {
        0.5 * (d[mid - 1] + d[mid])
    } else {
        d[mid]
    };
    Some(median / (0.6745 * std::f64::consts::SQRT_2))
}

/// The significance of the history's change points: at most this chance that a series of
/// noise alone shows one.
pub const ALPHA: f64 = 0.05;

/// How many noise series set a penalty: at `ALPHA` 0.05, 100 of them fall past it.
pub(crate) const NULL_REPS: usize = 2000;

/// [`null_penalty`] for `n` runs at `alpha`, computed once per process.
pub(crate) fn penalty_for(n: usize, alpha: f64) -> f64 {
    static CACHE: Mutex<BTreeMap<(usize, u64), f64>> = Mutex::new(BTreeMap::new());
    let key = (n, alpha.to_bits());
    if let Some(p) = lock(&CACHE).get(&key) {
        return *p;
    }
    let p = null_penalty(n, alpha, NULL_REPS, 0x5EED);
    lock(&CACHE).insert(key, p);
    p
}

/// The change points of `x` at family-wise significance `alpha` for the noise scale `sigma`.
/// A scale of zero (a deterministic metric) makes every move a change.
pub fn detect(x: &[f64], sigma: f64, alpha: f64) -> Vec<ChangePoint> {
    detect_weighted(x, &vec![1.0; x.len()], sigma, alpha)
}

/// [`detect`] where run `i` is the mean of `weights[i]` seeds (see the module doc). The
/// levels before and after a change are weighted means.
pub(crate) fn detect_weighted(
    x: &[f64],
    weights: &[f64],
    sigma: f64,
    alpha: f64,
) -> Vec<ChangePoint> {
    let scale = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let sigma = sigma.max(scale * 1e-12).max(f64::MIN_POSITIVE);
    let penalty = penalty_for(x.len(), alpha);
    let cuts = pelt_weighted(x, weights, sigma, penalty);
    let mut bounds = vec![0];
    bounds.extend(&cuts);
    bounds.push(x.len());
    let sums = Sums::weighted(x, weights);
    cuts.iter()
        .enumerate()
        .map(|(i, &index)| {
            let before = sums.mean(bounds[i], index);
            let after = sums.mean(index, bounds[i + 2]);
            ChangePoint {
                index,
                before,
                after,
                z: (after - before) / sigma,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(n: usize, sigma: f64, seed: u64, shift_at: usize, shift: f64) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|i| 1.0 + sigma * normal(&mut rng) + if i >= shift_at { shift } else { 0.0 })
            .collect()
    }

    #[test]
    fn a_clear_step_is_found_where_it_is() {
        let mut x = vec![1.0, 1.01, 0.99, 1.0, 1.02, 0.98];
        x.extend([2.0, 2.01, 1.99, 2.0]);
        let cps = detect(&x, 0.01, ALPHA);
        assert_eq!(cps.len(), 1, "{cps:?}");
        assert_eq!(cps[0].index, 6);
        assert!((cps[0].before - 1.0).abs() < 1e-9 && (cps[0].after - 2.0).abs() < 1e-9);
        assert!(cps[0].z > 90.0);
    }

    #[test]
    fn pelt_is_the_exact_optimum_of_a_brute_force_search() {
        // Every segmentation of a short series with two changes at most, by brute force.
        for seed in 0..20 {
            let x = noisy(12, 1.0, seed, 6, if seed % 2 == 0 { 2.5 } else { 0.0 });
            let penalty = 6.0;
            let sums = Sums::new(&x);
            let cost_of = |cuts: &[usize]| {
                let mut b = vec![0];
                b.extend(cuts);
                b.push(x.len());
                b.windows(2).map(|w| sums.cost(w[0], w[1])).sum::<f64>()
                    + penalty * cuts.len() as f64
            };
            let mut best = (cost_of(&[]), vec![]);
            for a in MIN_SEGMENT..=x.len() - MIN_SEGMENT {
                if cost_of(&[a]) < best.0 {
                    best = (cost_of(&[a]), vec![a]);
                }
                for b in a + MIN_SEGMENT..=x.len() - MIN_SEGMENT {
                    if cost_of(&[a, b]) < best.0 {
                        best = (cost_of(&[a, b]), vec![a, b]);
                    }
                }
            }
            let got = pelt(&x, 1.0, penalty);
            if got.len() <= 2 {
                assert!(
                    (cost_of(&got) - best.0).abs() < 1e-9,
                    "seed {seed}: {got:?} vs {best:?}"
                );
            } else {
                assert!(cost_of(&got) <= best.0 + 1e-9);
            }
        }
    }

    #[test]
    fn the_penalty_is_seeded_and_grows_with_the_series() {
        assert_eq!(
            null_penalty(30, 0.05, 200, 1),
            null_penalty(30, 0.05, 200, 1)
        );
        let short = null_penalty(20, 0.05, 400, 1);
        let long = null_penalty(200, 0.05, 400, 1);
        assert!(short > 4.0 && long > short, "{short} {long}");
        assert!(null_penalty(60, 0.01, 400, 1) > null_penalty(60, 0.10, 400, 1));
    }

    #[test]
    fn a_deterministic_series_changes_at_every_move() {
        let x = [3.0, 3.0, 3.0, 3.5, 3.5, 3.5];
        let cps = detect(&x, 0.0, ALPHA);
        assert_eq!(cps.iter().map(|c| c.index).collect::<Vec<_>>(), [3]);
        assert!(detect(&[3.0; 8], 0.0, ALPHA).is_empty());
    }

    #[test]
    fn the_robust_scale_ignores_a_level_shift() {
        let x = noisy(200, 0.5, 3, 100, 10.0);
        let s = robust_sigma(&x).unwrap();
        assert!((s - 0.5).abs() < 0.1, "{s}");
        assert_eq!(robust_sigma(&[1.0, 2.0]), None);
    }

    /// Multi-seed points weigh their seeds: on 60 points of noise, half single runs and half
    /// 4-seed means (noise halved), the weighted test keeps its false rate near `ALPHA`; a
    /// shift of one seed's noise unit, 2.4 units of a 6-seed point, is found within 2 points
    /// at least 90 % of the time on 6-seed points.
    #[test]
    fn multi_seed_points_weigh_their_seeds() {
        let trials = 300;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (mut false_changes, mut found) = (0, 0);
        for _ in 0..trials {
            let w: Vec<f64> = (0..60).map(|i| if i < 30 { 1.0 } else { 4.0 }).collect();
            let flat: Vec<f64> = w.iter().map(|k| normal(&mut rng) / k.sqrt()).collect();
            if !detect_weighted(&flat, &w, 1.0, ALPHA).is_empty() {
                false_changes += 1;
            }
            let six = vec![6.0; 60];
            let shifted: Vec<f64> = (0..60)
                .map(|i| normal(&mut rng) / 6f64.sqrt() + if i >= 30 { 1.0 } else { 0.0 })
                .collect();
            if detect_weighted(&shifted, &six, 1.0, ALPHA)
                .iter()
                .any(|c| c.index.abs_diff(30) <= 2)
            {
                found += 1;
            }
        }
        let (fr, hit) = (
            false_changes as f64 / trials as f64,
            found as f64 / trials as f64,
        );
        println!("weighted: false {fr:.3}, found {hit:.3}");
        assert!(fr <= 0.08, "false-change rate {fr}");
        assert!(hit >= 0.9, "detection rate {hit}");
    }
}
