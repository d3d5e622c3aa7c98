//! `rlharness history DIR...`: read, judge and chart many runs; write the page and charts;
//! print the summary or a GitHub step summary.

use std::path::{Path, PathBuf};

use crate::cli::HistoryFormat;
use crate::error::{CommandError, ExitStatus};
use crate::history::{collect, render, write};

pub(crate) fn history(
    dirs: &[PathBuf],
    golden: &Path,
    out: &Path,
    min_change: f64,
    format: HistoryFormat,
) -> Result<ExitStatus, CommandError> {
    let collected = collect(dirs, golden, min_change)?;
    let rendered = render(&collected);
    let written = write(out, &rendered)?;
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
