//! The scenario's stage blocks: the serde types of the `driver` and `backend` blocks of the
//! YAML format. They are the scenario's, so they live with it, below the stages: each stage
//! reads its block from here (`driver` and `backend` re-export theirs) and adds what it does
//! with it; the scenario uses no stage.
//!
//! `driver` is the `driver` block (which driver, the builtin driver's settings), `command` the
//! command driver's, `backend` the `backend` block.

mod backend;
mod command;
mod driver;

pub use backend::BackendSpec;
pub use command::CommandDriverSpec;
pub(crate) use command::MetricsSource;
pub use driver::{BuiltinDriverSpec, DriverSpec};
pub(crate) use driver::{Plant, RetrySpec, TaskSpec};
