//! A stored run, or a multi-seed run's directory, judged again from what it stores, and its
//! report: the judge's calls (`judge::StoredRun::judge`, `judge::judge_combined`, the
//! false-alarm budget, the decision, what changed in the golden since run time) are made here,
//! for `run`, `compare`, `calibrate` and `bisect` alike, and `report::multi_seed` turns what they
//! decided into a `Report`. A freshly judged run's report is made here too (`run_report`).

use std::path::Path;

use crate::judge::budget::BudgetStatement;
use crate::judge::{
    judge_combined, Combined, CombinedError, Judged, StoredError, StoredRun, Verdict,
};
use crate::model::metrics::MetricTable;
use crate::model::rundir::RunManifest;
use crate::report::multi_seed::{self, golden_changed_note};
use crate::report::{Reference, Report};

/// The report of a run judged from its manifest (`run.json`, with the pending golden it wrote)
/// and series: the judge decides its headline from them, and the report gets that decision.
pub(crate) fn run_report(
    dir: &Path,
    manifest: &RunManifest,
    metrics: MetricTable,
    reference: Option<Reference>,
    verdict: Option<Verdict>,
) -> Report {
    let decision = Judged::of_run(manifest, verdict.as_ref()).decide();
    Report::from_run(dir, manifest, metrics, reference, verdict, decision)
}

/// The report of a scenario skipped for `reason` (its requirements are not met here).
pub(crate) fn skipped_report(scenario: &str, reason: &str) -> Report {
    Report::skipped(scenario, reason, Judged::skipped(reason).decide())
}

/// A stored single run re-judged as `compare RUN` judges it: its report, in memory.
pub(crate) fn judge_stored(dir: &Path, golden_root: &Path) -> Result<Report, StoredError> {
    let stored = StoredRun::judge(dir, golden_root)?;
    Ok(report_of_stored(stored))
}

/// The report of a stored run the judge re-judged, with a note when its golden changed since.
fn report_of_stored(stored: StoredRun) -> Report {
    let pending = stored.pending_golden().map(str::to_string);
    let changed = stored.changed_since();
    let budget = match (&stored.verdict, &stored.golden) {
        (Some(_), Some(g)) => Some(BudgetStatement::of(&stored.manifest.checks, g, 1)),
        _ => None,
    };
    let dir = stored.dir.clone();
    let decision = stored.judged().decide();
    let mut report = multi_seed::stored_report(stored, pending, budget, decision);
    if let Some(what) = changed {
        let then = verdict_at_run_time(&dir);
        let note = golden_changed_note(&what, "", &then, &report.summary());
        report.notes.push(note);
    }
    report
}

/// The verdict a run directory's own `verdict.json` records (what `run` said), in words.
fn verdict_at_run_time(dir: &Path) -> String {
    match crate::model::rundir::RecordedVerdict::read(dir) {
        Ok(h) => format!("{} (exit {})", h.summary, h.exit_code),
        Err(e) => format!("unknown ({e})"),
    }
}

/// The combined report of the multi-seed run in `dir`, from what it stores: each seed re-judged
/// against the golden, then the seeds' distribution against the golden's calibration.
pub(crate) fn combined_report(dir: &Path, golden_root: &Path) -> Result<Report, CombinedError> {
    let c = judge_combined(dir, golden_root)?;
    Ok(report_of_combined(c))
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
    Ok(report_of_combined(c))
}

fn report_of_combined(c: Combined) -> Report {
    let budget = match (c.seeds.first(), &c.golden) {
        (Some((_, first)), Some(g)) => Some(BudgetStatement::of(
            &first.manifest.checks,
            g,
            c.manifest.seeds.len(),
        )),
        _ => None,
    };
    // Judged against another golden or calibration than at run time: the combined verdict may
    // have changed, so it says so with both verdicts. `seeds.json` records what the combined
    // verdict was judged against; a run made before it did falls back on its seeds' run.json.
    let changed = match (&c.manifest.judged_against, &c.judged_against) {
        (Some(then), now) => then.changes_to(now.as_ref()),
        (None, _) => c.seeds.iter().find_map(|(_, r)| r.changed_since()),
    };
    let dir = c.dir.clone();
    let decision = c.judged().decide();
    let mut report = multi_seed::combined_report(c, budget, decision);
    if let Some(what) = changed {
        let then = verdict_at_run_time(&dir);
        let note = golden_changed_note(&what, " the seeds ran", &then, &report.summary());
        report.notes.push(note);
    }
    report
}
