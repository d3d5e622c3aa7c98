//! The reports of a stored run and of a multi-seed run's combined directory
//! (`rlharness run SCENARIO --seeds A..B`):
//!
//! ```text
//! reports/<scenario>/<run-id>/
//!   seeds.json            what ran: the seeds, their directories, the plant, the expected verdict
//!   seed-<S>/             one whole run directory per seed, judged against the golden alone
//!   verdict.json report.md report.html junit.xml plots/*.svg   the combined verdict
//! ```
//!
//! The judge reads those directories (`compare::StoredRun`, `compare::judge_combined`); this
//! file only turns what it decided into a `Report`.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Reference, Report, RunInfo};
use crate::compare::budget::BudgetStatement;
use crate::compare::seeds::seeds_rule_id;
use crate::compare::{judge_combined, Combined, CombinedError, StoredError, StoredRun};
use crate::golden::Golden;
use crate::metrics::MetricTable;
use crate::rundir::KnobDiff;

/// The id of a metric's distribution test (see `compare::seeds`).
pub(crate) fn seeds_rule_id_of(metric: &str) -> String {
    seeds_rule_id(metric)
}

/// A stored single run re-judged as `compare RUN` judges it: its report, in memory.
pub(crate) fn judge_stored(dir: &Path, golden_root: &Path) -> Result<Report, StoredError> {
    let stored = StoredRun::judge(dir, golden_root)?;
    Ok(stored_report(stored))
}

/// The report of a stored run the judge re-judged, with a note when its golden changed since.
fn stored_report(stored: StoredRun) -> Report {
    let pending = stored.pending_golden().map(str::to_string);
    let changed = stored.changed_since();
    let StoredRun {
        dir,
        manifest,
        metrics,
        golden,
        verdict,
    } = stored;
    let reference = match &manifest.reference_run {
        Some(_) => golden.as_ref().map(Reference::from_reference_run),
        None => golden.as_ref().map(Reference::from_golden),
    };
    let budget = match (&verdict, &golden) {
        (Some(_), Some(g)) => Some(BudgetStatement::of(&manifest.checks, g, 1)),
        _ => None,
    };
    let mut report = Report::from_run(&dir, &manifest, metrics, reference, verdict);
    report.pending_golden = pending;
    report.budget = budget;
    if let Some(what) = changed {
        report.notes.push(format!(
            "{GOLDEN_CHANGED}: {what} changed since. At run time: {}; now: {}",
            verdict_at_run_time(&dir),
            report.summary()
        ));
    }
    report
}

/// How the note of a re-judgement against a changed golden begins.
pub(crate) const GOLDEN_CHANGED: &str = "judged against another golden than at run time";

/// The verdict a run directory's own `verdict.json` records (what `run` said), in words.
fn verdict_at_run_time(dir: &Path) -> String {
    match crate::rundir::RecordedVerdict::read(dir) {
        Ok(h) => format!("{} (exit {})", h.summary, h.exit_code),
        Err(e) => format!("unknown ({e})"),
    }
}

/// The combined report of the multi-seed run in `dir`, from what it stores: each seed re-judged
/// against the golden, then the seeds' distribution against the golden's calibration.
pub(crate) fn combined_report(dir: &Path, golden_root: &Path) -> Result<Report, CombinedError> {
    let c = judge_combined(dir, golden_root)?;
    Ok(report_of_combined(dir, c))
}

/// The combined report at the end of a multi-seed run: as `combined_report`, and `seeds.json`
/// records what the verdict was judged against (`judged_against`), so that a later `compare`
/// says when the golden or its calibration changed since.
pub(crate) fn final_combined_report(
    dir: &Path,
    golden_root: &Path,
) -> Result<Report, CombinedError> {
    let mut c = judge_combined(dir, golden_root)?;
    c.manifest.judged_against = c.judged_against.clone();
    c.manifest.write(dir)?;
    Ok(report_of_combined(dir, c))
}

fn report_of_combined(dir: &Path, c: Combined) -> Report {
    let budget = match (c.seeds.first(), &c.golden) {
        (Some((_, first)), Some(g)) => Some(BudgetStatement::of(
            &first.manifest.checks,
            g,
            c.manifest.seeds.len(),
        )),
        _ => None,
    };
    let (manifest, golden) = (c.manifest, c.golden);
    let seeds: Vec<(u64, Report)> = c
        .seeds
        .into_iter()
        .map(|(s, r)| (s, stored_report(r)))
        .collect();
    let first = seeds.first().map(|(_, r)| r);
    // The build and host facts (steps, versions, host, device, threads, numerics) are the
    // first seed's; the rest is the combined run's own.
    let run = RunInfo {
        run_id: RunInfo::id_of(dir),
        dir: dir.display().to_string(),
        scenario_path: manifest.scenario_path.clone(),
        hardware: first.map(|r| r.run.hardware.clone()).unwrap_or_default(),
        status: Some(c.status),
        reason: c.reason,
        failed_step: None,
        seed: None,
        started: Some(manifest.started.clone()),
        ended: manifest.ended.clone(),
        ..first.map(|r| r.run.clone()).unwrap_or_default()
    };
    let mut notes = vec![format!(
        "multi-seed run: seeds {}, one run directory each (`seed-<S>/`); each seed is judged \
         against the golden alone (`seed:<S>`: its calibrated bands shown, not gating), then \
         the seeds' window means against the golden's calibration by Student's pooled t-test \
         (`seeds:<metric>`, half the run's false-alarm budget over all tails that can fail, \
         split by Bonferroni)",
        seeds_text(&manifest.seeds)
    )];
    if let Some(cal) = golden.as_ref().and_then(|g| g.calibration.as_ref()) {
        notes.push(format!("calibration: {}", cal.source()));
    }
    let (knobs, knob_note) = seeds_knobs(&seeds);
    notes.extend(knob_note);
    let seed_series = SeedSeries::new(&seeds, golden.as_ref());
    // Judged against another golden or calibration than at run time: the combined verdict may
    // have changed, so it says so with both verdicts. `seeds.json` records what the combined
    // verdict was judged against; a run made before it did falls back on its seeds' run.json.
    let changed = match (&manifest.judged_against, &c.judged_against) {
        (Some(then), now) => then.changes_to(now.as_ref()),
        (None, _) => seeds
            .iter()
            .flat_map(|(_, r)| r.notes.iter())
            .find_map(|n| n.strip_prefix(&format!("{GOLDEN_CHANGED}: ")))
            .and_then(|n| n.split(" changed since.").next())
            .map(str::to_string),
    };
    let mut report = Report {
        scenario: manifest.scenario.clone(),
        run,
        verdict: Some(c.verdict),
        expected: manifest.expected_verdict.clone(),
        metrics: MetricTable::new(),
        // The windows are compared with the calibration's means; the seeds' series and the
        // golden's are in `seed_series`.
        reference: Some(Reference {
            label: "calibration".into(),
            table: MetricTable::new(),
            provenance: None,
            overlay: None,
        }),
        knobs,
        skipped: None,
        trainer_tail: None,
        pending_golden: None,
        notes,
        seed_series: Some(seed_series),
        budget,
    };
    if let Some(what) = changed {
        let note = format!(
            "{GOLDEN_CHANGED}: {what} changed since the seeds ran. At run time: {}; now: {}",
            verdict_at_run_time(dir),
            report.summary()
        );
        report.notes.push(note);
    }
    report
}

/// The knobs that differ from their defaults, the same in every seed (only the seed differs
/// between them): the first seed's, and a note naming any seed whose knobs differ from them.
fn seeds_knobs(seeds: &[(u64, Report)]) -> (Vec<KnobDiff>, Option<String>) {
    let Some((first_seed, first)) = seeds.first() else {
        return (Vec::new(), None);
    };
    let differ: Vec<String> = seeds
        .iter()
        .filter(|(_, r)| r.knobs != first.knobs)
        .map(|(s, _)| s.to_string())
        .collect();
    let note = (!differ.is_empty()).then(|| {
        format!(
            "the config below is seed {first_seed}'s; seed(s) {} differ from it (see their \
             reports)",
            differ.join(", ")
        )
    });
    (first.knobs.clone(), note)
}

/// What a multi-seed report's plots draw besides its verdict: every seed's series, the
/// golden's, and the calibration's spread per step.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SeedSeries {
    /// Every seed's series, in seed order.
    pub(crate) seeds: Vec<(u64, MetricTable)>,
    pub(crate) golden: Option<MetricTable>,
    /// Per metric, per step: the calibration's mean ± 2σ.
    pub(crate) spread: BTreeMap<String, Vec<(u64, f64, f64)>>,
}

impl SeedSeries {
    fn new(seeds: &[(u64, Report)], golden: Option<&Golden>) -> SeedSeries {
        SeedSeries {
            seeds: seeds.iter().map(|(s, r)| (*s, r.metrics.clone())).collect(),
            golden: golden.map(|g| g.table.clone()),
            spread: golden
                .and_then(|g| g.calibration.as_ref())
                .map(|c| {
                    c.steps
                        .iter()
                        .map(|(m, ps)| {
                            let band = ps
                                .iter()
                                .map(|p| (p.first, p.mean - 2.0 * p.std, p.mean + 2.0 * p.std))
                                .collect();
                            (m.clone(), band)
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The plot of one metric of report `r`: every seed, the golden, the calibration's spread
    /// and the distribution test's windows.
    pub(crate) fn plot(&self, r: &Report, metric: &str) -> String {
        let seeds: Vec<(u64, Vec<(u64, f64)>)> = self
            .seeds
            .iter()
            .map(|(s, t)| (*s, t.series(metric)))
            .collect();
        let golden = self.golden.as_ref().map(|g| g.series(metric));
        let spread = self.spread.get(metric).map_or(&[][..], Vec::as_slice);
        let points = r
            .verdict
            .as_ref()
            .and_then(|v| v.rule(&seeds_rule_id_of(metric)))
            .map(|x| x.points.as_slice())
            .unwrap_or(&[]);
        super::plots::render_seeds(metric, &seeds, golden.as_deref(), spread, points)
    }
}

fn seeds_text(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.len() > 1 && b - a + 1 == seeds.len() as u64 => {
            format!("{a}..{b}")
        }
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}
