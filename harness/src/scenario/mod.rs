//! Scenario files: strict parsing with file:line:col errors, the verl-style config layering
//! (defaults, includes, `--set`, `${}` interpolation) and provenance of every value.
//!
//! Typed passes (style habit 2): YAML becomes a spanned tree (`yaml`), top-level `--set`
//! overrides edit that tree, the `config` block is layered into a [`ConfigTree`] (`config`),
//! and every other block is deserialized into its module's own serde type (`de`). Errors
//! are collected across blocks, so one `check` shows every problem of a file.
//!
//! `load` reads one scenario file into a [`Scenario`], `discover` finds scenario files,
//! `requires` and `timeouts` are two of its blocks, and `blocks` holds the stages' blocks
//! (`driver`, `backend`), which the stages read from here.

pub mod blocks;
pub mod check;
pub(crate) mod config;
pub(crate) mod de;
mod discover;
pub(crate) mod error;
mod gpus;
pub mod lint;
mod load;
pub(crate) mod located;
mod requires;
pub(crate) mod shape_lint;
mod timeouts;
pub(crate) mod yaml;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use blocks::{BackendSpec, DriverSpec};
pub use check::Problems;
pub(crate) use config::{builtin_text, ConfigTree};
pub use discover::discover;
pub use error::{SpecError, SpecErrors};
pub(crate) use gpus::detect_gpus;
pub use load::load_scenario;
pub use requires::{command_available, Requires};
pub(crate) use timeouts::{Timeouts, DEFAULT_QUEUE_TIMEOUT};
pub use yaml::{Origin, Pos, SpannedNode, SpannedValue};

/// A scenario, validated, with its config resolved.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub path: PathBuf,
    /// Where the scenario's mapping starts (its first key): an error about a config key the
    /// file does not write (the plan's, `plan::PlanError`) points here.
    pub(crate) pos: Pos,
    pub name: String,
    pub(crate) description: String,
    pub(crate) tags: Vec<String>,
    pub requires: Requires,
    pub seed: u64,
    pub steps: u64,
    pub driver: DriverSpec,
    pub backend: BackendSpec,
    pub(crate) metrics: crate::model::metrics::MetricsSpec,
    pub checks: crate::model::checks::ChecksSpec,
    pub(crate) timeouts: Timeouts,
    pub expected_verdict: Option<crate::model::checks::ExpectedVerdict>,
    /// A self-test of the harness: a planted change judged against a reference run of the
    /// same scenario on this host.
    pub(crate) selftest: Option<SelfTest>,
    /// What `rlharness propagate` leaves out for this scenario.
    pub(crate) propagate: PropagateSpec,
    /// The resolved verl-style tree, every leaf with its origin.
    pub config: ConfigTree,
    /// Origins of every value outside `config`, by dotted path (`seed`, `backend.url`, ...).
    /// Absent keys took the built-in default of their type.
    pub origins: BTreeMap<String, Origin>,
    /// Every file the scenario was built from: the scenario, the defaults file, then includes.
    pub sources: Vec<PathBuf>,
    /// The `--set` arguments applied, in order.
    pub(crate) overrides: Vec<String>,
}

/// `selftest: {plant: [key=value, ...]}`: the harness is the thing under test. The scenario
/// runs twice on this host: as written (the reference), then with `plant` applied as `--set`
/// overrides; the planted run is judged against the reference run as its golden (so a
/// deterministic backend is held bit for bit, whatever CPU model runs it), and the verdict must
/// be the scenario's `expected_verdict`.
///
/// With `seeds: "A..B"` the self-test is a multi-seed one instead: the planted scenario runs
/// once per seed and the combined verdict (`judge::seeds`) judges the seeds' distribution
/// against the golden's calibration, a distribution and not one host's bits, so it needs no
/// reference run. That is how a shift smaller than one run's band is caught on any host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SelfTest {
    /// The planted change, as `--set` overrides.
    pub(crate) plant: Vec<String>,
    /// `A..B`: a multi-seed self-test over these seeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) seeds: Option<String>,
    /// A multi-seed self-test's seeds run as this scenario (by name), so they are judged
    /// against its golden and calibration; the self-test's checks must be that scenario's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) golden: Option<String>,
}

/// `propagate: {skip: {knob: reason}}`: knobs of the manifest this scenario cannot perturb (a
/// hub model id on a host without network, tensor parallelism on one device). `propagate`
/// reports each as not exercised with its reason (counted as unobserved, skipped in JUnit),
/// and refuses a name that is not a knob of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PropagateSpec {
    #[serde(default)]
    pub(crate) skip: BTreeMap<String, String>,
}

impl Scenario {
    /// A self-test's planted change, as the `--set` overrides its planted run is loaded with
    /// (empty for any other scenario).
    pub fn selftest_plant(&self) -> &[String] {
        self.selftest.as_ref().map_or(&[], |st| st.plant.as_slice())
    }
}

impl SelfTest {
    /// The seeds of a multi-seed self-test (validated when the scenario loads).
    pub(crate) fn seed_list(&self) -> Option<Vec<u64>> {
        self.seeds
            .as_deref()
            .and_then(|s| crate::model::checks::parse_seed_range(s).ok())
    }
}

#[cfg(test)]
mod tests;
