//! Running one scenario, lowest first: the stages (backends, the recording proxy, drivers,
//! trainer-log capture, the knob table), the plan that computes their work once, and the
//! runner that executes it. See the Layers table of `docs/architecture.md`.

pub mod backend;
pub mod capture;
pub mod driver;
pub(crate) mod knobs;
pub(crate) mod netns;
pub mod plan;
pub mod proxy;
pub mod runner;
