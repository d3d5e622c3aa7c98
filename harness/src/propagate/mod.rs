//! The knob propagation checker: manifests, wire diffs, verdicts, the matrix.
//!
//! `rlharness propagate SCENARIO` runs the scenario once as a baseline (per condition
//! assignment) and once per knob, value and condition, then compares each perturbed run's
//! recorded wire with its baseline's. The knob manifest (`manifest`) says where each knob
//! should land; `wire` reads a run directory into comparable locations; `verdict` classifies;
//! `render` writes the matrix.

pub mod command;
pub(crate) mod manifest;
pub mod render;
pub mod verdict;
pub(crate) mod wire;
