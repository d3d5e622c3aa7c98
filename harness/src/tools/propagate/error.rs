//! Why the propagation matrix could not be judged. A trial that failed is no error: it is a
//! cell of the matrix. `app` maps each case to its exit status.

use rlharness_arctic::fsx::FsError;

#[derive(Debug, thiserror::Error)]
pub enum PropagateError {
    /// The matrix's input is wrong: the scenario, its knob manifest, `--knobs`,
    /// `propagate.skip`, or a baseline that does not load, plan, or show anything to judge.
    #[error("{0}")]
    Input(String),
    /// A `--condition` that does not read or selects nothing known.
    #[error(transparent)]
    Condition(#[from] crate::tools::propagate::verdict::ConditionError),
    /// A baseline run failed: every trial would be compared with nothing.
    #[error("{0}")]
    Baseline(String),
    /// The matrix's reports could not be rendered.
    #[error("{0}")]
    Report(String),
    /// A file of the matrix could not be written.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The trials' executor elsewhere could not run them (`--executor ray`: a cluster that
    /// cannot be reached or refuses the token, a package that cannot be made); its exit status.
    #[error("{0}")]
    Executor(crate::model::error::CommandError),
}

impl PropagateError {
    /// The same error, with `note` after its message.
    pub(crate) fn with_note(self, note: &str) -> Self {
        match self {
            Self::Input(m) => Self::Input(format!("{m}; {note}")),
            Self::Condition(e) => Self::Input(format!("{e}; {note}")),
            Self::Baseline(m) => Self::Baseline(format!("{m}; {note}")),
            Self::Report(m) => Self::Report(format!("{m}; {note}")),
            Self::Fs(e) => Self::Baseline(format!("{e}; {note}")),
            Self::Executor(mut e) => {
                e.message = format!("{}; {note}", e.message);
                Self::Executor(e)
            }
        }
    }
}
