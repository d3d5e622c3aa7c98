//! `rlharness list [ROOT]`: the scenarios under a folder.

use std::path::Path;

use crate::cli::OutputFormat;
use crate::error::{CommandError, ExitStatus};
use crate::spec::check;

pub(crate) fn list(root: &Path, format: OutputFormat) -> Result<ExitStatus, CommandError> {
    // Listing nothing is an input error, as checking nothing is: a mistyped path must not pass
    // a CI step.
    if !root.exists() {
        return Err(CommandError::invalid(format!(
            "{}: no such scenario file or folder",
            root.display()
        )));
    }
    let entries = check::list(root);
    if entries.is_empty() {
        return Err(CommandError::invalid(format!(
            "{}: no scenario files there",
            root.display()
        )));
    }
    match format {
        OutputFormat::Text => out!("{}", check::render_list(&entries)),
        OutputFormat::Json => outln!("{:#}", super::json_out::list(&entries)),
    }
    Ok(ExitStatus::Passed)
}
