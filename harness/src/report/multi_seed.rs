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
//! The judge reads those directories and decides (`judge::StoredRun` and `judge::Combined`,
//! made by `app::judged` with the false-alarm budget, the decision and what changed since run
//! time); this file only turns what they decided into a `Report`.

use std::collections::BTreeMap;

use super::{Reference, Report, RunInfo};
use crate::judge::budget::BudgetStatement;
use crate::judge::{Combined, Decision, StoredRun};
use crate::model::metrics::MetricTable;
use crate::model::rundir::KnobDiff;

/// The report of a stored run the judge re-judged: `pending_golden` the pending golden it
/// wrote (unless it was judged against a golden since), `budget` the false-alarm budget it was
/// judged at, `decision` what the judge decided of it.
pub(crate) fn stored_report(
    stored: StoredRun,
    pending_golden: Option<String>,
    budget: Option<BudgetStatement>,
    decision: Decision,
) -> Report {
    let StoredRun {
        dir,
        mut manifest,
        metrics,
        golden,
        verdict,
    } = stored;
    let reference = match &manifest.reference_run {
        Some(_) => golden.as_ref().map(Reference::from_reference_run),
        None => golden.as_ref().map(Reference::from_golden),
    };
    manifest.pending_golden = pending_golden;
    let mut report = Report::from_run(&dir, &manifest, metrics, reference, verdict, decision);
    report.budget = budget;
    report
}

/// How the note of a re-judgement against a changed golden begins.
pub(super) const GOLDEN_CHANGED: &str = "judged against another golden than at run time";

/// The note of a re-judgement against another golden or calibration than at run time: what
/// changed since `when` (empty: since the run; ` the seeds ran`), the verdict then and now.
pub(crate) fn golden_changed_note(what: &str, when: &str, then: &str, now: &str) -> String {
    format!("{GOLDEN_CHANGED}: {what} changed since{when}. At run time: {then}; now: {now}")
}

/// The combined report of a multi-seed run as the judge made it (`c`: the seeds as it judged
/// them, their golden and the combined verdict; `budget` the false-alarm budget it was judged
/// at, `decision` what it decided): its verdict, the seeds' series for its plots, and what ran.
pub(crate) fn combined_report(
    c: Combined,
    budget: Option<BudgetStatement>,
    decision: Decision,
) -> Report {
    let Combined {
        dir,
        manifest,
        seeds,
        golden,
        verdict,
        status,
        reason,
        judged_against: _,
    } = c;
    // The build and host facts (hardware, steps, versions, host, device, threads, numerics)
    // are the first seed's; the rest is the combined run's own.
    let first = (seeds.first())
        .map(|(_, r)| RunInfo::from_manifest(&r.manifest, &r.dir))
        .unwrap_or_default();
    let run = RunInfo {
        run_id: RunInfo::id_of(&dir),
        dir: dir.display().to_string(),
        scenario_path: manifest.scenario_path.clone(),
        status: Some(status),
        reason,
        failed_step: None,
        seed: None,
        started: Some(manifest.started.clone()),
        ended: manifest.ended.clone(),
        ..first
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
    // The seeds' series as the judge read them, the golden's, and the calibration's spread.
    let spread = (golden.as_ref())
        .and_then(|g| g.calibration.as_ref())
        .map(|cal| cal.spread(2.0))
        .unwrap_or_default();
    let seed_series = SeedSeries {
        seeds: seeds.into_iter().map(|(s, r)| (s, r.metrics)).collect(),
        golden: golden.map(|g| g.table),
        spread,
    };
    Report {
        scenario: manifest.scenario.clone(),
        run,
        verdict: Some(verdict),
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
        decision,
    }
}

/// The knobs that differ from their defaults, the same in every seed (only the seed differs
/// between them): the first seed's, and a note naming any seed whose knobs differ from them.
fn seeds_knobs(seeds: &[(u64, StoredRun)]) -> (Vec<KnobDiff>, Option<String>) {
    let Some((first_seed, first)) = seeds.first() else {
        return (Vec::new(), None);
    };
    let differ: Vec<String> = seeds
        .iter()
        .filter(|(_, r)| r.manifest.knobs != first.manifest.knobs)
        .map(|(s, _)| s.to_string())
        .collect();
    let note = (!differ.is_empty()).then(|| {
        format!(
            "the config below is seed {first_seed}'s; seed(s) {} differ from it (see their \
             reports)",
            differ.join(", ")
        )
    });
    (first.manifest.knobs.clone(), note)
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
            .and_then(|v| v.seeds_rule(metric))
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
