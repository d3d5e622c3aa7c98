//! A run directory's own files, as data: `run.json` (the manifest the runner writes when a run
//! starts and again when it ends), `metrics.csv` (the series) and, for a multi-seed run,
//! `seeds.json`. The runner writes them; the judge (`judge`), the reports and the commands
//! read them back. Nothing here judges or renders.

use std::path::{Path, PathBuf};

use crate::model::metrics::{MetricTable, MetricsError};

mod judged_against;
mod manifest;
mod records;
mod seeds_json;

pub use judged_against::{GoldenDigest, JudgedAgainst};
pub use manifest::{KnobDiff, ManifestError, RunManifest, TrainerCommand};
pub use records::{DroppedValue, ReplayRecord, RunStatus, Stray, SyncMismatch, WeightSyncRecord};
pub use seeds_json::SeedsFileError;
pub(crate) use seeds_json::{is_combined, SeedsManifest};

pub(crate) const MANIFEST_FILE: &str = "run.json";
pub(crate) const METRICS_FILE: &str = "metrics.csv";

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("invalid run series: {0}")]
    Series(#[from] MetricsError),
}

/// A stored run: its manifest and its series.
pub(crate) fn load(dir: &Path) -> Result<(RunManifest, MetricTable), RunDirError> {
    let m = RunManifest::read(dir)?;
    let t = MetricTable::read_csv(&dir.join(METRICS_FILE))?;
    Ok((m, t))
}

/// The verdict a run directory's own `verdict.json` records: what `run` said when it judged
/// the run (its exit code and summary line).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub(crate) struct RecordedVerdict {
    pub(crate) exit_code: i32,
    pub(crate) summary: String,
}

impl RecordedVerdict {
    /// `dir/verdict.json`'s verdict, or why it is missing or unreadable.
    pub(crate) fn read(dir: &Path) -> Result<RecordedVerdict, RecordedVerdictError> {
        let path = dir.join("verdict.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(source) => return Err(RecordedVerdictError::Read { path, source }),
        };
        serde_json::from_str(&text).map_err(|source| RecordedVerdictError::Json { path, source })
    }
}

/// Why a run directory's `verdict.json` says nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordedVerdictError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
}
