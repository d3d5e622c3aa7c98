//! Reports: one `Report` model, pure renderers, and one place that writes files
//! (`write_reports`). A run's `report.md` and `report.html` are one document (`run_doc`)
//! written by the Markdown and HTML writers of the one document model (`doc`); its
//! `junit.xml` is a model of test cases (`run_junit`) written by the one JUnit writer
//! (`junit`); the SVG plots are `plots`, the machine-readable verdict `verdict_json`.
//!
//! `format` holds the numbers, statuses and rows every renderer shows. Nothing here judges:
//! what a verdict needs computed (a stored run re-judged, a multi-seed run's combined verdict,
//! its budget) comes in as data (`multi_seed`), and so does what the judge decided of the
//! scenario (`judge::Decision`: its headline, exit status, summary and expected-verdict
//! match), which the renderers read off the report.

use std::path::Path;

use crate::judge::{Decision, ExpectedMismatch, ExpectedVerdict, RuleVerdict, Verdict};
use crate::model::error::ExitStatus;
use crate::model::golden::{Golden, Provenance};
use crate::model::metrics::MetricTable;
use crate::model::rundir::{KnobDiff, RunManifest, RunStatus};
use rlharness_arctic::fsx;
use rlharness_arctic::wire::runtime::Numerics;

pub(crate) mod doc;
mod format;
pub(crate) mod junit;
mod plots;
mod run_doc;
mod run_junit;
pub(crate) use plots::{plot_trend, TrendPlot};
pub(crate) mod multi_seed;
mod tensorboard;
pub(crate) mod terminal;
mod verdict_json;
pub(crate) use tensorboard::judged_scalars;

pub(crate) use crate::judge::Headline;
pub(crate) use format::{band_text, num, opt_num, plot_file_name, status_text, RuleRow};
pub(crate) use plots::{render_overlay, render_plots, render_runs};
#[cfg(test)]
pub(crate) use run_doc::render_html;
pub(crate) use run_doc::render_markdown;
use run_doc::Charts;
pub(crate) use run_junit::render_junit;
pub(crate) use terminal::render_terminal;
pub(crate) use verdict_json::render_verdict_json;

/// Facts about the run that the reports show (paths and times are volatile: snapshot tests
/// redact them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunInfo {
    pub(crate) run_id: String,
    pub(crate) dir: String,
    pub(crate) scenario_path: String,
    pub(crate) hardware: String,
    pub(crate) status: Option<RunStatus>,
    pub(crate) reason: Option<String>,
    pub(crate) failed_step: Option<u64>,
    pub(crate) seed: Option<u64>,
    pub(crate) steps: Option<u64>,
    pub(crate) harness_version: String,
    pub(crate) git_commit: Option<String>,
    pub(crate) host: String,
    pub device: String,
    pub(crate) threads: Option<u64>,
    pub torch_version: Option<String>,
    pub numerics: Option<Numerics>,
    pub(crate) started: Option<String>,
    pub(crate) ended: Option<String>,
    /// A command trainer's program and arguments, as a shell would read them.
    pub(crate) trainer_command: Option<String>,
}

impl RunInfo {
    pub(crate) fn from_manifest(m: &RunManifest, dir: &Path) -> RunInfo {
        RunInfo {
            run_id: RunInfo::id_of(dir),
            dir: dir.display().to_string(),
            scenario_path: m.scenario_path.clone(),
            hardware: m.hardware.clone(),
            status: Some(m.status),
            reason: m.reason.clone(),
            failed_step: m.failed_step,
            seed: Some(m.seed),
            steps: Some(m.steps),
            harness_version: m.harness_version.clone(),
            git_commit: m.git_commit.clone(),
            host: m.host.clone(),
            device: m.device.clone(),
            threads: m.threads,
            torch_version: m.torch_version.clone(),
            numerics: m.numerics.clone(),
            started: Some(m.started.clone()),
            ended: m.ended.clone(),
            trainer_command: m.trainer_command.as_ref().map(|c| shell_words(&c.argv)),
        }
    }

    /// A run's id: the name of its directory.
    pub(crate) fn id_of(dir: &Path) -> String {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Arguments as one line a POSIX shell reads back: a word with anything but letters, digits
/// and `-_./=:,@+%` in single quotes.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The series a run was judged against.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// `golden` or the other run's id.
    pub label: String,
    pub(crate) table: MetricTable,
    pub(crate) provenance: Option<Provenance>,
    /// Another run standing as the reference (`compare RUN RUN2`): both runs' curves of these
    /// metrics drawn on one chart each.
    pub(crate) overlay: Option<Overlay>,
}

/// The two-run overlay of `compare RUN RUN2`: what each curve is called (the run's `--label`,
/// else its id) and the metrics drawn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Overlay {
    pub(crate) run: String,
    pub(crate) other: String,
    pub(crate) metrics: Vec<String>,
}

impl Overlay {
    /// The overlay of runs named `run` and `other` (each its label, else its id: `*_id`); two
    /// equal names get their ids beside them, so the curves stay apart.
    pub(crate) fn new(
        run: (Option<&str>, &str),
        other: (Option<&str>, &str),
        metrics: Vec<String>,
    ) -> Overlay {
        let name = |(label, id): (Option<&str>, &str)| label.unwrap_or(id).to_string();
        let (mut a, mut b) = (name(run), name(other));
        if a == b {
            a = format!("{a} ({})", run.1);
            b = format!("{b} ({})", other.1);
        }
        Overlay {
            run: a,
            other: b,
            metrics,
        }
    }

    /// Its charts: (file name under `plots/`, metric, SVG).
    pub(crate) fn charts(
        &self,
        run: &MetricTable,
        other: &MetricTable,
    ) -> Vec<(String, String, String)> {
        self.metrics
            .iter()
            .map(|m| {
                (
                    format!("overlay_{}", plot_file_name(m)),
                    m.clone(),
                    render_overlay(run, other, m, &self.run, &self.other),
                )
            })
            .collect()
    }
}

impl Reference {
    /// A self-test's reference run (`reference_golden`), labelled as what it is.
    pub(crate) fn from_reference_run(g: &Golden) -> Reference {
        Reference {
            label: "reference run".into(),
            ..Reference::from_golden(g)
        }
    }

    pub(crate) fn from_golden(g: &Golden) -> Reference {
        Reference {
            label: "golden".into(),
            table: g.table.clone(),
            provenance: Some(g.provenance.clone()),
            overlay: None,
        }
    }
}

/// Everything every renderer needs about one scenario's run.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub(crate) scenario: String,
    pub run: RunInfo,
    /// `None` when the scenario was skipped or never judged.
    pub verdict: Option<Verdict>,
    pub expected: Option<ExpectedVerdict>,
    pub metrics: MetricTable,
    pub reference: Option<Reference>,
    pub(crate) knobs: Vec<KnobDiff>,
    pub(crate) skipped: Option<String>,
    pub trainer_tail: Option<String>,
    /// The pending golden this run wrote, if any.
    pub(crate) pending_golden: Option<String>,
    /// Facts about how the run was observed ("no wire observed: ...").
    pub(crate) notes: Vec<String>,
    /// A multi-seed run's series (its own `metrics` are empty): what its plots draw.
    pub(crate) seed_series: Option<multi_seed::SeedSeries>,
    /// The false-alarm budget the verdict was judged at, with its stored audit (a judged run
    /// with a golden).
    pub(crate) budget: Option<crate::judge::budget::BudgetStatement>,
    /// What the judge decided of the scenario (from its verdict, how its run ended, what it
    /// declared, the pending golden it wrote and whether it was skipped), handed in where the
    /// report is made; the renderers read it and never decide again.
    pub(crate) decision: Decision,
}

impl Report {
    /// A skipped scenario: its requirements are not met here (`decision`: the judge's of it).
    pub(crate) fn skipped(scenario: &str, reason: &str, decision: Decision) -> Report {
        Report {
            scenario: scenario.into(),
            run: RunInfo {
                status: Some(RunStatus::Skipped),
                reason: Some(reason.into()),
                ..RunInfo::default()
            },
            verdict: None,
            expected: None,
            metrics: MetricTable::new(),
            reference: None,
            knobs: Vec::new(),
            skipped: Some(reason.into()),
            trainer_tail: None,
            pending_golden: None,
            notes: Vec::new(),
            seed_series: None,
            budget: None,
            decision,
        }
    }

    /// A judged (or failed) run from its manifest and `verdict`, with what the judge decided of
    /// them (`decision`).
    pub(crate) fn from_run(
        dir: &Path,
        manifest: &RunManifest,
        metrics: MetricTable,
        reference: Option<Reference>,
        verdict: Option<Verdict>,
        decision: Decision,
    ) -> Report {
        let mut notes = manifest.notes.clone();
        if let Some(nj) = verdict.as_ref().and_then(|v| v.not_judged.as_ref()) {
            notes.push(format!(
                "not judged: the run stopped {}, so {} rule(s) reading later steps were left \
                 undecided ({})",
                nj.last_step
                    .map_or("before its first step".to_string(), |s| format!(
                        "after step {s}"
                    )),
                nj.rules.len(),
                nj.rules.join(", ")
            ));
        }
        Report {
            scenario: manifest.scenario.clone(),
            run: RunInfo::from_manifest(manifest, dir),
            verdict,
            expected: manifest.expected_verdict.clone(),
            metrics,
            reference,
            knobs: manifest.knobs.clone(),
            skipped: None,
            trainer_tail: None,
            pending_golden: manifest.pending_golden.clone(),
            notes,
            seed_series: None,
            budget: None,
            decision,
        }
    }

    /// The strict match against `expected_verdict`, when the scenario declares one.
    pub(crate) fn expected_match(&self) -> Option<Result<(), ExpectedMismatch>> {
        self.decision.expected_match.clone()
    }

    pub(crate) fn headline(&self) -> Headline {
        self.decision.headline
    }

    /// The scenario's exit status, as the judge decided it.
    pub fn exit_status(&self) -> ExitStatus {
        self.decision.exit_status
    }

    /// "passed", "regressed", "run failed: ...": the one-line summary.
    pub fn summary(&self) -> String {
        self.decision.summary.clone()
    }

    /// What the reference series is called in table headers: `golden` or the other run's label.
    pub(crate) fn reference_label(&self) -> &str {
        self.reference
            .as_ref()
            .map_or("golden", |g| g.label.as_str())
    }

    /// The golden rule of one metric, when the verdict has one (a multi-seed verdict's
    /// distribution test of the metric stands in for it).
    pub(crate) fn golden_rule(&self, metric: &str) -> Option<&RuleVerdict> {
        self.verdict.as_ref().and_then(|v| v.golden_rule(metric))
    }

    /// The default stability rule of one metric (`stability:<metric>`), when the verdict has
    /// one.
    pub(crate) fn stability_rule(&self, metric: &str) -> Option<&RuleVerdict> {
        self.verdict.as_ref().and_then(|v| v.stability_rule(metric))
    }

    /// Whether this is a multi-seed run's combined report (its series are the seeds').
    pub fn is_multi_seed(&self) -> bool {
        self.verdict
            .as_ref()
            .is_some_and(|v| v.seed_rules().next().is_some())
    }

    /// The two-run overlay's charts, when another run is the reference: (file name under
    /// `plots/`, metric, SVG).
    pub(crate) fn overlay_charts(&self) -> Vec<(String, String, String)> {
        match &self.reference {
            Some(Reference {
                overlay: Some(o),
                table,
                ..
            }) => o.charts(&self.metrics, table),
            _ => Vec::new(),
        }
    }

    /// The checked metrics, in rule order (plots and per-metric tables follow it).
    pub(crate) fn checked_metrics(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Some(v) = &self.verdict {
            for r in &v.rules {
                for m in &r.metrics {
                    if !out.contains(m) {
                        out.push(m.clone());
                    }
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// The one place that writes.

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Fs(#[from] fsx::FsError),
}

/// Write every report of one scenario into `dir`: verdict.json, report.md and report.html
/// (one document), junit.xml and plots/*.svg (atomically, file by file).
pub(crate) fn write_reports(dir: &Path, r: &Report) -> Result<(), ReportError> {
    let charts = Charts::of(r);
    let page = run_doc::document(r, &charts);
    fsx::write_atomic(&dir.join("verdict.json"), render_verdict_json(r).as_bytes())?;
    fsx::write_atomic(&dir.join("report.md"), doc::to_markdown(&page).as_bytes())?;
    fsx::write_atomic(&dir.join("report.html"), doc::to_html(&page).as_bytes())?;
    fsx::write_atomic(
        &dir.join("junit.xml"),
        render_junit(std::slice::from_ref(r)).as_bytes(),
    )?;
    let overlay = charts.overlay.into_iter().map(|(name, _, svg)| (name, svg));
    for (name, svg) in charts.metrics.into_iter().chain(overlay) {
        fsx::write_atomic(&dir.join("plots").join(name), svg.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
