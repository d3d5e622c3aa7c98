//! The one judge of a run: every rule, whatever decides it, from what the run directory
//! stores. `rlharness run` calls [`judge_run`] on the run it just made, `rlharness compare RUN`
//! on the same facts read back from disk, so both write the same verdict.
//!
//! What it reads: the series (`metrics.csv`); from `run.json` the checks, how the run ended
//! (status, reason, step), the values the runner dropped from the series as insane (an MFU
//! outside (0, 1]) and a replay's account of the requests it was sent; and the golden (its
//! series and the rules it was blessed with). The verdict is the rules of [`PRODUCERS`], each
//! a family judged whole, concatenated in this order:
//! - the golden rules, calibrated bands resolved (`golden:<metric>`);
//! - expectations (`expect:`), which read the series with the dropped values put back, so
//!   `max(perf/mfu/actor) <= 1` fails on the MFU of 1.3 that the plots never show;
//! - presence: every golden metric at every golden step the run reached (`presence`);
//! - rules loosened since the golden was blessed (`loosened`);
//! - stability (`stability:<metric>`);
//! - the weight syncs, bit for bit (`weight_sync:match`, from `run.json`'s `weight_sync`);
//! - sanity: each dropped value is a failed `sanity:0 < {metric} <= 1`;
//! - replay: `replay:requests match the cassette`;
//! - watchdog: a run the watchdog stopped (a hang or time-out, a non-finite watched metric, a
//!   fail-fast rule) fails `watchdog:<status>` with the stored reason and step;
//! - the exact lane (`exact:`), which also sets the verdict's `exact_lane`.

mod rules;
#[cfg(test)]
mod tests;

use super::budget::Budget;
use super::calibrated::{resolve_calibrated, source_of};
use super::exact::judge_lane;
use super::tables::{grid_mismatch_of, judge_expectation, judge_golden};
use super::verdict::{outcome_of, Evidence, NotJudged, Outcome, RuleStatus, RuleVerdict, Verdict};
use super::{loosened, presence, stability, weight_sync};
use crate::model::checks::{ChecksSpec, GoldenRules};
use crate::model::golden::Golden;
use crate::model::metrics::MetricTable;
use crate::model::rundir::{DroppedValue, ReplayRecord, RunManifest, RunStatus, WeightSyncRecord};
use rlharness_arctic::wire::runtime::Numerics;
pub(crate) use rules::replay_rule;
pub use rules::REPLAY_RULE;
use rules::{sanity_rules, watchdog_rule, with_dropped};

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
    pub numerics: Option<&'a Numerics>,
    pub seed: u64,
    /// The driver's exact check of each weight sync (`weight_sync:match`'s evidence).
    pub weight_sync: Option<&'a WeightSyncRecord>,
}

impl<'a> RunRecord<'a> {
    /// What the judge reads of a stored run: its manifest and its series.
    pub(crate) fn of(manifest: &'a RunManifest, metrics: &'a MetricTable) -> RunRecord<'a> {
        RunRecord {
            metrics,
            checks: &manifest.checks,
            status: manifest.status,
            reason: manifest.reason.as_deref(),
            failed_step: manifest.failed_step,
            dropped: &manifest.dropped,
            replay: manifest.replay.as_ref(),
            numerics: manifest.numerics.as_ref(),
            seed: manifest.seed,
            weight_sync: manifest.weight_sync.as_ref(),
        }
    }

    /// A run that completed with the series `metrics`, nothing dropped, no replay, no
    /// numerics (what a golden's own series is, judged as a run).
    pub fn completed(metrics: &'a MetricTable, checks: &'a ChecksSpec, seed: u64) -> RunRecord<'a> {
        RunRecord {
            metrics,
            checks,
            status: RunStatus::Completed,
            reason: None,
            failed_step: None,
            dropped: &[],
            replay: None,
            numerics: None,
            seed,
            weight_sync: None,
        }
    }
}

/// One family of rules, judged from the run and its golden.
type Producer = fn(&RunRecord<'_>, Option<&Golden>) -> Vec<RuleVerdict>;

/// The families of a run's verdict, in the verdict's order (see the module doc).
const PRODUCERS: &[Producer] = &[
    golden_rules,
    expectations,
    presence_rules,
    loosened_rules,
    stability_rules,
    |run, _| {
        weight_sync::rule(run.checks, run.metrics, run.weight_sync)
            .into_iter()
            .collect()
    },
    sanity_rules,
    |run, _| run.replay.map(replay_rule).into_iter().collect(),
    |run, _| watchdog_rule(run).into_iter().collect(),
];

/// Judge a run from what its directory stores. `None` when there is nothing to judge: a run
/// that broke (crash, interrupt) before any rule could be decided.
pub fn judge_run(run: &RunRecord<'_>, golden: Option<&Golden>) -> Option<Verdict> {
    let mut rules: Vec<RuleVerdict> = PRODUCERS.iter().flat_map(|p| p(run, golden)).collect();
    let lane = golden.map(|g| judge_lane(run.metrics, g, run.numerics, run.seed));
    let exact_lane = lane.map(|(lane, rule)| {
        rules.extend(rule);
        lane
    });
    let judged = run.status == RunStatus::Completed;
    // A run that stopped early (not on purpose: an abort is the judge's own decision) is not
    // judged on rules past its last step: what failed before it stopped, the watchdog's and
    // the sanity rules stay.
    let stopped = matches!(
        run.status,
        RunStatus::Interrupted | RunStatus::Failed | RunStatus::TimedOut
    );
    let mut not_judged = None;
    if stopped {
        let last = run.metrics.steps().last().copied();
        let (keep, left): (Vec<RuleVerdict>, Vec<RuleVerdict>) = rules.into_iter().partition(|r| {
            r.status == RuleStatus::Pass
                || r.rule.starts_with("watchdog:")
                || r.rule.starts_with("sanity:")
                || r.failing_steps
                    .iter()
                    .any(|s| last.is_some_and(|l| *s <= l))
        });
        rules = keep;
        if !left.is_empty() {
            not_judged = Some(NotJudged {
                last_step: last,
                rules: left.into_iter().map(|r| r.rule).collect(),
            });
        }
    }
    let mut verdict = Verdict {
        outcome: Outcome::Passed,
        rules,
        grid_mismatch: (!stopped)
            .then(|| grid_mismatch_of(run.metrics, golden.map(|g| &g.table), run.checks))
            .flatten(),
        exact_lane,
        not_judged,
    };
    let no_golden = golden.is_none() && !run.checks.golden.is_empty();
    verdict.outcome = outcome_of(&verdict, no_golden);
    (judged || !verdict.rules.is_empty()).then_some(verdict)
}

/// A golden rule judged with its calibrated band resolved.
struct Calibrated {
    metric: String,
    verdict: RuleVerdict,
    /// Where the band came from (or why it has none), when the rule is calibrated.
    source: Option<Result<String, super::calibrated::NoBand>>,
}

/// Each golden rule of `rules` judged with its calibrated band resolved.
fn judge_calibrated(
    run: &MetricTable,
    golden: Option<&Golden>,
    rules: &GoldenRules,
    budget: Budget,
) -> Vec<Calibrated> {
    let spec = ChecksSpec {
        golden: rules.clone(),
        ..ChecksSpec::default()
    };
    let (resolved, sources) = resolve_calibrated(&spec, golden, budget);
    let table = golden.map(|g| &g.table);
    resolved
        .as_ref()
        .unwrap_or(&spec)
        .golden
        .iter()
        .map(|(metric, rule)| {
            let verdict = judge_golden(metric, rule, run, table);
            let source = source_of(&sources, metric).cloned();
            Calibrated {
                metric: metric.to_string(),
                verdict,
                source,
            }
        })
        .collect()
}

/// `golden:<metric>`: a calibrated rule's evidence names its band, or the rule is `missing`
/// with why it has none (and the command to run).
fn golden_rules(run: &RunRecord<'_>, golden: Option<&Golden>) -> Vec<RuleVerdict> {
    let budget = Budget::of(run.checks, golden);
    judge_calibrated(run.metrics, golden, &run.checks.golden, budget)
        .into_iter()
        .map(|c| {
            let mut r = c.verdict;
            match c.source {
                Some(Ok(text)) => r.evidence.message.push_str(&format!("; band {text}")),
                Some(Err(why)) => {
                    r.status = RuleStatus::Missing;
                    r.evidence = Evidence {
                        message: why.to_string(),
                        ..Evidence::default()
                    };
                    r.points.clear();
                    r.failing_steps.clear();
                }
                None => {}
            }
            r
        })
        .collect()
}

/// `expect:`: read the series with the values the runner dropped put back.
fn expectations(run: &RunRecord<'_>, _: Option<&Golden>) -> Vec<RuleVerdict> {
    let raw;
    let table = if run.dropped.is_empty() {
        run.metrics
    } else {
        raw = with_dropped(run.metrics, run.dropped);
        &raw
    };
    let expect = &run.checks.expect;
    expect.iter().map(|e| judge_expectation(e, table)).collect()
}

/// The golden when the scenario has golden rules (presence and loosening guard those).
fn golden_of_rules<'g>(run: &RunRecord<'_>, golden: Option<&'g Golden>) -> Option<&'g Golden> {
    golden.filter(|_| !run.checks.golden.is_empty())
}

fn presence_rules(run: &RunRecord<'_>, golden: Option<&Golden>) -> Vec<RuleVerdict> {
    golden_of_rules(run, golden)
        .map(|g| presence::judge_presence(run.metrics, &g.table, run.checks))
        .unwrap_or_default()
}

fn loosened_rules(run: &RunRecord<'_>, golden: Option<&Golden>) -> Vec<RuleVerdict> {
    let Some(g) = golden_of_rules(run, golden) else {
        return Vec::new();
    };
    let Some(blessed) = &g.rules else {
        return Vec::new();
    };
    let mut out = loosened::loosened_rules(blessed, run.checks);
    let widths = super::calibrated::band_widths(run.checks, Some(g));
    out.extend(loosened::wider_bands(blessed, g, &widths));
    out
}

/// The default stability rules (`judge::stability`) of a learning scenario, judged against
/// the golden like golden rules and named `stability:<metric>`.
fn stability_rules(run: &RunRecord<'_>, golden: Option<&Golden>) -> Vec<RuleVerdict> {
    let Some(g) = golden else {
        return Vec::new();
    };
    let calibrated = |m: &str| g.calibration.as_ref().is_some_and(|c| c.sigma(m).is_some());
    let rules = stability::rules(run.checks, &g.table.columns(), calibrated);
    if rules.is_empty() {
        return Vec::new();
    }
    judge_calibrated(
        run.metrics,
        Some(g),
        &rules,
        Budget::of(run.checks, Some(g)),
    )
    .into_iter()
    .map(|c| {
        let (metric, mut r, source) = (c.metric, c.verdict, c.source);
        if let Some(Ok(text)) = &source {
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
