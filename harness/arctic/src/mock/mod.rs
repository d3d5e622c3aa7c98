//! The scripted mock engine: deterministic per seed, sensitive to the pipeline (the sampler's
//! accuracy follows the number of weight syncs that brought it new weights; log-probs follow
//! the policy version), and simulating time with a cost model instead of sleeping.
//!
//! By part: `script.rs` the script, `state.rs` the engine's state, `loss.rs` the loss of a
//! batch, `answers.rs` the Arctic routes, `serve.rs` the standalone server, `weights.rs` the simulated weights `/weight-digest` reports; the models it uses
//! in `cost.rs`, `grpo.rs`, `policy.rs`, `schedule.rs`, and injected faults in `faults.rs`.

mod answers;
pub(crate) mod cost;
pub mod faults;
pub mod grpo;
mod loss;
pub mod policy;
pub(crate) mod schedule;
mod script;
mod serve;
mod state;
#[cfg(test)]
mod tests;
mod weights;

pub use script::{EfficiencyCurve, MockScript, MockScriptError, ResponseShape, RewardCurve};
pub use serve::serve_mock_standalone;
pub use state::MockEngine;
