//! Exit codes of the `rlharness` and `rlharness-torch` binaries (fixed interface, see
//! docs/architecture.md).

use crate::fsx::FsError;

/// Documented exit codes. Scripts and CI depend on these numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// 0: all checks passed (skips included).
    Passed = 0,
    /// 1: a check failed (regression, or a verdict other than the expected one).
    CheckFailed = 1,
    /// 2: invalid input (CLI, scenario, golden file).
    InvalidInput = 2,
    /// 3: the run itself failed (driver or backend crash, hang, timeout, interrupt).
    RunFailed = 3,
    /// 4: no golden yet; a pending `.new` golden was written.
    NoGolden = 4,
}

impl ExitStatus {
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The status of a documented exit code (`None` for any other number).
    /// The verdict's word in indexes and summaries (`pass`, `FAIL`, `RUN FAILED`, ...).
    pub fn word(self) -> &'static str {
        match self {
            ExitStatus::Passed => "pass",
            ExitStatus::CheckFailed => "FAIL",
            ExitStatus::InvalidInput => "INVALID",
            ExitStatus::RunFailed => "RUN FAILED",
            ExitStatus::NoGolden => "no golden",
        }
    }
    pub fn from_code(code: i32) -> Option<ExitStatus> {
        Some(match code {
            0 => ExitStatus::Passed,
            1 => ExitStatus::CheckFailed,
            2 => ExitStatus::InvalidInput,
            3 => ExitStatus::RunFailed,
            4 => ExitStatus::NoGolden,
            _ => return None,
        })
    }

    /// When several scenarios run, the worst status wins: 2 > 3 > 1 > 4 > 0.
    pub fn severity(self) -> u8 {
        match self {
            ExitStatus::Passed => 0,
            ExitStatus::NoGolden => 1,
            ExitStatus::CheckFailed => 2,
            ExitStatus::RunFailed => 3,
            ExitStatus::InvalidInput => 4,
        }
    }

    pub fn worst(self, other: ExitStatus) -> ExitStatus {
        if other.severity() > self.severity() {
            other
        } else {
            self
        }
    }
}

/// An error that knows which exit status it maps to: what a binary's `main` prints before it
/// exits with that status.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CommandError {
    pub status: ExitStatus,
    pub message: String,
}

impl CommandError {
    pub fn new(status: ExitStatus, message: impl Into<String>) -> Self {
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

/// A failure of the program's own files: what it was asked to do could not be carried out
/// (exit 3).
impl From<FsError> for CommandError {
    fn from(e: FsError) -> Self {
        CommandError::run_failed(e.to_string())
    }
}
