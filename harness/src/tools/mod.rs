//! The commands' tools over runs: knob propagation, verl's assets, a scenario's history,
//! and bisecting a regression. See the Layers table of `docs/architecture.md`.

pub mod assets;
pub(crate) mod bisect;
pub mod history;
pub mod propagate;
