//! The plots' axes and lines: value ranges, tick labels that tell neighbours apart, finite
//! runs of a series, and a windowed rule's judged value as steps.

use crate::judge::PointCheck;
use crate::report::num;

/// The y range that shows every finite value (band edges included), padded a little.
pub(super) fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.08
    } else {
        (lo.abs() * 0.1).max(1e-6)
    };
    (lo - pad, hi + pad)
}

pub(super) fn x_range(steps: impl Iterator<Item = u64>) -> (f64, f64) {
    let (mut lo, mut hi) = (u64::MAX, 0);
    for s in steps {
        lo = lo.min(s);
        hi = hi.max(s);
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    (lo as f64 - 0.6, hi as f64 + 0.6)
}

/// A tick label on an axis spanning `lo..hi`, with the digits that tell it from its
/// neighbours (plotters puts about ten ticks on an axis), in scientific notation for tiny or
/// huge values: `0`, `2e-7`, `1.2e-6`, `0.285`, `2.5e6`.
pub(crate) fn tick_label(v: f64, lo: f64, hi: f64) -> String {
    let step = (hi - lo).abs() / 10.0;
    if !v.is_finite() || !step.is_finite() || step == 0.0 {
        return num(v);
    }
    // A tick at zero computed as 1e-17.
    if v.abs() < step * 1e-6 {
        return "0".into();
    }
    let step_exp = step.log10().floor() as i32;
    let magnitude = lo.abs().max(hi.abs());
    if !(1e-3..1e6).contains(&magnitude) {
        let exp = v.abs().log10().floor() as i32;
        let digits = (exp - step_exp).clamp(0, 6) as usize;
        let s = format!("{v:.digits$e}");
        match s.split_once('e') {
            Some((mantissa, exp)) => format!("{}e{exp}", trim_decimals(mantissa)),
            None => s,
        }
    } else {
        let decimals = (-step_exp).clamp(0, 9) as usize;
        trim_decimals(&format!("{v:.decimals$}"))
    }
}

/// `0.250` → `0.25`, `2.0` → `2`, `-0` → `0`.
fn trim_decimals(s: &str) -> String {
    let t = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    };
    if t == "-0" { "0" } else { t }.to_string()
}

/// Break a series at non-finite values so a NaN leaves a gap instead of a spike.
pub(super) fn finite_runs(series: &[(u64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![Vec::new()];
    for (s, v) in series {
        if v.is_finite() {
            if let Some(last) = out.last_mut() {
                last.push((*s as f64, *v));
            }
        } else if out.last().is_some_and(|l| !l.is_empty()) {
            out.push(Vec::new());
        }
    }
    out.retain(|r| !r.is_empty());
    out
}

/// Whether a rule's points are windows of steps (one window may hold a single step: the last).
pub(super) fn is_windowed(points: &[PointCheck]) -> bool {
    points.iter().any(|p| p.first != p.last)
}

/// The step line of the windows' judged values: flat over each window, rising or falling at
/// the boundary to the next; broken where a value is missing or windows are not adjacent.
pub(super) fn window_steps(
    points: &[PointCheck],
    clamp: impl Fn(f64) -> f64,
) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    let mut prev_last: Option<u64> = None;
    for p in points {
        let adjacent = prev_last.is_some_and(|l| l + 1 == p.first);
        match p.value.filter(|v| v.is_finite()) {
            Some(v) => {
                if !adjacent && out.last().is_some_and(|l| !l.is_empty()) {
                    out.push(Vec::new());
                }
                if let Some(line) = out.last_mut() {
                    line.push((p.first as f64 - 0.5, clamp(v)));
                    line.push((p.last as f64 + 0.5, clamp(v)));
                }
                prev_last = Some(p.last);
            }
            None => {
                out.push(Vec::new());
                prev_last = None;
            }
        }
    }
    out.retain(|l| !l.is_empty());
    out
}
