//! Beyond one run: the history of a scenario's runs and where its metrics changed
//! (`rlharness history`).
//!
//! - `collect.rs`: find the run directories under the folders given, judge each as
//!   `compare RUN` does, group them by scenario and hardware, order them by start time;
//! - `blesses.rs`: when each golden was blessed (provenance, and the store's git history);
//! - `trend.rs`: one value per run for each window the judge uses, and the change points,
//!   each attributed to the code between two runs;
//! - `changepoint.rs`: PELT with a penalty set from the calibration's noise;
//! - `page.rs`: the trend charts, the page, the GitHub step summary, the terminal lines.

mod blesses;
pub mod changepoint;
mod collect;
mod page;
pub mod trend;

use std::path::{Path, PathBuf};

use rlharness_arctic::fsx::{self, FsError};

pub use collect::{collect, run_dirs, Collected, HistoryError};
pub use page::{render, Rendered};

/// Write a rendered history's files into `out` (created if needed), each atomically.
pub fn write(out: &Path, rendered: &Rendered) -> Result<Vec<PathBuf>, FsError> {
    fsx::create_dir_all(out)?;
    let mut written = Vec::new();
    for (name, text) in &rendered.files {
        let path = out.join(name);
        fsx::write_atomic(&path, text.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}
