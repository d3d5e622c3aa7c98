//! Why a run could not be carried out. A run that started and then failed is no error: it ends
//! with a `RunEnd` in `run.json`. `app` maps each case to its exit status.

use crate::model::metrics::MetricsError;
use crate::model::rundir::ManifestError;
use crate::run::backend::child::ChildError;
use rlharness_arctic::fsx::FsError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// What the plan asks for cannot run this way: `--direct` with a trainer command, the
    /// builtin driver without a backend, a backend kind `run` does not start.
    #[error("{0}")]
    Unrunnable(String),
    /// The backend's own input does not load: a mock script, a cassette.
    #[error("backend: {0}")]
    BackendInput(String),
    /// A file of the run directory could not be written.
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The torch backend's process.
    #[error(transparent)]
    Child(#[from] ChildError),
    /// A stage could not start: a port, the recording proxy, the driver's client.
    #[error("{0}")]
    Start(String),
}
