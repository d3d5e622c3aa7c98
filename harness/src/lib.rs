//! rlharness: reproducible smoke and convergence scenarios for LLM RL training integrations.
//!
//! Data flows one way: `spec` (scenario files) -> `plan` (RunPlan with provenance) -> `run`
//! (driver -> proxy -> backend) -> `metrics` -> `compare` (golden rules, expressions) -> `report`.
//! See `docs/architecture.md`.

pub mod app;
pub mod backend;
pub mod capture;
pub mod checks;
pub mod cli;
pub mod compare;
pub mod driver;
pub mod error;
pub mod events;
pub mod fsx;
pub mod golden;
pub mod metrics;
pub mod plan;
pub mod propagate;
pub mod proxy;
pub mod report;
pub mod runner;
pub mod slot;
pub mod spec;
pub mod task;
pub mod util;
pub mod wire;
