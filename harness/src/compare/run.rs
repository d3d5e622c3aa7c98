//! The one judge of a run: every rule, whatever decides it, from what the run directory
//! stores. `rlharness run` calls [`judge_run`] on the run it just made, `rlharness compare RUN`
//! on the same facts read back from disk, so both write the same verdict.
//!
//! What it reads: the series (`metrics.csv`); from `run.json` the checks, how the run ended
//! (status, reason, step), the values the runner dropped from the series as insane (an MFU
//! outside (0, 1]) and a replay's account of the requests it was sent; and the golden (its
//! series and the rules it was blessed with). What it decides, in this order of rules:
//! - the golden rules and expectations (`judge`); expectations read the series with the
//!   dropped values put back, so `max(perf/mfu/actor) <= 1` fails on the MFU of 1.3 that the
//!   plots never show;
//! - presence: every golden metric at every golden step the run reached (`presence`);
//! - rules loosened since the golden was blessed (`loosened`);
//! - sanity: each dropped value is a failed `sanity:0 < {metric} <= 1`;
//! - replay: `replay:requests match the cassette`;
//! - watchdog: a run the watchdog stopped (a hang or time-out, a non-finite watched metric, a
//!   fail-fast rule) fails `watchdog:<status>` with the stored reason and step.

use serde::{Deserialize, Serialize};

use super::judge::{
    json_f64, judge, Evidence, Outcome, RuleStatus, RuleVerdict, RunStatus, Verdict,
};
use crate::checks::expr::fmt_num;
use crate::checks::{ChecksSpec, WindowBand};
use crate::golden::Golden;
use crate::metrics::MetricTable;

/// Metrics that are a fraction of a peak, so a value outside (0, 1] cannot be true.
pub(crate) const FRACTION_METRICS: &[&str] = &["perf/mfu/actor"];

/// Whether the runner must keep `value` of `metric` out of the series (and the judge fail
/// `sanity:0 < {metric} <= 1` on it): a fraction of a peak outside (0, 1], NaN included.
pub(crate) fn is_insane(metric: &str, value: f64) -> bool {
    FRACTION_METRICS.contains(&metric) && !(value > 0.0 && value <= 1.0)
}

/// A value the runner kept out of the series because it cannot be true (an MFU outside
/// (0, 1]); stored in `run.json` so the sanity rule can be judged again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedValue {
    pub(crate) step: u64,
    pub(crate) metric: String,
    #[serde(with = "json_f64")]
    pub(crate) value: Option<f64>,
}

impl DroppedValue {
    pub(crate) fn new(step: u64, metric: impl Into<String>, value: f64) -> DroppedValue {
        DroppedValue {
            step,
            metric: metric.into(),
            value: Some(value),
        }
    }

    fn value(&self) -> f64 {
        self.value.unwrap_or(f64::NAN)
    }
}

/// A replay backend's account of the requests it was sent, as `run.json` keeps it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReplayRecord {
    /// The cassette folder, as the scenario resolved it.
    pub(crate) cassette: String,
    /// Exchanges in the cassette.
    pub(crate) recorded: usize,
    /// Requests served.
    pub(crate) served: usize,
    /// Every mismatch, first first, as the report words it.
    #[serde(default)]
    pub(crate) mismatches: Vec<String>,
}

/// The rule id of a replay.
pub(crate) const REPLAY_RULE: &str = "replay:requests match the cassette";

impl ReplayRecord {
    pub(crate) fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }

    /// The first mismatch, and how many there were.
    pub(crate) fn summary(&self) -> String {
        match self.mismatches.as_slice() {
            [] => format!(
                "all {} recorded exchanges requested as recorded ({})",
                self.recorded, self.cassette
            ),
            [only] => only.clone(),
            [first, ..] => format!("{first}; {} mismatches in all", self.mismatches.len()),
        }
    }

    /// The verdict's rule for this replay: passes when every request matched.
    pub(crate) fn rule_verdict(&self) -> RuleVerdict {
        RuleVerdict {
            rule: REPLAY_RULE.to_string(),
            status: if self.passed() {
                RuleStatus::Pass
            } else {
                RuleStatus::Regressed
            },
            evidence: Evidence {
                value: Some(self.mismatches.len() as f64),
                message: self.summary(),
                ..Evidence::default()
            },
            metrics: Vec::new(),
            failing_steps: Vec::new(),
            points: Vec::new(),
            fail_fast: None,
        }
    }
}

/// Everything about a run the judge reads (what `run.json` and `metrics.csv` store).
#[derive(Debug, Clone, Copy)]
pub struct RunRecord<'a> {
    pub metrics: &'a MetricTable,
    pub checks: &'a ChecksSpec,
    pub status: RunStatus,
    pub reason: Option<&'a str>,
    pub failed_step: Option<u64>,
    pub dropped: &'a [DroppedValue],
    pub replay: Option<&'a ReplayRecord>,
    /// A deterministic backend's numerics and the run's seed: the exact lane's key.
    pub numerics: Option<&'a crate::wire::runtime::Numerics>,
    pub seed: u64,
}

/// The series with the dropped values put back: what expectations read.
fn with_dropped(metrics: &MetricTable, dropped: &[DroppedValue]) -> MetricTable {
    let mut rows: Vec<crate::metrics::StepMetrics> = metrics.rows().to_vec();
    for d in dropped {
        match rows.iter_mut().find(|r| r.step == d.step) {
            Some(r) => r.insert(d.metric.clone(), d.value()),
            None => {
                let mut m = crate::metrics::StepMetrics::new(d.step);
                m.insert(d.metric.clone(), d.value());
                rows.push(m);
            }
        }
    }
    rows.sort_by_key(|r| r.step);
    let mut t = MetricTable::new();
    for r in rows {
        t.push(r);
    }
    t
}

fn sanity_rule(d: &DroppedValue) -> RuleVerdict {
    let (step, metric, value) = (d.step, &d.metric, d.value());
    RuleVerdict {
        rule: format!("sanity:0 < {metric} <= 1"),
        status: RuleStatus::Regressed,
        evidence: Evidence {
            step_or_window: Some(format!("step {step}")),
            value: Some(value),
            message: format!(
                "{metric} = {value} at step {step} is outside (0, 1]; dropped from the series"
            ),
            ..Evidence::default()
        },
        metrics: vec![metric.clone()],
        failing_steps: vec![step],
        points: Vec::new(),
        fail_fast: None,
    }
}

/// The rule id of the watchdog's verdict on a run it stopped.
fn watchdog_rule_id(status: RunStatus) -> String {
    format!("watchdog:{}", status.as_str())
}

fn watchdog_rule(run: &RunRecord<'_>) -> Option<RuleVerdict> {
    if !matches!(run.status, RunStatus::Aborted | RunStatus::TimedOut) {
        return None;
    }
    let reason = run.reason.unwrap_or("stopped by the watchdog");
    Some(RuleVerdict {
        rule: watchdog_rule_id(run.status),
        status: RuleStatus::Regressed,
        evidence: Evidence {
            step_or_window: run.failed_step.map(|s| format!("step {s}")),
            message: format!(
                "the run was stopped at step {}: {reason}",
                run.failed_step
                    .map_or_else(|| "?".to_string(), |s| s.to_string())
            ),
            ..Evidence::default()
        },
        metrics: Vec::new(),
        failing_steps: run.failed_step.into_iter().collect(),
        points: Vec::new(),
        fail_fast: None,
    })
}

/// Judge a run from what its directory stores. `None` when there is nothing to judge: a run
/// that broke (crash, interrupt) before any rule could be decided.
pub fn judge_run(run: &RunRecord<'_>, golden: Option<&Golden>) -> Option<Verdict> {
    let (resolved, sources) = resolve_calibrated(run.checks, golden);
    let mut verdict = judge(run.metrics, golden, resolved.as_ref().unwrap_or(run.checks));
    for (metric, source) in sources {
        let Some(r) = verdict
            .rules
            .iter_mut()
            .find(|r| r.rule == format!("golden:{metric}"))
        else {
            continue;
        };
        match source {
            Ok(text) => r.evidence.message.push_str(&format!("; band {text}")),
            Err(why) => {
                r.status = RuleStatus::Missing;
                r.evidence = Evidence {
                    message: why,
                    ..Evidence::default()
                };
                r.points.clear();
                r.failing_steps.clear();
            }
        }
    }
    // Expectations see the values the series dropped (see the module doc).
    if !run.dropped.is_empty() && !run.checks.expect.is_empty() {
        let raw = with_dropped(run.metrics, run.dropped);
        let only_expect = ChecksSpec {
            expect: run.checks.expect.clone(),
            ..ChecksSpec::default()
        };
        let again = judge(&raw, None, &only_expect);
        for fresh in again.rules {
            if let Some(r) = verdict.rules.iter_mut().find(|r| r.rule == fresh.rule) {
                *r = fresh;
            }
        }
    }
    let mut extra = Vec::new();
    if let Some(g) = golden.filter(|_| !run.checks.golden.is_empty()) {
        extra.extend(super::presence::judge_presence(
            run.metrics,
            &g.table,
            run.checks,
        ));
        if let Some(blessed) = &g.rules {
            extra.extend(super::loosened::loosened_rules(blessed, run.checks));
            extra.extend(super::loosened::wider_bands(
                blessed,
                g,
                &band_widths(run.checks, Some(g)),
            ));
        }
    }
    if let Some(g) = golden {
        extra.extend(stability_rules(run, g));
    }
    extra.extend(run.dropped.iter().map(sanity_rule));
    extra.extend(run.replay.map(ReplayRecord::rule_verdict));
    extra.extend(watchdog_rule(run));
    if let Some(g) = golden {
        let (lane, rule) = super::exact::judge_lane(run.metrics, g, run.numerics, run.seed);
        extra.extend(rule);
        verdict.exact_lane = Some(lane);
    }
    verdict.rules.extend(extra);
    let no_golden = golden.is_none() && !run.checks.golden.is_empty();
    verdict.outcome = outcome_of(&verdict, no_golden);
    let judged = run.status == RunStatus::Completed;
    (judged || !verdict.rules.is_empty()).then_some(verdict)
}

/// The default stability rules (`compare::stability`) of a learning scenario, judged against
/// the golden like golden rules and named `stability:<metric>`.
fn stability_rules(run: &RunRecord<'_>, g: &Golden) -> Vec<RuleVerdict> {
    use super::stability;
    let calibrated = |m: &str| g.calibration.as_ref().is_some_and(|c| c.sigma(m).is_some());
    let rules = stability::rules(run.checks, &g.table.columns(), calibrated);
    if rules.is_empty() {
        return Vec::new();
    }
    let spec = ChecksSpec {
        golden: rules,
        ..ChecksSpec::default()
    };
    let (resolved, sources) = resolve_calibrated(&spec, Some(g));
    let verdict = judge(run.metrics, Some(g), resolved.as_ref().unwrap_or(&spec));
    verdict
        .rules
        .into_iter()
        .map(|mut r| {
            let metric = r
                .rule
                .strip_prefix("golden:")
                .unwrap_or(&r.rule)
                .to_string();
            let source = sources.iter().find(|(m, _)| *m == metric);
            if let Some((_, Ok(text))) = source {
                r.evidence.message.push_str(&format!("; band {text}"));
            }
            r.evidence
                .message
                .push_str(&format!("; {}", stability::note(source.is_some())));
            r.rule = stability::rule_id(&metric);
            r
        })
        .collect()
}

/// What a run's verdict is judged against, as `run.json` records it: the golden's digests and
/// each calibrated band as resolved (`golden:<metric>` → its text, or why it has none).
pub(crate) fn judged_against(checks: &ChecksSpec, golden: &Golden) -> crate::golden::JudgedAgainst {
    let (_, sources) = resolve_calibrated(checks, Some(golden));
    crate::golden::JudgedAgainst {
        digest: golden.digest.clone(),
        bands: sources
            .into_iter()
            .map(|(m, b)| (format!("golden:{m}"), b.unwrap_or_else(|why| why)))
            .collect(),
    }
}

/// The calibrated bands `checks` resolve to with `golden`'s calibration: per calibrated rule
/// the calibration can resolve, each window's (first, last, half-width). What a bless records
/// (`golden.yaml`'s `bands:`) and what the loosening guard compares with it.
pub(crate) fn band_widths(
    checks: &ChecksSpec,
    golden: Option<&Golden>,
) -> crate::golden::BlessedBands {
    let (resolved, _) = resolve_calibrated(checks, golden);
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

/// The standard normal quantile of [`super::seeds::POWER`] (0.8).
const Z_POWER: f64 = 0.841_621_233_572_914_3;

/// The checks a run watches while it runs (its `fail_fast` rules): calibrated rules with the
/// bands the golden's calibration gives them. A calibrated rule the calibration cannot resolve
/// never fails fast (its final verdict is `missing`, with the command to run); judged raw it
/// would have a band of width 0 and abort the run at its first window.
pub(crate) fn live_checks(checks: &ChecksSpec, golden: Option<&Golden>) -> ChecksSpec {
    let (resolved, sources) = resolve_calibrated(checks, golden);
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
/// or why it has none.
#[allow(clippy::type_complexity)]
fn resolve_calibrated(
    checks: &ChecksSpec,
    golden: Option<&Golden>,
) -> (Option<ChecksSpec>, Vec<(String, Result<String, String>)>) {
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
            sources.push((
                metric.clone(),
                Err(format!(
                    "`{metric}` asks for a calibrated band, but the golden has no calibration of \
                     it: run `rlharness golden calibrate` on the scenario"
                )),
            ));
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
                Err(format!(
                    "`{metric}`: the calibration measured window {}, the rule now compares window \
                     {}: run `rlharness golden calibrate` again",
                    stat(m),
                    stat(rule.median)
                )),
            ));
            continue;
        }
        let bands: Vec<WindowBand> = windows
            .iter()
            .map(|w| WindowBand {
                first: w.first,
                last: w.last,
                centre: w.mean,
                half: (c.k * w.std * (1.0 + 1.0 / w.n.max(1) as f64).sqrt()).max(c.floor),
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
        let halves = format!("±{}", span(&mut bands.iter().map(|b| b.half)));
        // One run's window lands past the bad edge with probability Φ((δ − half) / σ): 80 %
        // at δ = half + z₀.₈ σ, σ being the window's spread over the calibration runs.
        let power = span(
            &mut bands
                .iter()
                .zip(windows.iter())
                .map(|(b, w)| b.half + Z_POWER * w.std),
        );
        rule.window_bands = Some(bands);
        sources.push((
            metric.clone(),
            Ok(format!(
                "{halves} calibrated per window: max(k {} × the window's σ × √(1 + 1/n), floor {}) \
                 around the calibration's mean of the window, from {}; one run catches a shift \
                 of {power} on the bad side {:.0}% of the time",
                c.k,
                c.floor,
                cal.source(),
                super::seeds::POWER * 100.0
            )),
        ));
    }
    (Some(resolved), sources)
}

/// The verdict's outcome from its rules: the same precedence as `judge_tables` (a regression
/// first, then a missing golden, missing metrics, a grid mismatch, an improvement).
pub(crate) fn outcome_of(v: &Verdict, no_golden: bool) -> Outcome {
    let has = |s: RuleStatus| v.rules.iter().any(|r| r.status == s);
    let expect_missing = v
        .rules
        .iter()
        .any(|r| r.status == RuleStatus::Missing && r.rule.starts_with("expect:"));
    if has(RuleStatus::Regressed) {
        Outcome::Regressed
    } else if no_golden && !expect_missing {
        Outcome::NoGolden
    } else if has(RuleStatus::Missing) {
        Outcome::Missing
    } else if v.grid_mismatch.is_some() {
        Outcome::GridMismatch
    } else if has(RuleStatus::Improved) {
        Outcome::Improved
    } else {
        Outcome::Passed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::Provenance;
    use crate::metrics::StepMetrics;

    fn table(cols: &[(&str, &[f64])]) -> MetricTable {
        let mut t = MetricTable::new();
        let n = cols.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        for i in 0..n {
            let mut m = StepMetrics::new(i as u64 + 1);
            for (name, v) in cols {
                if let Some(x) = v.get(i) {
                    if !x.is_nan() {
                        m.insert(*name, *x);
                    }
                }
            }
            t.push(m);
        }
        t
    }

    fn checks(json: &str) -> ChecksSpec {
        serde_json::from_str(json).unwrap()
    }

    fn record<'a>(
        metrics: &'a MetricTable,
        checks: &'a ChecksSpec,
        dropped: &'a [DroppedValue],
    ) -> RunRecord<'a> {
        RunRecord {
            metrics,
            checks,
            status: RunStatus::Completed,
            reason: None,
            failed_step: None,
            dropped,
            replay: None,
            numerics: None,
            seed: 1,
        }
    }

    fn golden(t: MetricTable, rules: Option<ChecksSpec>) -> Golden {
        Golden {
            scenario: "s".into(),
            hardware: "cpu".into(),
            table: t,
            provenance: Provenance::default(),
            rules,
            bands: None,
            dir: "golden/s/cpu".into(),
            calibration: None,
            digest: Default::default(),
        }
    }

    #[test]
    fn a_calibrated_band_is_k_sigma_from_the_calibration_or_missing_without_one() {
        let c =
            checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 3, "floor": 0.01}}}}"#);
        let gold = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
        let near = table(&[("r", &[0.55, 0.55, 0.5, 0.5])]);
        let dropped: Vec<DroppedValue> = Vec::new();
        // No calibration: the rule cannot be judged, and says what to run.
        let v = judge_run(
            &record(&near, &c, &dropped),
            Some(&golden(gold.clone(), None)),
        )
        .unwrap();
        let r = v.rule("golden:r").unwrap();
        assert_eq!(r.status, RuleStatus::Missing);
        assert!(
            r.evidence.message.contains("rlharness golden calibrate"),
            "{r:?}"
        );
        // Calibrated from two runs: window 1..2 has σ 0.0283 (n 2), window 3..4 σ 0. Each
        // window gets its own band, k × σ × √(1 + 1/n) (a prediction interval for one more
        // run), never under the floor, around the calibration's mean of that window.
        let g = calibrated_golden(gold, &c);
        let v = judge_run(&record(&near, &c, &dropped), Some(&g)).unwrap();
        let r = v.rule("golden:r").unwrap();
        assert_eq!(r.status, RuleStatus::Pass, "{r:?}");
        let half = 3.0 * 0.028284271 * 1.5f64.sqrt();
        let band = r.points[0].band;
        assert!((band.hi() - 0.5 - half).abs() < 1e-6, "{band:?}");
        assert!((band.lo() - 0.5 + half).abs() < 1e-6, "{band:?}");
        // The quiet window keeps its own (floor) band, not the noisy window's σ.
        let band = r.points[1].band;
        assert!((band.hi() - 0.51).abs() < 1e-9, "{band:?}");
        assert!(
            r.evidence
                .message
                .contains("calibrated per window: max(k 3 × the window's σ × √(1 + 1/n), floor 0.01) around the calibration's mean"),
            "{}",
            r.evidence.message
        );
        // And what one run can see: half + z(0.8) σ per window (the quiet one: its floor).
        let caught = half + 0.841_621_233_572_914_3 * 0.028284271;
        assert!(
            r.evidence.message.contains(&format!(
                "one run catches a shift of 0.01..{} on the bad side 80% of the time",
                fmt_num(caught)
            )),
            "{}",
            r.evidence.message
        );
        let far = table(&[("r", &[0.7, 0.7, 0.5, 0.5])]);
        let v = judge_run(&record(&far, &c, &dropped), Some(&g)).unwrap();
        assert_eq!(v.rule("golden:r").unwrap().status, RuleStatus::Regressed);
        let quiet_moved = table(&[("r", &[0.5, 0.5, 0.52, 0.52])]);
        let v = judge_run(&record(&quiet_moved, &c, &dropped), Some(&g)).unwrap();
        assert_eq!(v.rule("golden:r").unwrap().status, RuleStatus::Regressed);
        // Centred on the calibration's mean, not on the golden (one seed's draw): a golden
        // at 0.4 in window 1..2 leaves a run at the calibration's mean (0.5) passing, and
        // says what it was compared against.
        let mut low = golden(table(&[("r", &[0.4, 0.4, 0.5, 0.5])]), None);
        low.calibration = g.calibration.clone();
        let at_mean = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
        let v = judge_run(&record(&at_mean, &c, &dropped), Some(&low)).unwrap();
        let r = v.rule("golden:r").unwrap();
        assert_eq!(r.status, RuleStatus::Pass, "{r:?}");
        assert_eq!(r.points[0].centre, Some(0.5));
        assert_eq!(r.points[0].golden, Some(0.4));
        let v = judge_run(&record(&far, &c, &dropped), Some(&low)).unwrap();
        let r = v.rule("golden:r").unwrap();
        assert!(
            r.evidence
                .message
                .contains("0.7 against the calibration mean 0.5 (golden 0.4)"),
            "{}",
            r.evidence.message
        );
    }

    /// `gold` with a calibration of two runs of `r`: window 1..2 at 0.48 and 0.52 (σ 0.0283),
    /// window 3..4 at 0.5 (σ 0).
    fn calibrated_golden(gold: MetricTable, c: &ChecksSpec) -> Golden {
        let runs = [
            table(&[("r", &[0.48, 0.48, 0.5, 0.5])]),
            table(&[("r", &[0.52, 0.52, 0.5, 0.5])]),
        ];
        let mut g = golden(gold, None);
        g.calibration = Some(crate::golden::calibration::Calibration::of_test_runs(
            &runs, c,
        ));
        g
    }

    #[test]
    fn a_calibrated_fail_fast_rule_is_watched_with_its_calibrated_band() {
        let c = checks(
            r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 3, "floor": 0.01}, "fail_fast": true}}}"#,
        );
        let gold = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
        let g = calibrated_golden(gold, &c);
        let settled = |checks: &ChecksSpec, run: &MetricTable| {
            crate::compare::first_settled_failure(checks, Some(&g.table), run, 4)
        };
        let near = table(&[("r", &[0.55, 0.55])]);
        let far = table(&[("r", &[0.7, 0.7])]);
        // Raw, the calibrated rule has no band at all: a run inside its band would abort.
        assert_eq!(settled(&c, &near).as_deref(), Some("golden:r"));
        let live = live_checks(&c, Some(&g));
        assert_eq!(settled(&live, &near), None);
        assert_eq!(settled(&live, &far).as_deref(), Some("golden:r"));
        // Without a calibration it never fails fast (the verdict says `missing` at the end).
        let bare = golden(g.table.clone(), None);
        assert_eq!(
            crate::compare::first_settled_failure(
                &live_checks(&c, Some(&bare)),
                Some(&bare.table),
                &far,
                4
            ),
            None
        );
    }

    /// The loosening guard sees resolved widths: a bless records them; a larger k, a noisier
    /// re-calibration, or `abs` turned into a wide calibrated rule then fails as loosened.
    #[test]
    fn a_band_wider_than_blessed_is_loosened() {
        let loosened = |v: &Verdict| {
            v.rules
                .iter()
                .filter(|r| r.rule.ends_with(":band") && r.status == RuleStatus::Regressed)
                .map(|r| r.evidence.message.clone())
                .collect::<Vec<_>>()
        };
        let gold = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
        let run = table(&[("r", &[0.5, 0.5, 0.5, 0.5])]);
        let c =
            checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 3, "floor": 0.01}}}}"#);
        let mut g = calibrated_golden(gold.clone(), &c);
        g.rules = Some(c.clone());
        g.bands = Some(band_widths(&c, Some(&g)));
        // As blessed: nothing loosened.
        let v = judge_run(&record(&run, &c, &[]), Some(&g)).unwrap();
        assert!(loosened(&v).is_empty(), "{:?}", loosened(&v));
        // k 3 -> 4: the first window is wider (the second sits at its floor).
        let k4 =
            checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 4, "floor": 0.01}}}}"#);
        let v = judge_run(&record(&run, &k4, &[]), Some(&g)).unwrap();
        let l = loosened(&v);
        assert!(
            l.len() == 1 && l[0].contains("steps 1..2") && !l[0].contains("steps 3..4"),
            "{l:?}"
        );
        // A noisier re-calibration under the same rule.
        let mut noisy = g.clone();
        noisy.calibration = Some(crate::golden::calibration::Calibration::of_test_runs(
            &[
                table(&[("r", &[0.4, 0.4, 0.5, 0.5])]),
                table(&[("r", &[0.6, 0.6, 0.5, 0.5])]),
            ],
            &c,
        ));
        let v = judge_run(&record(&run, &c, &[]), Some(&noisy)).unwrap();
        assert!(
            loosened(&v)[0].contains("recorded when the golden was blessed"),
            "{v:?}"
        );
        // Blessed as `abs: 0.01`, now calibrated with k 100: wider than the abs band.
        let abs = checks(r#"{"golden": {"r": {"window": 2, "abs": 0.01}}}"#);
        let mut g_abs = g.clone();
        g_abs.rules = Some(abs);
        g_abs.bands = None;
        let k100 =
            checks(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 100, "floor": 0.01}}}}"#);
        let v = judge_run(&record(&run, &k100, &[]), Some(&g_abs)).unwrap();
        let l = loosened(&v);
        assert!(
            l.len() == 1 && l[0].contains("`abs`/`rel` band it was blessed with"),
            "{l:?}"
        );
        assert_eq!(v.outcome, Outcome::Regressed);
    }

    #[test]
    fn a_calibrated_rule_takes_no_abs_or_rel_and_a_positive_k() {
        let bad = |j: &str| {
            serde_json::from_str::<ChecksSpec>(j)
                .unwrap_err()
                .to_string()
        };
        assert!(
            bad(r#"{"golden": {"r": {"abs": 0.1, "calibrated": {"k": 3}}}}"#)
                .contains("`calibrated` replaces `abs` and `rel`")
        );
        assert!(bad(r#"{"golden": {"r": {"calibrated": {"k": 0}}}}"#).contains("k > 0"));
        assert!(
            bad(r#"{"golden": {"r": {"calibrated": {"k": 3, "floor": -1}}}}"#)
                .contains("floor >= 0")
        );
    }

    #[test]
    fn an_mfu_expectation_fails_on_the_value_the_series_dropped() {
        // The runner kept MFU 1.3 at step 2 out of the series (NaN marks the hole here).
        let t = table(&[("perf/mfu/actor", &[0.3, f64::NAN, 0.3])]);
        let c = checks(r#"{"expect": ["max(perf/mfu/actor) <= 1"]}"#);
        let dropped = [DroppedValue::new(2, "perf/mfu/actor", 1.3)];
        let v = judge_run(&record(&t, &c, &dropped), None).unwrap();
        assert_eq!(v.outcome, Outcome::Regressed);
        let e = v.rule("expect:max(perf/mfu/actor) <= 1").unwrap();
        assert_eq!(e.status, RuleStatus::Regressed, "{e:?}");
        assert_eq!(e.evidence.value, Some(1.3));
        let s = v.rule("sanity:0 < perf/mfu/actor <= 1").unwrap();
        assert_eq!(s.failing_steps, vec![2]);
        // Without the dropped value the expectation would have held.
        let v = judge_run(&record(&t, &c, &[]), None).unwrap();
        assert_eq!(v.outcome, Outcome::Passed);
    }

    #[test]
    fn replay_and_watchdog_are_rules_of_the_verdict() {
        let t = table(&[("m", &[1.0, 1.0])]);
        let c = ChecksSpec::default();
        let replay = ReplayRecord {
            cassette: "c".into(),
            recorded: 4,
            served: 4,
            mismatches: vec!["replay mismatch at POST /forward call 1".into()],
        };
        let mut r = record(&t, &c, &[]);
        r.replay = Some(&replay);
        let v = judge_run(&r, None).unwrap();
        assert_eq!(v.outcome, Outcome::Regressed);
        assert_eq!(v.rule(REPLAY_RULE).unwrap().status, RuleStatus::Regressed);
        let mut r = record(&t, &c, &[]);
        r.status = RunStatus::Aborted;
        r.reason = Some("watched metric m is NaN at step 2");
        r.failed_step = Some(2);
        let v = judge_run(&r, None).unwrap();
        let w = v.rule("watchdog:aborted").unwrap();
        assert_eq!(w.status, RuleStatus::Regressed);
        assert_eq!(w.failing_steps, vec![2]);
        assert!(w.evidence.message.contains("NaN at step 2"));
        assert_eq!(v.outcome, Outcome::Regressed);
        // A crash with no rule to judge has no verdict; a completed run always has one.
        r.status = RunStatus::Failed;
        assert_eq!(judge_run(&r, None), None);
        assert!(judge_run(&record(&t, &c, &[]), None).is_some());
    }

    #[test]
    fn golden_presence_and_blessed_rules_are_judged() {
        let g = table(&[("critic/rewards/mean", &[0.5, 0.5]), ("x", &[1.0, 1.0])]);
        let run = table(&[
            ("critic/rewards/mean", &[0.5, 0.5]),
            ("x", &[1.0, f64::NAN]),
        ]);
        let blessed = checks(r#"{"golden": {"critic/rewards/mean": {"abs": 0.05}}}"#);
        let now = checks(r#"{"golden": {"critic/rewards/mean": {"abs": 0.2}}}"#);
        let v = judge_run(&record(&run, &now, &[]), Some(&golden(g, Some(blessed)))).unwrap();
        assert_eq!(v.outcome, Outcome::Regressed);
        let l = v.rule("loosened:golden:critic/rewards/mean").unwrap();
        assert!(
            l.evidence
                .message
                .contains("rules loosened since the golden was blessed"),
            "{}",
            l.evidence.message
        );
        let p = v.rule("presence:x").unwrap();
        assert_eq!(p.failing_steps, vec![2]);
    }
}

#[cfg(test)]
mod sanity_tests {
    use super::is_insane;

    #[test]
    fn an_mfu_outside_zero_one_is_insane() {
        for v in [0.0, -0.1, 1.0001, 7.0, f64::NAN, f64::INFINITY] {
            assert!(is_insane("perf/mfu/actor", v), "{v}");
        }
        for v in [1e-9, 0.25, 1.0] {
            assert!(!is_insane("perf/mfu/actor", v), "{v}");
        }
        // Other metrics are not fractions of a peak.
        assert!(!is_insane("perf/throughput", 5000.0));
    }
}
