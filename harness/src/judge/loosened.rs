//! "Rules loosened since the golden was blessed": the rules a golden was blessed with
//! (`golden.yaml`'s `rules:` line) are a floor. A scenario whose rules are looser than those
//! fails, so a change cannot widen its own tolerances and pass against the old golden; it
//! must re-bless (`--update-golden`, review, accept), which records the new rules.
//!
//! Loosening, rule by rule (each side of a golden rule's band compared on its own, both
//! rules resolved with their metric's default direction first):
//! - a golden rule or an expectation removed (an expectation is known by its expression,
//!   whitespace aside: a changed expression is the old one removed);
//! - a wider band on either side: a larger `abs` or `rel`, or on a one-sided rule's good side
//!   a larger (or `unlimited`) `improvement_limit`; a direction change counts through the
//!   band it leaves;
//! - a larger `budget`, a longer `window` (a longer mean hides more), a `steps` range that
//!   leaves out steps the blessed one compared;
//! - a metric added to `allow_missing`;
//! - the default stability rules turned off (`checks.stability`), a rule switched from window
//!   means to medians.
//!
//! Tightening any of these is fine.

use super::verdict::{Evidence, RuleStatus, RuleVerdict};
use crate::model::checks::{ChecksSpec, Direction, GoldenRule, ImprovementLimit};

const WHY: &str = "rules loosened since the golden was blessed";

/// One side of a band: `None` is open (never fails), else (abs, rel).
type Side = Option<(f64, f64)>;

fn sides(r: &GoldenRule) -> (Side, Side) {
    let bad = Some((r.abs.unwrap_or(0.0), r.rel.unwrap_or(0.0)));
    let good = match r.improvement_limit {
        None => bad.map(|(a, rel)| {
            let f = super::tables::DEFAULT_IMPROVEMENT_FACTOR;
            (f * a, f * rel)
        }),
        Some(ImprovementLimit::Fraction(l)) => {
            Some((r.abs.unwrap_or(0.0), r.rel.unwrap_or(0.0).max(l)))
        }
        Some(ImprovementLimit::Unlimited) => None,
    };
    match r.direction() {
        Direction::TwoSided => (bad, bad),
        Direction::HigherIsBetter => (bad, good),
        Direction::LowerIsBetter => (good, bad),
    }
}

fn side_text(s: Side) -> String {
    match s {
        None => "open".into(),
        Some((a, r)) => format!("abs {a}, rel {r}"),
    }
}

fn wider(old: Side, new: Side) -> bool {
    match (old, new) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some((oa, or)), Some((na, nr))) => na > oa || nr > or,
    }
}

/// What about `new` is looser than `old` (empty when it is as strict or stricter).
fn loosenings(old: &GoldenRule, new: &GoldenRule) -> Vec<String> {
    let mut out = Vec::new();
    let (old_lo, old_hi) = sides(old);
    let (new_lo, new_hi) = sides(new);
    for (name, o, n) in [("lower", old_lo, new_lo), ("upper", old_hi, new_hi)] {
        if wider(o, n) {
            out.push(format!(
                "{name} side of the band {} -> {}",
                side_text(o),
                side_text(n)
            ));
        }
    }
    if let (Some(o), Some(n)) = (old.calibrated, new.calibrated) {
        // A hand-set k against one sized by the budget: the resolved widths decide
        // (`wider_bands`); a larger hand-set k or floor is loosening here.
        let larger_k = matches!((o.k, n.k), (Some(ok), Some(nk)) if nk > ok);
        if larger_k || n.floor > o.floor {
            let k = |k: Option<f64>| k.map_or("by budget".to_string(), |k| k.to_string());
            out.push(format!(
                "calibrated k {} floor {} -> k {} floor {}",
                k(o.k),
                o.floor,
                k(n.k),
                n.floor
            ));
        }
    }
    if new.budget > old.budget {
        out.push(format!("budget {} -> {}", old.budget, new.budget));
    }
    let (ow, nw) = (old.window.unwrap_or(1), new.window.unwrap_or(1));
    if nw > ow {
        out.push(format!("window {ow} -> {nw}"));
    }
    let (os, ns) = (old.steps.unwrap_or_default(), new.steps.unwrap_or_default());
    if ns.from.unwrap_or(0) > os.from.unwrap_or(0)
        || ns.to.unwrap_or(u64::MAX) < os.to.unwrap_or(u64::MAX)
    {
        out.push(format!("steps {os} -> {ns}"));
    }
    out
}

fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn json(r: &GoldenRule) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

fn failing(rule: String, metrics: Vec<String>, message: String) -> RuleVerdict {
    RuleVerdict {
        rule,
        status: RuleStatus::Regressed,
        evidence: Evidence {
            message,
            ..Evidence::default()
        },
        metrics,
        failing_steps: Vec::new(),
        points: Vec::new(),
        fail_fast: None,
    }
}

/// One failing rule (`loosened:<rule id>`) per rule of `current` that is looser than the one
/// the golden was blessed with (`blessed`), or per blessed rule that is gone.
pub(crate) fn loosened_rules(blessed: &ChecksSpec, current: &ChecksSpec) -> Vec<RuleVerdict> {
    let mut out = Vec::new();
    // A smaller budget widens every band sized by it.
    if current.alpha() < blessed.alpha() {
        out.push(failing(
            "loosened:alpha".to_string(),
            Vec::new(),
            format!(
                "{WHY}: the run's false-alarm budget `checks.alpha` fell from {} to {}, which \
                 widens every band it sizes: bless again",
                blessed.alpha(),
                current.alpha()
            ),
        ));
    }
    for (metric, old) in blessed.golden.iter() {
        let id = format!("golden:{metric}");
        let old = old.resolved(metric);
        match current.golden.get(metric) {
            None => out.push(failing(
                format!("loosened:{id}"),
                vec![metric.to_string()],
                format!("{WHY}: `{id}` was removed (blessed with {})", json(&old)),
            )),
            Some(new) => {
                let new = new.resolved(metric);
                let what = loosenings(&old, &new);
                if !what.is_empty() {
                    out.push(failing(
                        format!("loosened:{id}"),
                        vec![metric.to_string()],
                        format!(
                            "{WHY}: `{id}`: {}; blessed {}, now {}",
                            what.join("; "),
                            json(&old),
                            json(&new)
                        ),
                    ));
                }
            }
        }
    }
    for old in &blessed.expect {
        if !current
            .expect
            .iter()
            .any(|e| norm(&e.src) == norm(&old.src))
        {
            out.push(failing(
                format!("loosened:{}", old.id()),
                old.expr.metrics(),
                format!(
                    "{WHY}: the expectation `{}` was removed or changed",
                    old.src
                ),
            ));
        }
    }
    for (metric, new) in current.golden.iter() {
        if let Some(old) = blessed.golden.get(metric) {
            if new.median && !old.median {
                out.push(failing(
                    format!("loosened:golden:{metric}:median"),
                    vec![metric.to_string()],
                    format!(
                        "{WHY}: `golden:{metric}` now compares window medians (which hide a \
                         spike) where it was blessed with means"
                    ),
                ));
            }
        }
    }
    if blessed.stability == Some(true) && current.stability != Some(true) {
        out.push(failing(
            "loosened:stability".into(),
            Vec::new(),
            format!("{WHY}: the default stability rules were turned off (`checks.stability`)"),
        ));
    }
    for m in &current.allow_missing {
        if !blessed.allow_missing.contains(m) {
            out.push(failing(
                format!("loosened:allow_missing:{m}"),
                vec![m.clone()],
                format!("{WHY}: `{m}` was added to `checks.allow_missing`"),
            ));
        }
    }
    out
}

/// Relative slack for comparing a band recomputed from the same calibration (float noise).
const SAME_WIDTH: f64 = 1e-9;

/// One failing rule (`loosened:golden:<metric>:band`) per calibrated rule whose band, as
/// resolved with the golden's calibration today (`now`: per metric, each window's (first,
/// last, half-width)), is wider in some window than when the golden was blessed: the widths
/// `golden.yaml` recorded (`bands:`), or, for a rule blessed as an `abs`/`rel` band, that band's
/// tolerance around the golden's window. So `abs` turned into `calibrated: {k: 100}`, or a
/// noisier re-calibration, fails until a bless records the new widths.
pub(crate) fn wider_bands(
    blessed: &ChecksSpec,
    golden: &crate::model::golden::Golden,
    now: &crate::model::golden::BlessedBands,
) -> Vec<RuleVerdict> {
    let mut out = Vec::new();
    for (metric, windows) in now {
        let recorded = golden.bands.as_ref().and_then(|b| b.get(metric));
        let old_rule = blessed.golden.get(metric).map(|r| r.resolved(metric));
        let before = |first: u64, last: u64| -> Option<f64> {
            if let Some(r) = recorded {
                return r
                    .iter()
                    .find(|(a, b, _)| (*a, *b) == (first, last))
                    .map(|(_, _, h)| *h);
            }
            let rule = old_rule.as_ref().filter(|r| r.calibrated.is_none())?;
            let values: Vec<f64> = golden
                .table
                .series(metric)
                .into_iter()
                .filter(|(s, _)| (first..=last).contains(s))
                .map(|(_, v)| v)
                .collect();
            let g = rule.window_value(&values);
            g.is_finite().then(|| {
                rule.abs
                    .unwrap_or(0.0)
                    .max(rule.rel.unwrap_or(0.0) * g.abs())
            })
        };
        let wider: Vec<String> = windows
            .iter()
            .filter_map(|&(first, last, half)| {
                let old = before(first, last)?;
                (half > old * (1.0 + SAME_WIDTH) + f64::EPSILON).then(|| {
                    format!(
                        "steps {first}..{last} ±{} -> ±{}",
                        crate::judge::expr::fmt_num(old),
                        crate::judge::expr::fmt_num(half)
                    )
                })
            })
            .collect();
        if !wider.is_empty() {
            let since = if recorded.is_some() {
                "the widths recorded when the golden was blessed"
            } else {
                "the `abs`/`rel` band it was blessed with"
            };
            out.push(failing(
                format!("loosened:golden:{metric}:band"),
                vec![metric.clone()],
                format!(
                    "{WHY}: `golden:{metric}` resolves to a wider band than {since}: {}; a \
                     larger k or floor, or a noisier calibration, must be blessed again \
                     (`--update-golden`, review, `rlharness golden accept`)",
                    wider.join(", ")
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(json: &str) -> ChecksSpec {
        serde_json::from_str(json).unwrap()
    }

    fn one(old: &str, new: &str) -> Vec<RuleVerdict> {
        loosened_rules(
            &checks(&format!(r#"{{"golden": {{"m": {old}}}}}"#)),
            &checks(&format!(r#"{{"golden": {{"m": {new}}}}}"#)),
        )
    }

    #[test]
    fn wider_bands_larger_budgets_and_windows_are_loosening() {
        for (old, new, needle) in [
            (
                r#"{"abs": 0.05}"#,
                r#"{"abs": 0.1}"#,
                "abs 0.05, rel 0 -> abs 0.1, rel 0",
            ),
            (
                r#"{"rel": 0.05}"#,
                r#"{"rel": 0.06}"#,
                "rel 0.05 -> abs 0, rel 0.06",
            ),
            (
                r#"{"abs": 1}"#,
                r#"{"abs": 1, "budget": 2}"#,
                "budget 0 -> 2",
            ),
            (
                r#"{"abs": 1, "window": 2}"#,
                r#"{"abs": 1, "window": 5}"#,
                "window 2 -> 5",
            ),
            (
                r#"{"abs": 1}"#,
                r#"{"abs": 1, "steps": "3.."}"#,
                "steps .. -> 3..",
            ),
            (
                r#"{"abs": 1, "steps": "2..9"}"#,
                r#"{"abs": 1, "steps": "2..8"}"#,
                "steps 2..9 -> 2..8",
            ),
            (
                r#"{"abs": 1, "direction": "higher_is_better"}"#,
                r#"{"abs": 1, "direction": "higher_is_better", "improvement_limit": "unlimited"}"#,
                "upper side of the band abs 2, rel 0 -> open",
            ),
            // Two-sided -> one-sided: the good side's default edge is twice the tolerance.
            (
                r#"{"abs": 1}"#,
                r#"{"abs": 1, "direction": "higher_is_better"}"#,
                "upper side of the band abs 1, rel 0 -> abs 2, rel 0",
            ),
            (
                r#"{"rel": 0.1, "direction": "higher_is_better", "improvement_limit": 0.2}"#,
                r#"{"rel": 0.1, "direction": "higher_is_better", "improvement_limit": 0.3}"#,
                "upper side of the band abs 0, rel 0.2 -> abs 0, rel 0.3",
            ),
            // A direction flip moves the wide side of the band.
            (
                r#"{"rel": 0.1, "direction": "higher_is_better", "improvement_limit": 0.5}"#,
                r#"{"rel": 0.1, "direction": "lower_is_better", "improvement_limit": 0.5}"#,
                "lower side of the band abs 0, rel 0.1 -> abs 0, rel 0.5",
            ),
        ] {
            let v = one(old, new);
            assert_eq!(v.len(), 1, "{old} -> {new}: {v:?}");
            assert_eq!(v[0].rule, "loosened:golden:m");
            assert_eq!(v[0].status, RuleStatus::Regressed);
            let msg = &v[0].evidence.message;
            assert!(
                msg.starts_with("rules loosened since the golden was blessed: `golden:m`"),
                "{msg}"
            );
            assert!(msg.contains(needle), "{old} -> {new}: {msg}");
        }
    }

    #[test]
    fn tightening_and_equal_rules_are_fine() {
        for (old, new) in [
            (r#"{"abs": 0.1}"#, r#"{"abs": 0.1}"#),
            (r#"{"abs": 0.1}"#, r#"{"abs": 0.05}"#),
            (
                r#"{"abs": 0.1, "budget": 2}"#,
                r#"{"abs": 0.1, "budget": 1}"#,
            ),
            (
                r#"{"abs": 0.1, "window": 5}"#,
                r#"{"abs": 0.1, "window": 2}"#,
            ),
            (r#"{"abs": 0.1, "steps": "3.."}"#, r#"{"abs": 0.1}"#),
            // Two-sided -> one-sided with the default improvement limit: the bad side kept,
            // the good side wider (twice the tolerance) is a loosening, below.
            (
                r#"{"rel": 0.1, "direction": "higher_is_better", "improvement_limit": 0.3}"#,
                r#"{"rel": 0.1, "direction": "higher_is_better", "improvement_limit": 0.2}"#,
            ),
        ] {
            assert!(one(old, new).is_empty(), "{old} -> {new}");
        }
    }

    #[test]
    fn removed_rules_and_allowed_gaps_are_loosening() {
        let old = checks(
            r#"{"golden": {"m": {"abs": 1}, "n": {"abs": 1}}, "expect": ["max(m) <= 1", "min(n) > 0"]}"#,
        );
        let new = checks(
            r#"{"golden": {"m": {"abs": 1}}, "expect": ["max(m)  <=  1"], "allow_missing": ["n"]}"#,
        );
        let v = loosened_rules(&old, &new);
        let ids: Vec<&str> = v.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(
            ids,
            [
                "loosened:golden:n",
                "loosened:expect:min(n) > 0",
                "loosened:allow_missing:n"
            ]
        );
        assert!(v[0]
            .evidence
            .message
            .contains("was removed (blessed with {\"abs\":1"));
        assert!(loosened_rules(&new, &new).is_empty());
    }
}
