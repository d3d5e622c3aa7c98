//! `rlharness history DIR...`: read, judge and chart many runs; write the page and charts;
//! print the summary or a GitHub step summary.

use std::path::{Path, PathBuf};

use crate::app::cli::HistoryFormat;
use crate::model::error::{CommandError, ExitStatus};
use crate::tools::history::{collect, render, write};

pub(crate) fn history(
    dirs: &[PathBuf],
    golden: Option<&Path>,
    out: &Path,
    min_change: f64,
    overlay: usize,
    format: HistoryFormat,
) -> Result<ExitStatus, CommandError> {
    let golden = golden_store(dirs, golden)?;
    let collected = collect(dirs, &golden, min_change)?;
    let rendered = render(&collected, overlay);
    let written = write(out, &rendered)?;
    match format {
        HistoryFormat::Summary => {
            outln!("{}", rendered.terminal.trim_end());
            if let Some(page) = written.first() {
                outln!("history: {}", page.display());
            }
        }
        HistoryFormat::GhSummary => outln!("{}", rendered.gh_summary.trim_end()),
        HistoryFormat::Json => outln!("{:#}", super::json_out::history(&collected, &written)),
    }
    Ok(ExitStatus::Passed)
}

/// The store the runs are judged against: `--golden`, else the one `run` finds from the first
/// run's scenario file. A store that does not exist is an input error (exit 2): every run would
/// read as having no golden.
fn golden_store(dirs: &[PathBuf], given: Option<&Path>) -> Result<PathBuf, CommandError> {
    let first = dirs
        .iter()
        .filter_map(|d| crate::tools::history::run_dirs(d).ok())
        .flatten()
        .find_map(|d| crate::model::rundir::RunManifest::read(&d).ok());
    let scenario = first.as_ref().map(|m| PathBuf::from(&m.scenario_path));
    let store = crate::app::cli::golden_store(given, scenario.as_deref());
    // No run at all: the history says so itself.
    if store.is_dir() || first.is_none() {
        return Ok(store);
    }
    Err(CommandError::invalid(format!(
        "no golden store at {}{}: every run would read as having no golden (pass --golden DIR)",
        store.display(),
        if given.is_some() {
            ""
        } else {
            " (found from the first run's scenario file)"
        }
    )))
}
