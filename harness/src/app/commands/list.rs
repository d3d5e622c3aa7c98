//! `rlharness list [ROOT]`: the scenarios under a folder.

use std::path::Path;

use super::filter::{Facts, Filter};
use crate::app::cli::OutputFormat;
use crate::model::error::{CommandError, ExitStatus};
use crate::scenario::check;

pub(crate) fn list(
    root: &Path,
    tags: &[String],
    filter: Option<&str>,
    format: OutputFormat,
) -> Result<ExitStatus, CommandError> {
    let filter = filter.map(Filter::parse).transpose()?;
    // Listing nothing is an input error, as checking nothing is: a mistyped path must not pass
    // a CI step.
    if !root.exists() {
        return Err(CommandError::invalid(format!(
            "{}: no such scenario file or folder",
            root.display()
        )));
    }
    let mut entries = crate::app::list(root);
    if entries.is_empty() {
        return Err(CommandError::invalid(format!(
            "{}: no scenario files there",
            root.display()
        )));
    }
    entries.retain(|e| {
        let path = e.path.display().to_string();
        let facts = Facts {
            name: &e.name,
            tags: &e.tags,
            requires: &e.requires,
            path: &path,
        };
        (tags.is_empty() || e.tags.iter().any(|t| tags.contains(t)))
            && filter.as_ref().is_none_or(|f| f.matches(&facts))
    });
    match format {
        OutputFormat::Text => out!("{}", check::render_list(&entries)),
        OutputFormat::Json => outln!("{:#}", super::json_out::list(&entries)),
    }
    Ok(ExitStatus::Passed)
}
