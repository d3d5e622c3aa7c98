//! The knob propagation checker: manifests, wire diffs, verdicts, the matrix.
//!
//! `rlharness propagate SCENARIO` runs the scenario once as a baseline (per condition
//! assignment) and once per knob, value and condition, then compares each perturbed run's
//! recorded wire with its baseline's. The knob manifest (`manifest`) says where each knob
//! should land; `wire` reads a run directory into comparable locations; `verdict` classifies;
//! `group` packs knobs whose locations cannot overlap into shared runs; `resolved` reads the
//! trainer's printed config for knobs the manifest does not list; `environ` follows the environment variables the scenario and its launcher set;
//! `render` writes the matrix.

pub mod accounted;
pub mod command;
pub mod environ;
mod error;
pub(crate) mod group;
pub(crate) mod knob_manifest;
pub(crate) mod observed;
pub mod render;
pub mod resolved;
pub mod verdict;

pub use error::PropagateError;
pub use knob_manifest::ProblemKind;
