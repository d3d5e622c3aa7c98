//! Each lower layer's error, mapped to its exit status: the one place where a library error
//! becomes a `CommandError` (nextest's way). The message is the error's own text.

use crate::backend::child::ChildError;
use crate::error::{CommandError, ExitStatus};
use crate::fsx::FsError;
use crate::runner::RunError;

/// A failure of the harness's own files: the run could not be carried out (exit 3).
impl From<FsError> for CommandError {
    fn from(e: FsError) -> Self {
        CommandError::run_failed(e.to_string())
    }
}

/// The torch backend's process could not serve (exit 3).
impl From<ChildError> for CommandError {
    fn from(e: ChildError) -> Self {
        CommandError::run_failed(e.to_string())
    }
}

/// A run that could not be carried out: its input's fault (exit 2) or the host's (exit 3).
impl From<RunError> for CommandError {
    fn from(e: RunError) -> Self {
        let status = match &e {
            RunError::Unrunnable(_) | RunError::BackendInput(_) => ExitStatus::InvalidInput,
            RunError::Fs(_)
            | RunError::Manifest(_)
            | RunError::Metrics(_)
            | RunError::Child(_)
            | RunError::Start(_) => ExitStatus::RunFailed,
        };
        CommandError::new(status, e.to_string())
    }
}
