//! The data model every floor above reads and writes, lowest first: the kernels (exit codes
//! and errors, the run's slot, helpers, the host's hardware), the data (metric series,
//! run events), the rules of a `checks` block, and the stores (goldens, a run directory's
//! files). See the Layers table of `docs/architecture.md`.

pub(crate) mod checks;
pub mod error;
pub mod events;
pub mod golden;
pub(crate) mod host;
pub mod metrics;
pub mod rundir;
pub(crate) mod slot;
pub(crate) mod util;
