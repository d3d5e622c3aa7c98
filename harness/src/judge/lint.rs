//! `rlharness check`'s lint of rules that cannot fail. A golden rule is judged here the way the
//! judge judges a run, with the golden itself standing as the run (so every band is the one a
//! run would get, calibrated ones included), and is an error when:
//!
//! - its band cannot be crossed: at every step or window both edges lie outside the values its
//!   metric can take (an accuracy band of [−0.048, +∞) around a golden of 0.0015);
//! - it is a stability band of a metric that is positive in a healthy run (a gradient norm, an
//!   entropy) whose lower edge is at or below 0 in some window: a vanished gradient would pass;
//! - it is an expectation about finiteness or sanity of a series the golden holds constant at
//!   every step (a gradient norm of exactly 0: there is no gradient to check);
//! - it is calibrated, but the golden's calibration has no band for one of its windows, or
//!   measured window means where the rule now takes medians (or the reverse).
//!
//! Each error names the scenario file, the line of the rule (or of `checks:` for a default
//! rule), the key and the golden it was judged against.

use std::path::Path;

use super::run::{judge_run, RunRecord};
use crate::model::checks::domain::{domain, positive};
use crate::model::checks::ChecksSpec;
use crate::model::golden::{Golden, GoldenError, GoldenStore};
use crate::scenario::located::{error_at, fmt, line_of};
use crate::scenario::SpecError;

/// The golden folders of a scenario: `<golden root>/<name>/<hardware>/` that hold a golden,
/// each loaded as `run` loads it (a golden that does not read is its error, which `run` would
/// give too).
fn goldens(root: &Path, name: &str) -> Vec<(String, Result<Golden, GoldenError>)> {
    let store = GoldenStore::new(root);
    let Ok(entries) = std::fs::read_dir(root.join(name)) else {
        return Vec::new();
    };
    let mut hardware: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    hardware.sort();
    hardware
        .into_iter()
        .filter_map(|h| match store.load(name, &h) {
            Ok(Some(g)) => Some((h, Ok(g))),
            Ok(None) => None,
            Err(e) => Some((h, Err(e))),
        })
        .collect()
}

/// Each of a scenario's goldens that does not read (a series that does not match its header's
/// sha, a bad cell, a header or calibration that does not parse): an error at the scenario's
/// `name`, as `run` refuses it.
pub(crate) fn lint_golden_files(file: &Path, name: &str, golden_root: &Path) -> Vec<SpecError> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let line = text
        .lines()
        .position(|l| l.starts_with("name:"))
        .map_or(1, |i| i + 1);
    goldens(golden_root, name)
        .into_iter()
        .filter_map(|(hw, g)| {
            g.err().map(|e| {
                error_at(
                    file,
                    line,
                    "name".into(),
                    format!("its golden {name}/{hw} does not read: {e}"),
                )
            })
        })
        .collect()
}

/// One of a scenario's goldens that reads, where a lint's findings against it go: the scenario
/// file (its text, to find a rule's line) and the golden's name and hardware.
struct AgainstGolden<'a> {
    file: &'a Path,
    /// The scenario file's text.
    text: &'a str,
    name: &'a str,
    hardware: String,
    golden: Golden,
}

impl AgainstGolden<'_> {
    /// A finding at `line` and `key` of the scenario file, naming the golden.
    fn error(&self, line: usize, key: String, message: String) -> SpecError {
        error_at(
            self.file,
            line,
            key,
            format!("{message} (golden {}/{})", self.name, self.hardware),
        )
    }
}

/// Each of the goldens of the scenario `name` (written in `file`, whose text is `text`) that
/// reads, with where a finding against it goes; one that does not read is
/// `lint_golden_files`'s error.
fn readable_goldens<'a>(
    file: &'a Path,
    text: &'a str,
    name: &'a str,
    golden_root: &Path,
) -> impl Iterator<Item = AgainstGolden<'a>> {
    goldens(golden_root, name)
        .into_iter()
        .filter_map(move |(hardware, golden)| {
            Some(AgainstGolden {
                file,
                text,
                name,
                hardware,
                golden: golden.ok()?,
            })
        })
}

/// Every golden rule's metric the golden does not hold, and every expectation's metric one of
/// its columns nearly spells: typos until proven otherwise (they would only ever say
/// `missing`), with a did-you-mean. `run` refuses them too.
pub(crate) fn lint_metric_names(
    file: &Path,
    name: &str,
    checks: &ChecksSpec,
    golden_root: &Path,
) -> Vec<SpecError> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut errors = Vec::new();
    for at in readable_goldens(file, &text, name, golden_root) {
        // A rule on a metric the golden does not hold is a typo until proven otherwise: it
        // would only ever say `missing`.
        let columns = at.golden.table.columns();
        for (metric, _) in checks.golden.iter() {
            if !columns.iter().any(|c| c == metric) {
                let hint =
                    crate::scenario::error::closest(metric, columns.iter().map(String::as_str))
                        .map(|c| format!("; did you mean `{c}`?"))
                        .unwrap_or_default();
                errors.push(at.error(
                    line_of(at.text, Some("golden:"), metric),
                    format!("checks.golden.{metric}"),
                    format!("no metric `{metric}` in the golden{hint}"),
                ));
            }
        }
        // An expectation's metric the golden lacks but one of its columns nearly spells: a
        // typo, which would only ever fail as `missing`. (One far from every column may be a
        // metric a partial golden, e.g. published figures, does not hold.)
        for metric in checks.metrics().iter().skip(checks.golden.iter().count()) {
            if columns.iter().any(|c| c == metric) {
                continue;
            }
            if let Some(c) =
                crate::scenario::error::closest(metric, columns.iter().map(String::as_str))
            {
                errors.push(at.error(
                    line_of(at.text, Some("expect:"), metric),
                    "checks.expect".into(),
                    format!("no metric `{metric}` in the golden; did you mean `{c}`?"),
                ));
            }
        }
    }
    errors
}

/// The lint of every golden rule and expectation of one scenario against each of its goldens.
pub(crate) fn lint_rules(
    file: &Path,
    name: &str,
    checks: &ChecksSpec,
    golden_root: &Path,
) -> Vec<SpecError> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut errors = Vec::new();
    for at in readable_goldens(file, &text, name, golden_root) {
        for (metric, key, message) in lint_against(checks, &at.golden) {
            let line = match key.as_str() {
                k if k.starts_with("checks.golden.") => line_of(at.text, Some("golden:"), &metric),
                k if k.starts_with("checks.expect") => line_of(at.text, Some("expect:"), &metric),
                _ => line_of(at.text, None, "checks:"),
            };
            errors.push(at.error(line, key, message));
        }
    }
    errors
}

/// Warnings (never errors: a calibration that cannot be redone here, a GPU scenario's when no
/// device is lent, keeps gating with its wider bands) about each golden's calibration: too
/// small for the windows that share the run's false-alarm budget, at the line of the first
/// rule it sizes.
pub(crate) fn lint_calibration(
    file: &Path,
    name: &str,
    checks: &ChecksSpec,
    golden_root: &Path,
) -> Vec<SpecError> {
    use crate::judge::budget::{in_budget, too_small, Budget};
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out = Vec::new();
    for at in readable_goldens(file, &text, name, golden_root) {
        let Some(cal) = &at.golden.calibration else {
            continue;
        };
        let Some(why) = too_small(Budget::of(checks, Some(&at.golden)), cal.runs) else {
            continue;
        };
        let (line, key) = match checks.golden.iter().find(|(_, r)| in_budget(r)) {
            Some((m, _)) => (
                line_of(at.text, Some("golden:"), m),
                format!("checks.golden.{m}"),
            ),
            None => (line_of(at.text, None, "checks:"), "checks.stability".into()),
        };
        out.push(at.error(line, key, why));
    }
    out
}

/// `(metric, key path, message)` of each rule of `checks` that cannot fail against `golden`.
pub(crate) fn lint_against(checks: &ChecksSpec, golden: &Golden) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let record = RunRecord::completed(&golden.table, checks, golden.provenance.seed.unwrap_or(0));
    let Some(verdict) = judge_run(&record, Some(golden)) else {
        return out;
    };
    for r in &verdict.rules {
        let (metric, key, stability) = if let Some(m) = r.rule.strip_prefix("golden:") {
            (m, format!("checks.golden.{m}"), false)
        } else if let Some(m) = r.rule.strip_prefix("stability:") {
            (m, "checks.stability".to_string(), true)
        } else {
            continue;
        };
        // A calibrated rule whose windows (or window statistic) the calibration did not
        // measure: never silently another window's σ.
        if r.status == crate::judge::RuleStatus::Missing && r.evidence.message.contains("calibrat")
        {
            out.push((
                metric.to_string(),
                key.clone(),
                format!("`{}`: {}", r.rule, r.evidence.message),
            ));
            continue;
        }
        if r.points.is_empty() {
            continue;
        }
        let (lo, hi) = domain(metric);
        let crossable = |p: &crate::judge::PointCheck| {
            p.band.lo.is_some_and(|l| l > lo) || p.band.hi.is_some_and(|h| h < hi)
        };
        if !r.points.iter().any(crossable) {
            let p = &r.points[0];
            out.push((
                metric.to_string(),
                key.clone(),
                format!(
                    "`{}` cannot fail: at every {} its band lies outside the values `{metric}` \
                     can take [{}, {}] (at {}: [{}, {}] around {})",
                    r.rule,
                    if p.first == p.last { "step" } else { "window" },
                    fmt(lo),
                    fmt(hi),
                    p.at(),
                    fmt(p.band.lo()),
                    fmt(p.band.hi()),
                    p.golden.map_or("–".into(), fmt)
                ),
            ));
            continue;
        }
        if stability && positive(metric) {
            let open: Vec<String> = r
                .points
                .iter()
                .filter(|p| p.band.lo.is_none_or(|l| l <= 0.0))
                .map(|p| format!("{} (lower edge {})", p.at(), fmt(p.band.lo())))
                .collect();
            if !open.is_empty() {
                out.push((
                    metric.to_string(),
                    key.clone(),
                    format!(
                        "`{}`: the lower edge of its band is at or below 0 at {}: `{metric}` is \
                         positive in a healthy run, so a vanished `{metric}` would pass there; \
                         name `{metric}` in `checks.golden` with a band that excludes 0",
                        r.rule,
                        open.join(", ")
                    ),
                ));
            }
        }
    }
    out.extend(wider_than_calibrated(checks, golden));
    for (i, e) in checks.expect.iter().enumerate() {
        let src = e.src.to_ascii_lowercase();
        if !(src.contains("finite") || src.contains("sanity")) {
            continue;
        }
        for metric in e.expr.metrics() {
            let values: Vec<f64> = golden
                .table
                .series(&metric)
                .into_iter()
                .map(|(_, v)| v)
                .collect();
            if values.len() > 1 && values.iter().all(|v| v.to_bits() == values[0].to_bits()) {
                out.push((
                    metric.clone(),
                    format!("checks.expect[{i}]"),
                    format!(
                        "`{}` checks `{metric}`, but the golden's `{metric}` is {} at every \
                         step: a series that never moves tests nothing (is anything learning?)",
                        e.name.as_deref().unwrap_or(&e.src),
                        fmt(values[0])
                    ),
                ));
            }
        }
    }
    out
}

/// How many times its calibration's spread a hand-set band may be at every window before it is
/// called wider than the calibration allows.
const WIDER_THAN_CALIBRATED: f64 = 20.0;

/// Hand-set golden rules (`abs`/`rel`) whose band is more than [`WIDER_THAN_CALIBRATED`] times
/// the calibration's spread at every window the calibration measured (`abs: 100` on a reward):
/// no regression short of a collapse can fail them.
fn wider_than_calibrated(checks: &ChecksSpec, golden: &Golden) -> Vec<(String, String, String)> {
    let Some(cal) = &golden.calibration else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (metric, rule) in checks.golden.iter() {
        if rule.calibrated.is_some() || (rule.abs.is_none() && rule.rel.is_none()) {
            continue;
        }
        let Some(windows) = cal.windows.get(metric).filter(|w| !w.is_empty()) else {
            continue;
        };
        if windows.iter().any(|w| w.std <= 0.0) {
            continue;
        }
        let tol = |g: f64| {
            rule.abs
                .unwrap_or(0.0)
                .max(rule.rel.unwrap_or(0.0) * g.abs())
        };
        let ratios: Vec<f64> = windows.iter().map(|w| tol(w.mean) / w.std).collect();
        let least = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        if least > WIDER_THAN_CALIBRATED {
            out.push((
                metric.to_string(),
                format!("checks.golden.{metric}"),
                format!(
                    "`golden:{metric}` can hardly fail: its band is at least {:.0} times the \
                     spread its calibration measured at every window ({} runs, σ up to {}), so \
                     only a collapse fails it; narrow it, or make it `calibrated: {{}}`",
                    least,
                    cal.runs,
                    fmt(windows.iter().map(|w| w.std).fold(0.0, f64::max))
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::metrics::{MetricTable, StepMetrics};

    fn golden(series: &[(&str, &[f64])]) -> Golden {
        let mut t = MetricTable::new();
        for s in 0..series[0].1.len() {
            let mut m = StepMetrics::new(s as u64 + 1);
            for (name, values) in series {
                m.insert(*name, values[s]);
            }
            t.push(m);
        }
        Golden {
            scenario: "s".into(),
            hardware: "cpu".into(),
            table: t,
            provenance: Default::default(),
            rules: None,
            bands: None,
            dir: std::path::PathBuf::from("golden/s/cpu"),
            calibration: None,
            digest: Default::default(),
            audit: None,
        }
    }

    fn checks(json: &str) -> ChecksSpec {
        serde_json::from_str(json).unwrap()
    }

    fn messages(c: &ChecksSpec, g: &Golden) -> Vec<String> {
        lint_against(c, g).into_iter().map(|(_, _, m)| m).collect()
    }

    #[test]
    fn a_band_that_cannot_be_crossed_is_an_error() {
        let g = golden(&[("val/acc", &[0.0, 0.0, 0.0, 0.0015])]);
        let one_sided = checks(
            r#"{"golden": {"val/acc": {"abs": 0.05, "steps": "4", "direction": "higher_is_better", "improvement_limit": "unlimited"}}}"#,
        );
        let m = messages(&one_sided, &g);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("`golden:val/acc` cannot fail"), "{m:?}");
        assert!(m[0].contains("[0, 1]"), "{m:?}");
        // Two-sided, its upper edge (0.0515) can be crossed.
        let two_sided = checks(r#"{"golden": {"val/acc": {"abs": 0.05, "steps": "4"}}}"#);
        assert!(messages(&two_sided, &g).is_empty());
    }

    #[test]
    fn a_finiteness_check_of_a_series_that_never_moves_is_an_error() {
        let zero = golden(&[("actor/grad_norm", &[0.0, 0.0, 0.0])]);
        let c = checks(
            r#"{"expect": [{"name": "grad-finite", "expr": "all(actor/grad_norm, finite)"}]}"#,
        );
        let m = messages(&c, &zero);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].contains("`grad-finite` checks `actor/grad_norm`"),
            "{m:?}"
        );
        assert!(m[0].contains("is 0 at every step"), "{m:?}");
        let moving = golden(&[("actor/grad_norm", &[0.3, 0.2, 0.25])]);
        assert!(messages(&c, &moving).is_empty());
    }

    #[test]
    fn a_stability_band_of_a_positive_metric_that_reaches_zero_is_an_error() {
        // A golden whose gradient norm is 0 over steps 6..10: the default stability band's
        // lower edge there is 0 (KEEP_ABOVE × 0), so a vanished gradient would pass.
        let mut gn = vec![0.2; 5];
        gn.extend([0.0; 5]);
        let g = golden(&[("actor/grad_norm", &gn)]);
        let on = checks(r#"{"stability": true}"#);
        let m = messages(&on, &g);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].contains("`stability:actor/grad_norm`") && m[0].contains("steps 6..10"),
            "{m:?}"
        );
        assert!(!m[0].contains("steps 1..5"), "{m:?}");
        // A healthy golden: the lower edge is KEEP_ABOVE of the window median, above 0.
        let healthy = golden(&[("actor/grad_norm", &[0.2; 10])]);
        assert!(messages(&on, &healthy).is_empty());
    }

    #[test]
    fn a_calibrated_rule_whose_windows_the_calibration_lacks_is_an_error() {
        use crate::model::golden::calibration::Calibration;
        let reward: Vec<f64> = (0..10).map(|i| 0.1 + 0.05 * i as f64).collect();
        let mut g = golden(&[("critic/rewards/mean", &reward)]);
        let calibrated_at = |window: u64, median: bool| {
            let c = checks(&format!(
                r#"{{"golden": {{"critic/rewards/mean": {{"window": {window}, "median": {median}, "calibrated": {{"k": 4}}}}}}}}"#
            ));
            // Three runs at the golden ± 0.01.
            let runs: Vec<_> = [-0.01, 0.0, 0.01]
                .iter()
                .map(|d| {
                    let shifted: Vec<f64> = reward.iter().map(|r| r + d).collect();
                    golden(&[("critic/rewards/mean", &shifted)]).table
                })
                .collect();
            let (steps, windows) = Calibration::measure(&runs, &c);
            Calibration {
                scenario: "s".into(),
                hardware: "cpu".into(),
                date: String::new(),
                host: "h".into(),
                git_commit: None,
                numeric_fingerprint: None,
                runs: 3,
                seeds: vec![2, 3, 4],
                steps,
                windows,
            }
        };
        let rule = |window: u64, median: bool| {
            checks(&format!(
                r#"{{"golden": {{"critic/rewards/mean": {{"window": {window}, "median": {median}, "calibrated": {{"k": 4}}}}}}}}"#
            ))
        };
        g.calibration = Some(calibrated_at(5, false));
        assert!(messages(&rule(5, false), &g).is_empty());
        // The rule's windows changed since: 1..4, 5..8, 9..10 were never measured.
        let m = messages(&rule(4, false), &g);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].contains("no band for the window(s) 1..4, 5..8, 9..10")
                && m[0].contains("it measured 1..5, 6..10"),
            "{m:?}"
        );
        // Same windows, now medians where the calibration measured means.
        let m = messages(&rule(5, true), &g);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].contains("measured window means, the rule now compares window medians"),
            "{m:?}"
        );
    }
}
