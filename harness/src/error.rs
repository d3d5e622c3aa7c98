//! Exit codes of the `rlharness` binary (fixed interface, see docs/architecture.md): the
//! statuses are `rlharness_arctic::exit::ExitStatus`, shared with `rlharness-torch`; the
//! error that carries one is the harness's own.

pub use rlharness_arctic::exit::ExitStatus;

/// An error that knows which exit code it maps to. Only the command layer (`app`) makes one:
/// each lower module's own error converts into it in `app/errors.rs`, so `main` only prints
/// and exits.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CommandError {
    pub status: ExitStatus,
    pub message: String,
}

impl CommandError {
    pub(crate) fn new(status: ExitStatus, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ExitStatus::InvalidInput, message)
    }
    pub fn run_failed(message: impl Into<String>) -> Self {
        Self::new(ExitStatus::RunFailed, message)
    }
}
