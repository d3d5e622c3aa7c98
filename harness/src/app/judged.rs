//! A stored run, or a multi-seed run's directory, judged again from what it stores, and its
//! report: the judge's calls (`judge::StoredRun::judge`, `judge::judge_combined`, the
//! false-alarm budget, what changed in the golden since run time) are made here, for `run`,
//! `compare`, `calibrate` and `bisect` alike, and `report::multi_seed` turns what they decided into
//! a `Report`.

use std::path::Path;

use crate::judge::budget::BudgetStatement;
use crate::judge::{judge_combined, Combined, CombinedError, StoredError, StoredRun};
use crate::report::multi_seed::{self, golden_changed_note, CombinedRun, GOLDEN_CHANGED};
use crate::report::Report;

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
    let mut report = multi_seed::stored_report(stored, pending, budget);
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
    let seeds: Vec<(u64, Report)> = c
        .seeds
        .into_iter()
        .map(|(s, r)| (s, report_of_stored(r)))
        .collect();
    // Judged against another golden or calibration than at run time: the combined verdict may
    // have changed, so it says so with both verdicts. `seeds.json` records what the combined
    // verdict was judged against; a run made before it did falls back on its seeds' run.json.
    let changed = match (&c.manifest.judged_against, &c.judged_against) {
        (Some(then), now) => then.changes_to(now.as_ref()),
        (None, _) => seeds
            .iter()
            .flat_map(|(_, r)| r.notes.iter())
            .find_map(|n| n.strip_prefix(&format!("{GOLDEN_CHANGED}: ")))
            .and_then(|n| n.split(" changed since.").next())
            .map(str::to_string),
    };
    let spread = (c.golden.as_ref())
        .and_then(|g| g.calibration.as_ref())
        .map(|cal| cal.spread(2.0))
        .unwrap_or_default();
    let mut report = multi_seed::combined_report(CombinedRun {
        dir: dir.to_path_buf(),
        manifest: c.manifest,
        seeds,
        golden: c.golden,
        verdict: c.verdict,
        status: c.status,
        reason: c.reason,
        budget,
        spread,
    });
    if let Some(what) = changed {
        let then = verdict_at_run_time(dir);
        let note = golden_changed_note(&what, " the seeds ran", &then, &report.summary());
        report.notes.push(note);
    }
    report
}
