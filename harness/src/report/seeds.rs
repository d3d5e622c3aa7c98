//! The combined directory of a multi-seed run (`rlharness run SCENARIO --seeds A..B`):
//!
//! ```text
//! reports/<scenario>/<run-id>/
//!   seeds.json            what ran: the seeds, their directories, the plant, the expected verdict
//!   seed-<S>/             one whole run directory per seed, judged against the golden alone
//!   verdict.json report.md report.html junit.xml plots/*.svg   the combined verdict
//! ```
//!
//! The combined verdict is made from what these directories store, by [`judge_combined`],
//! whether `run` just made them or `compare` reads them back, so both write the same verdict.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    golden_of_run, load_run, write_reports, Headline, KnobDiff, Reference, Report, RunInfo,
};
use crate::compare::seeds::{judge_seeds, SeedRun};
use crate::compare::{ExpectedVerdict, Outcome, RuleStatus, RunStatus};
use crate::error::CommandError;
use crate::fsx;
use crate::golden::GoldenStore;
use crate::metrics::MetricTable;

pub(crate) const SEEDS_FILE: &str = "seeds.json";

/// The id of a metric's distribution test (see `compare::seeds`).
pub(crate) fn seeds_rule_id_of(metric: &str) -> String {
    crate::compare::seeds::seeds_rule_id(metric)
}

/// `seeds.json`: what a multi-seed run ran. Written before the first seed starts and again
/// when the last one ends, so a run that dies still says what it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SeedsManifest {
    pub(crate) format: String,
    pub(crate) scenario: String,
    pub(crate) scenario_path: String,
    /// The scenario whose golden the seeds are judged against, when not this one (a
    /// multi-seed self-test's `selftest.golden`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) golden: Option<String>,
    pub(crate) seeds: Vec<u64>,
    /// The `--set` overrides and a self-test's plant, in order.
    #[serde(default)]
    pub(crate) overrides: Vec<String>,
    /// A multi-seed self-test's declared verdict (of the combined run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expected_verdict: Option<ExpectedVerdict>,
    pub(crate) started: String,
    #[serde(default)]
    pub(crate) ended: Option<String>,
    /// Seeds whose run could not be made at all (the error, by seed): their directories may
    /// hold no more than a manifest.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) errors: std::collections::BTreeMap<u64, String>,
}

impl SeedsManifest {
    pub(crate) fn seed_dir(dir: &Path, seed: u64) -> PathBuf {
        dir.join(format!("seed-{seed}"))
    }

    pub(crate) fn read(dir: &Path) -> Result<SeedsManifest, CommandError> {
        let path = dir.join(SEEDS_FILE);
        let text = fsx::read_to_string(&path).map_err(|e| CommandError::invalid(e.to_string()))?;
        serde_json::from_str(&text)
            .map_err(|e| CommandError::invalid(format!("invalid {}: {e}", path.display())))
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<(), CommandError> {
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|e| CommandError::run_failed(e.to_string()))?;
        text.push('\n');
        fsx::write_atomic(&dir.join(SEEDS_FILE), text.as_bytes())
            .map_err(|e| CommandError::run_failed(e.to_string()))
    }
}

/// Whether `dir` is a multi-seed run's combined directory.
pub(crate) fn is_combined(dir: &Path) -> bool {
    dir.join(SEEDS_FILE).is_file()
}

/// A stored single run re-judged as `compare RUN` judges it: its report, in memory.
pub(crate) fn judge_stored(dir: &Path, golden_root: &Path) -> Result<Report, CommandError> {
    let (manifest, table) = load_run(dir)?;
    let golden = golden_of_run(&manifest, golden_root)?;
    let verdict = crate::compare::judge_run(&manifest.record(&table), golden.as_ref());
    let reference = match &manifest.reference_run {
        Some(_) => golden.as_ref().map(Reference::from_reference_run),
        None => golden.as_ref().map(Reference::from_golden),
    };
    let has_reference = reference.is_some();
    let changed = match (&manifest.judged_against, &golden) {
        (Some(then), Some(now)) => then.digest.changes(&now.digest),
        _ => None,
    };
    let mut report = Report::from_run(dir, &manifest, table, reference, verdict);
    if has_reference {
        report.pending_golden = None;
    }
    if let Some(what) = changed {
        report.notes.push(format!(
            "{GOLDEN_CHANGED}: {what} changed since. At run time: {}; now: {}",
            verdict_at_run_time(dir),
            report.summary()
        ));
    }
    Ok(report)
}

/// How the note of a re-judgement against a changed golden begins.
pub(crate) const GOLDEN_CHANGED: &str = "judged against another golden than at run time";

/// The verdict a run directory's own `verdict.json` records (what `run` said), in words.
fn verdict_at_run_time(dir: &Path) -> String {
    #[derive(serde::Deserialize)]
    struct Head {
        exit_code: i32,
        summary: String,
    }
    let path = dir.join("verdict.json");
    match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<Head>(&t).map_err(|e| e.to_string()))
    {
        Ok(h) => format!("{} (exit {})", h.summary, h.exit_code),
        Err(e) => format!("unknown ({}: {e})", path.display()),
    }
}

/// How one seed's own verdict counts in the combined one.
fn seed_status(r: &Report) -> RuleStatus {
    match r.headline() {
        Headline::Passed | Headline::ExpectedFailure | Headline::Skipped => RuleStatus::Pass,
        Headline::NoGolden => RuleStatus::Missing,
        Headline::RunFailed | Headline::Failed => {
            if r.verdict.as_ref().map(|v| v.outcome) == Some(Outcome::Improved) {
                RuleStatus::Improved
            } else {
                RuleStatus::Regressed
            }
        }
    }
}

/// The combined report of the multi-seed run in `dir`, from what it stores: each seed re-judged
/// against the golden, then the seeds' distribution against the golden's calibration.
pub(crate) fn judge_combined(
    dir: &Path,
    golden_root: &Path,
) -> Result<CombinedReport, CommandError> {
    let manifest = SeedsManifest::read(dir)?;
    let StoredSeeds {
        seeds,
        absent,
        errored,
    } = StoredSeeds::judge(dir, &manifest, golden_root)?;
    let first = seeds.first().map(|(_, r)| r);
    let hardware = first.map(|r| r.run.hardware.clone()).unwrap_or_default();
    let golden = match first {
        Some(_) => GoldenStore::new(golden_root)
            .load(
                manifest.golden.as_deref().unwrap_or(&manifest.scenario),
                &hardware,
            )
            .map_err(|e| CommandError::invalid(e.to_string()))?,
        None => None,
    };
    let checks = first
        .and_then(|r| {
            // The checks the seeds ran with (the same for every seed).
            super::manifest::RunManifest::read(Path::new(&r.run.dir))
                .ok()
                .map(|m| m.checks)
        })
        .unwrap_or_default();
    let runs: Vec<SeedRun> = seeds
        .iter()
        .map(|(seed, r)| SeedRun {
            seed: *seed,
            table: &r.metrics,
            status: seed_status(r),
            summary: r.summary(),
            dir: r.run.dir.clone(),
        })
        .collect();
    let mut verdict = judge_seeds(&runs, &checks, golden.as_ref());
    add_unjudged_seed_rules(&mut verdict, &errored, &absent);
    let mut broken: Vec<String> = seeds
        .iter()
        .filter(|(_, r)| r.headline() == Headline::RunFailed)
        .map(|(s, r)| format!("seed {s}: {}", r.summary()))
        .collect();
    broken.extend(errored.iter().map(|(s, e)| format!("seed {s}: {e}")));
    let run = combined_run_info(dir, &manifest, first, hardware, &broken, &absent);
    let mut notes = vec![format!(
        "multi-seed run: seeds {}, one run directory each (`seed-<S>/`); each seed is judged \
         against the golden alone (`seed:<S>`), then the seeds' window means against the \
         golden's calibration by Student's pooled t-test (`seeds:<metric>`, 5% false alarms over \
         all tails that can fail, split by Bonferroni)",
        seeds_text(&manifest.seeds)
    )];
    if let Some(cal) = golden.as_ref().and_then(|g| g.calibration.as_ref()) {
        notes.push(format!("calibration: {}", cal.source()));
    }
    let (knobs, knob_note) = seeds_knobs(&seeds);
    notes.extend(knob_note);
    let seed_series = SeedSeries::new(&seeds, golden.as_ref());
    let report = Report {
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
        }),
        knobs,
        skipped: None,
        trainer_tail: None,
        pending_golden: None,
        notes,
        seed_series: Some(seed_series),
    };
    Ok(CombinedReport { report })
}

/// The seeds of a multi-seed run as its directory stores them.
struct StoredSeeds {
    /// The seeds that ran, each re-judged against the golden alone.
    seeds: Vec<(u64, Report)>,
    /// The seeds with no run directory (the multi-seed run stopped before them).
    absent: Vec<u64>,
    /// The seeds whose run could not be made at all, with the error.
    errored: Vec<(u64, String)>,
}

impl StoredSeeds {
    /// Sort the manifest's seeds by what `dir` holds of them, judging each that ran.
    fn judge(
        dir: &Path,
        manifest: &SeedsManifest,
        golden_root: &Path,
    ) -> Result<StoredSeeds, CommandError> {
        let mut stored = StoredSeeds {
            seeds: Vec::new(),
            absent: Vec::new(),
            errored: Vec::new(),
        };
        for seed in &manifest.seeds {
            let sd = SeedsManifest::seed_dir(dir, *seed);
            if let Some(e) = manifest.errors.get(seed) {
                stored.errored.push((*seed, e.clone()));
            } else if sd.join(super::manifest::MANIFEST_FILE).is_file() {
                stored.seeds.push((*seed, judge_stored(&sd, golden_root)?));
            } else {
                stored.absent.push(*seed);
            }
        }
        Ok(stored)
    }
}

/// Add a `seed:<S>` rule for each seed that could not be judged: a regression for a seed whose
/// run failed to be made, a missing rule for one that never started.
fn add_unjudged_seed_rules(
    verdict: &mut crate::compare::Verdict,
    errored: &[(u64, String)],
    absent: &[u64],
) {
    let rule = |seed: u64, status: RuleStatus, message: String| crate::compare::RuleVerdict {
        rule: crate::compare::seeds::seed_rule_id(seed),
        status,
        evidence: crate::compare::Evidence {
            message,
            ..Default::default()
        },
        metrics: Vec::new(),
        failing_steps: Vec::new(),
        points: Vec::new(),
        fail_fast: None,
    };
    for (seed, e) in errored {
        verdict.rules.push(rule(
            *seed,
            RuleStatus::Regressed,
            format!("seed {seed}: the run failed: {e}"),
        ));
        verdict.outcome = Outcome::Regressed;
    }
    // A seed that never started (the run was stopped before it) is a rule of its own.
    for seed in absent {
        verdict.rules.push(rule(
            *seed,
            RuleStatus::Missing,
            format!("seed {seed}: no run directory (the multi-seed run stopped before it)"),
        ));
        if verdict.outcome == Outcome::Passed {
            verdict.outcome = Outcome::Missing;
        }
    }
}

/// The combined run's own run info: the seeds' common facts (from the first seed judged), its
/// status and reason from the seeds that broke (`broken`) or never ran (`absent`).
fn combined_run_info(
    dir: &Path,
    manifest: &SeedsManifest,
    first: Option<&Report>,
    hardware: String,
    broken: &[String],
    absent: &[u64],
) -> RunInfo {
    let status = if broken.is_empty() && absent.is_empty() {
        RunStatus::Completed
    } else if broken.is_empty() {
        RunStatus::Interrupted
    } else {
        RunStatus::Failed
    };
    // The build and host facts (steps, versions, host, device, threads, numerics) are the
    // first seed's; the rest is the combined run's own.
    RunInfo {
        run_id: RunInfo::id_of(dir),
        dir: dir.display().to_string(),
        scenario_path: manifest.scenario_path.clone(),
        hardware,
        status: Some(status),
        reason: (!broken.is_empty()).then(|| broken.join("; ")).or_else(|| {
            (!absent.is_empty()).then(|| format!("{} seed(s) never ran", absent.len()))
        }),
        failed_step: None,
        seed: None,
        started: Some(manifest.started.clone()),
        ended: manifest.ended.clone(),
        ..first.map(|r| r.run.clone()).unwrap_or_default()
    }
}

/// The combined report of a multi-seed run (its plots' series in `report.seed_series`).
pub(crate) struct CombinedReport {
    pub(crate) report: Report,
}

impl CombinedReport {
    /// Write the combined reports into `out`: the usual files, whose plots show every seed,
    /// the golden and the calibration's spread.
    pub(crate) fn write(&self, out: &Path) -> Result<(), CommandError> {
        write_reports(out, &self.report).map_err(|e| CommandError::run_failed(e.to_string()))
    }
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
    fn new(seeds: &[(u64, Report)], golden: Option<&crate::golden::Golden>) -> SeedSeries {
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
