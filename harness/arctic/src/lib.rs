//! rlharness-arctic: what an Arctic-compatible server and its clients share. The harness
//! (`rlharness`) and the libtorch engine (`rlharness-torch`) both build on it; it knows nothing
//! of scenarios, judging, reports or commands. See docs/architecture.md, "The Arctic crate".
//!
//! - [`wire`]: the DSSST1 frame codec, the Arctic API types, Python-style JSON floats, a
//!   backend's `Runtime`.
//! - [`engine`]: the `Engine` trait and the types it takes and returns.
//! - [`processing`]: the loss and post-processor names a training frame may carry (both
//!   Arctic-Platform releases'), and `meta.return_fwd_batch`.
//! - [`server`]: the HTTP surface every engine is served by (routes, job table, sampling state
//!   machine, the real server's error rules).
//! - [`mock`]: the scripted and simulated engine, and its fault injection.
//! - [`torch_spec`]: the torch backend's block (model, device, layout, warm start).
//! - [`child`]: the hand-shake of a backend that runs as a child process (`Ready`).
//! - [`cassette`]: the recorded wire traffic a replay serves back.
//! - [`task`]: the arithmetic task, its tokenizer and scorers.
//! - [`flops`], [`grpo`]: verl's FLOP model; GRPO's group advantages.
//! - [`exit`], [`fsx`], [`logging`], [`util`]: exit codes, file helpers with typed errors, the
//!   log subscriber, a poison-tolerant lock and hex.

pub mod cassette;
pub mod child;
pub mod engine;
pub mod exit;
pub mod flops;
pub mod fsx;
pub mod grpo;
pub mod logging;
pub mod mock;
pub mod processing;
pub mod server;
pub mod task;
pub mod torch_spec;
pub mod util;
pub mod wire;
