//! `rlharness history DIR...`: read, judge and chart many runs; print the summary or a GitHub
//! step summary; write the page and charts.

use std::path::{Path, PathBuf};

use crate::cli::HistoryFormat;
use crate::error::{CommandError, ExitStatus};
use crate::history::{collect, render, write, HistoryError};

fn command_error(e: HistoryError) -> CommandError {
    match e {
        HistoryError::NoRuns(_) | HistoryError::Walk { .. } => CommandError::invalid(e.to_string()),
        HistoryError::Golden(_) => CommandError::invalid(e.to_string()),
    }
}

pub(super) fn history(
    dirs: &[PathBuf],
    golden: &Path,
    out: &Path,
    min_change: f64,
    format: HistoryFormat,
) -> Result<ExitStatus, CommandError> {
    let collected = collect(dirs, golden, min_change).map_err(command_error)?;
    let rendered = render(&collected);
    let written = write(out, &rendered).map_err(|e| CommandError::run_failed(e.to_string()))?;
    match format {
        HistoryFormat::Summary => {
            outln!("{}", rendered.terminal.trim_end());
            if let Some(page) = written.first() {
                outln!("history: {}", page.display());
            }
        }
        HistoryFormat::GhSummary => outln!("{}", rendered.gh_summary.trim_end()),
    }
    Ok(ExitStatus::Passed)
}
