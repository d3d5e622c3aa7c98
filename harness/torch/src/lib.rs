//! The libtorch engine (feature `torch`; without it this crate is empty and its executable a
//! stub that says how to build the real one): a real model behind the Arctic API. Each job holds
//! its own copy of the weights, as on the real server: the training job (model + AdamW),
//! the sampling job (a separate copy, refreshed only by weight sync) and the log_prob job
//! (the reference copy). Every job starts from the same "pretrained" weights: the cached warm
//! start for the tiny arith model, or seeded random weights for the Qwen3 shapes.
//!
//! Threading: calls may arrive from several threads. Each job sits behind its own mutex;
//! torch's global generator (model init, CUDA sampling draws) behind one more. On the CPU a
//! sampling call draws from a stream of its own seed on the host and holds no lock while it
//! samples, so concurrent `/generate` calls use every core and a run is still bit-identical
//! for the same seed and thread count, whatever order the calls arrive in. Calls that write
//! weights (`step`, weight sync, checkpoint load) wait for running samplers on the weight
//! gate.
//!
//! The engine runs in its own process, the `rlharness-torch` executable (`src/main.rs`), so
//! that `rlharness` itself never loads libtorch (docs/architecture.md, "The torch backend's
//! process").
//!
//! The engine itself is in `engine/`; the model, its numerics and the training maths in the
//! modules below.
#![cfg(feature = "torch")]

pub mod batch;
pub mod convert;
pub mod cuda_graph;
pub mod grpo;
pub mod head;
pub mod layout;
pub mod loss;
pub mod model;
pub mod numerics;
pub mod optim;
pub mod sample;
pub mod settings;
pub mod warm_start;

mod torch_engine;

pub use torch_engine::{RuntimeInfo, TorchEngine};

/// The PyTorch version this build links (read from the libtorch install by `build.rs`).
pub const TORCH_VERSION: &str = env!("RLHARNESS_TORCH_VERSION");
