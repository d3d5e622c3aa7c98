//! `rlharness compare RUN [RUN2]`: a stored run judged again, against its golden or another run.

use std::path::{Path, PathBuf};

use crate::app::cli::{self, CompareFormat};
use crate::app::errors::Failure;
use crate::app::judged;
use crate::judge::{judge_run, reference_golden, RunRecord};
use crate::model::error::{CommandError, ExitStatus};
use crate::model::golden::calibration::Calibration;
use crate::model::metrics::MetricTable;
use crate::model::rundir::{self, RunManifest};
use crate::report::{self, terminal, write_reports, Reference, Report, RunInfo};

/// `rlharness compare RUN [RUN2]`: the re-judged run's report printed in `format`; its exit
/// status is the command's.
pub(crate) fn compare(
    run: &Path,
    run2: Option<&Path>,
    golden: Option<&Path>,
    format: CompareFormat,
) -> Result<ExitStatus, CommandError> {
    let golden = cli::golden_store(golden, scenario_of_run(run).as_deref());
    let (report, out) = compare_command(run, run2, &golden)?;
    print_compared(&report, &out, format)?;
    Ok(report.exit_status())
}

/// A stored run's manifest and series, for a command (an unreadable one is invalid input).
pub(crate) fn load_run(dir: &Path) -> Result<(RunManifest, MetricTable), CommandError> {
    rundir::load(dir).map_err(CommandError::from)
}

/// Where `compare` writes: beside the run, never over the run's own reports.
pub(crate) fn compare_out_dir(run: &Path, run2: Option<&Path>) -> PathBuf {
    match run2 {
        None => run.join("compare").join("golden"),
        Some(b) => run.join("compare").join(
            b.canonicalize()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "run2".into()),
        ),
    }
}

/// Re-judge a stored run against its golden (or against a second run) with the checks recorded
/// in its `run.json`, write the reports under `RUN/compare/...`, and return the report and
/// that folder (the caller prints; the report's exit status is the command's).
pub fn compare_command(
    run: &Path,
    run2: Option<&Path>,
    golden_root: &Path,
) -> Result<(Report, PathBuf), CommandError> {
    let out = compare_out_dir(run, run2);
    if rundir::is_combined(run) {
        if run2.is_some() {
            return Err(CommandError::invalid(format!(
                "{} is a multi-seed run: compare it against its golden (`compare RUN`), or \
                 compare one seed's directory (`{}/seed-<S>`) with another run",
                run.display(),
                run.display()
            )));
        }
        let report = judged::combined_report(run, golden_root)?;
        write_reports(&out, &report)?;
        return Ok((report, out));
    }
    let (mut manifest, table) = load_run(run)?;
    let (reference, verdict) = match run2 {
        Some(b) => {
            let (m2, t2) = load_run(b)?;
            if m2.scenario != manifest.scenario {
                return Err(CommandError::invalid(format!(
                    "{} is a run of `{}`, {} of `{}`: compare two runs of one scenario (or each \
                     against its golden: `rlharness compare RUN`)",
                    run.display(),
                    manifest.scenario,
                    b.display(),
                    m2.scenario
                )));
            }
            // The one judge, the second run standing as the golden: presence, the exact lane
            // (when both runs share a fingerprint and a seed), sanity and watchdog rules too. A
            // calibrated rule's band is the scenario's measured noise whichever run stands as
            // the reference: the calibration beside the scenario's golden, as `run` used it.
            let mut as_golden = reference_golden(b, &m2, t2.clone());
            as_golden.calibration = Calibration::read(
                &golden_root
                    .join(&manifest.scenario)
                    .join(&manifest.hardware),
            )?;
            let verdict = judge_run(&RunRecord::of(&manifest, &table), Some(&as_golden));
            let mut metrics = manifest.checks.metrics();
            if metrics.is_empty() {
                let cols = t2.columns();
                metrics = table
                    .columns()
                    .into_iter()
                    .filter(|c| cols.contains(c))
                    .collect();
            }
            let overlay = crate::report::Overlay::new(
                (manifest.label.as_deref(), &RunInfo::id_of(&canonical(run))),
                (m2.label.as_deref(), &RunInfo::id_of(&canonical(b))),
                metrics,
            );
            let reference = Reference {
                label: format!("{} ({})", RunInfo::id_of(&canonical(b)), m2.scenario),
                table: t2,
                provenance: None,
                overlay: Some(overlay),
            };
            (Some(reference), verdict)
        }
        None => {
            // The same judge as `run`, on what the run directory stores.
            let report = judged::judge_stored(run, golden_root)?;
            write_reports(&out, &report)?;
            return Ok((report, out));
        }
    };
    // A re-judgement writes no golden.
    manifest.pending_golden = None;
    let report = judged::run_report(run, &manifest, table, reference, verdict);
    write_reports(&out, &report)?;
    Ok((report, out))
}

/// A run directory as its canonical path (its own name, where it is given as `.` or a link).
fn canonical(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

/// The scenario file a stored run (or multi-seed run) was made from, as `run.json` or
/// `seeds.json` records it: `compare` finds the golden store from it as `run` did. The
/// recorded path is relative to where the run was started; from elsewhere it is looked for
/// under the run folder's ancestors (a run under the project's `reports/` finds the project).
fn scenario_of_run(run: &Path) -> Option<PathBuf> {
    ["run.json", "seeds.json"].iter().find_map(|f| {
        let text = std::fs::read_to_string(run.join(f)).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let path = PathBuf::from(v.get("scenario_path")?.as_str()?);
        if path.is_file() || path.is_absolute() {
            return path.is_file().then_some(path);
        }
        let run = std::fs::canonicalize(run).ok()?;
        run.ancestors()
            .skip(1)
            .map(|a| a.join(&path))
            .find(|p| p.is_file())
    })
}

/// What `compare` prints: a terminal summary, the Markdown report, or `verdict.json`.
fn print_compared(report: &Report, out: &Path, format: CompareFormat) -> Result<(), CommandError> {
    use crate::app::cli::CompareFormat;
    match format {
        CompareFormat::Summary => {
            out!(
                "{}",
                report::render_terminal(
                    report,
                    Some(&out.display().to_string()),
                    terminal::stdout_color()
                )
            );
        }
        CompareFormat::Md => out!("{}", report::render_markdown(report)),
        CompareFormat::Json => {
            let path = out.join("verdict.json");
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(source) => return Err(Failure::ReadVerdict { path, source }.into()),
            };
            outln!("{}", text.trim_end());
        }
    }
    Ok(())
}
