//! Drivers: the builtin GRPO client of the Arctic API, and external commands (verl). Their
//! block of the scenario (`DriverSpec`) is the scenario's (`scenario::blocks`), re-exported here.

pub(crate) mod builtin;
pub(crate) mod client;
pub mod command;
pub(crate) mod mismatch;
pub mod strays;

pub use crate::scenario::blocks::{BuiltinDriverSpec, DriverSpec};
pub(crate) use crate::scenario::blocks::{Plant, TaskSpec};

/// The resend policy of the builtin driver's client, from its scenario's `driver.retry`.
impl crate::scenario::blocks::RetrySpec {
    pub(crate) fn policy(&self) -> client::RetryPolicy {
        client::RetryPolicy {
            attempts: self.attempts.max(1),
            first_backoff: std::time::Duration::from_millis(self.first_backoff_ms),
            max_backoff: std::time::Duration::from_millis(self.max_backoff_ms),
        }
    }
}
