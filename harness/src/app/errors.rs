//! Each lower layer's error, mapped to its exit status: the one place where a library error
//! becomes a `CommandError` (nextest's way). The message is the error's own text.

use crate::backend::child::ChildError;
use crate::bisect::BisectError;
use crate::compare::{CombinedError, StoredError};
use crate::error::{CommandError, ExitStatus};
use crate::golden::calibration::CalibrationError;
use crate::golden::GoldenError;
use crate::history::HistoryError;
use crate::propagate::PropagateError;
use crate::report::ReportError;
use crate::runner::RunError;

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

/// The matrix could not be judged: its input's fault (exit 2) or a baseline's or the host's
/// (exit 3).
impl From<PropagateError> for CommandError {
    fn from(e: PropagateError) -> Self {
        let status = match &e {
            PropagateError::Input(_) => ExitStatus::InvalidInput,
            PropagateError::Executor(e) => e.status,
            PropagateError::Baseline(_) | PropagateError::Report(_) | PropagateError::Fs(_) => {
                ExitStatus::RunFailed
            }
        };
        CommandError::new(status, e.to_string())
    }
}

/// A golden store that cannot be read or written: its files' fault (exit 2), or the host's
/// (exit 3).
impl From<GoldenError> for CommandError {
    fn from(e: GoldenError) -> Self {
        let status = match &e {
            GoldenError::Fs(_) => ExitStatus::RunFailed,
            _ => ExitStatus::InvalidInput,
        };
        CommandError::new(status, e.to_string())
    }
}

/// A calibration that cannot be read or written (exit 2).
impl From<CalibrationError> for CommandError {
    fn from(e: CalibrationError) -> Self {
        CommandError::invalid(e.to_string())
    }
}

/// A stored run that cannot be judged again: its files or its golden (exit 2).
impl From<StoredError> for CommandError {
    fn from(e: StoredError) -> Self {
        CommandError::invalid(e.to_string())
    }
}

/// A multi-seed run that cannot be judged again: its files or its golden (exit 2).
impl From<CombinedError> for CommandError {
    fn from(e: CombinedError) -> Self {
        CommandError::invalid(e.to_string())
    }
}

/// The reports could not be written (exit 3).
impl From<ReportError> for CommandError {
    fn from(e: ReportError) -> Self {
        CommandError::run_failed(e.to_string())
    }
}

/// A history that finds no runs, or cannot read a folder or the golden store: invalid input
/// (exit 2).
impl From<HistoryError> for CommandError {
    fn from(e: HistoryError) -> Self {
        CommandError::invalid(e.to_string())
    }
}

/// A repository or revision that does not fit (exit 2), or git failing on this host (exit 3).
impl From<BisectError> for CommandError {
    fn from(e: BisectError) -> Self {
        let status = match &e {
            BisectError::Input(_) => ExitStatus::InvalidInput,
            BisectError::Git(_) | BisectError::Fs(_) => ExitStatus::RunFailed,
        };
        CommandError::new(status, e.to_string())
    }
}
