//! The golden store: accepted baselines as plain files in plain folders.
//!
//! Layout: `<root>/<scenario>/<hardware>/metrics.csv` (the accepted series) and `golden.yaml`
//! (a provenance header and a snapshot of the rules). A run never overwrites them: it writes a
//! pending pair beside them, `metrics.csv.new` and `golden.yaml.new`, which `accept` renames
//! over the accepted files and `reject` deletes (the bless flow of insta). With `CI=true` the
//! store refuses to write anything.
//!
//! Two renames are not one atomic step, so the header carries `metrics_sha256`, the digest of
//! the series it was written with. `accept` renames the series first and the header last: a
//! crash in between leaves `golden.yaml.new` whose digest matches the new `metrics.csv`, which
//! `load` refuses (the pair disagrees) and `accept` finishes. Headers without the digest (from
//! before it existed) are read as before.
//!
//! `store` is the store's folders and its accept and reject, `header` the `golden.yaml` emitter
//! and reader. The hardware key a golden is kept under comes from `host`.

pub(crate) mod audit_record;
pub(crate) mod calibration;
mod header;
mod store;

/// What a verdict was judged against: `run.json`'s model, which this store computes.
pub use crate::model::rundir::{GoldenDigest, JudgedAgainst};
pub use calibration::CalibrationError;
pub(crate) use header::{metrics_digest, parse_header};
pub use store::GoldenStore;

use std::path::PathBuf;

use crate::model::checks::ChecksSpec;
use crate::model::metrics::{MetricTable, MetricsError};
use rlharness_arctic::fsx;

pub(crate) const METRICS_FILE: &str = "metrics.csv";
pub(crate) const HEADER_FILE: &str = "golden.yaml";
pub(crate) const PENDING_SUFFIX: &str = ".new";

/// Where an accepted series came from.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    /// RFC 3339.
    pub date: String,
    pub harness_version: String,
    pub git_commit: Option<String>,
    pub device: String,
    pub seed: Option<u64>,
    pub threads: Option<u64>,
    pub torch_version: Option<String>,
    /// Where the numbers come from when they are not a run of this harness (a published
    /// reference such as a README's table). `None` for a blessed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The numeric fingerprint of the host and backend that made the series (a deterministic
    /// backend only): a run with the same fingerprint must reproduce it bit for bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numeric_fingerprint: Option<String>,
    /// The level the CPU kernels were pinned to (torch on the CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_isa: Option<String>,
}

/// The calibrated bands in force when a golden was blessed: per calibrated rule, each window's
/// (first step, last step, half-width), as `golden.yaml`'s `bands:` line records them. The
/// loosening guard compares the bands a run is judged with against these, so a wider band (a
/// larger `k`, `abs` turned into a wide calibrated rule, a noisier re-calibration) fails until
/// it is blessed again.
pub type BlessedBands = std::collections::BTreeMap<String, Vec<(u64, u64, f64)>>;

/// An accepted (or pending) baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Golden {
    pub(crate) scenario: String,
    pub(crate) hardware: String,
    pub table: MetricTable,
    pub provenance: Provenance,
    /// The rules in force when it was blessed.
    pub(crate) rules: Option<ChecksSpec>,
    /// The calibrated bands in force when it was blessed (none recorded: no calibrated rule
    /// had a calibration then, or a golden older than the record).
    pub(crate) bands: Option<BlessedBands>,
    pub(crate) dir: PathBuf,
    /// The measured noise beside it (`calibration.json`), when calibrated.
    pub(crate) calibration: Option<calibration::Calibration>,
    /// Its files by digest: what a run's `run.json` records it was judged against.
    pub(crate) digest: GoldenDigest,
    /// The audit of its verdict design (`audit.json`, `golden audit --save`), when made.
    pub(crate) audit: Option<audit_record::AuditRecord>,
}

#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    #[error(transparent)]
    Fs(#[from] fsx::FsError),
    #[error("invalid golden series: {0}")]
    Metrics(#[from] MetricsError),
    #[error(transparent)]
    Audit(#[from] audit_record::AuditRecordError),
    #[error("invalid golden header {path}: {message}")]
    Header { path: PathBuf, message: String },
    #[error(transparent)]
    Calibration(#[from] calibration::CalibrationError),
    #[error(
        "refusing to write a golden for {scenario} on {hardware}: CI=true, and CI never writes \
         goldens; run it locally and commit the accepted golden"
    )]
    CiRefused { scenario: String, hardware: String },
    #[error("invalid {what} `{name}`: use letters, digits, `-`, `_`, `.`, and `/` between parts")]
    BadName { what: &'static str, name: String },
    #[error(
        "{}: not accepted: its rule `golden:{metric}` reads a metric the run never had (it \
         would only ever fail as missing); fix the scenario's rule and run it again",
        dir.display()
    )]
    RuleWithoutSeries { dir: PathBuf, metric: String },
    #[error("no pending golden matches {0}")]
    NoPending(String),
    #[error("{path} has a pending series but no {missing}")]
    TornPending {
        path: PathBuf,
        missing: &'static str,
    },
    #[error(
        "{dir}: metrics.csv does not match golden.yaml (metrics_sha256 {want}, the file has \
         {got}){hint}"
    )]
    Mismatch {
        dir: PathBuf,
        want: String,
        got: String,
        hint: &'static str,
    },
}

/// A pending golden waiting for review.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub(crate) scenario: String,
    pub(crate) hardware: String,
    pub(crate) dir: PathBuf,
    pub(crate) diff_summary: String,
}

#[cfg(test)]
mod tests;
