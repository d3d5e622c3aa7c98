//! What `run.json` keeps besides the run's facts: values dropped from the series, a replay's
//! account of its requests, the exact check of each weight sync, processes a trainer left
//! behind.

use serde::{Deserialize, Serialize};

use crate::model::events::WeightSyncCheck;
use crate::model::metrics::json_f64;
use rlharness_arctic::wire::digest::TensorDifference;

/// A value the runner kept out of the series because it cannot be true (an MFU outside
/// (0, 1]); stored in `run.json` so the sanity rule can be judged again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedValue {
    pub(crate) step: u64,
    pub(crate) metric: String,
    #[serde(with = "json_f64")]
    pub(crate) value: Option<f64>,
}

impl DroppedValue {
    pub(crate) fn new(step: u64, metric: impl Into<String>, value: f64) -> DroppedValue {
        DroppedValue {
            step,
            metric: metric.into(),
            value: Some(value),
        }
    }

    /// The value, NaN where `run.json` holds none.
    pub(crate) fn value(&self) -> f64 {
        self.value.unwrap_or(f64::NAN)
    }
}

/// A replay backend's account of the requests it was sent, as `run.json` keeps it (the replay
/// backend writes it from its outcome; the judge (`judge`) turns it into the replay rule).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReplayRecord {
    /// The cassette folder, as the scenario resolved it.
    pub(crate) cassette: String,
    /// Exchanges in the cassette.
    pub(crate) recorded: usize,
    /// Requests served.
    pub(crate) served: usize,
    /// Every mismatch, first first, as the report words it.
    #[serde(default)]
    pub(crate) mismatches: Vec<String>,
}

impl ReplayRecord {
    pub(crate) fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }

    /// The first mismatch, and how many there were.
    pub(crate) fn summary(&self) -> String {
        match self.mismatches.as_slice() {
            [] => format!(
                "all {} recorded exchanges requested as recorded ({})",
                self.recorded, self.cassette
            ),
            [only] => only.clone(),
            [first, ..] => format!("{first}; {} mismatches in all", self.mismatches.len()),
        }
    }
}

/// The builtin driver's exact check of the weight syncs (`/weight-digest`), as `run.json` keeps
/// it: how many syncs were compared, and each one after which the sampler's weights were not
/// the trainer's, with the first tensor that differs (the rule `weight_sync:match` names it);
/// or why nothing was compared.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightSyncRecord {
    /// Syncs compared.
    pub(crate) checked: u64,
    /// Why no sync was compared (a backend without `/weight-digest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unavailable: Option<String>,
    /// Every sync whose manifests differed, in step order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) mismatches: Vec<SyncMismatch>,
}

/// One sync after which the sampler's weights differed from the trainer's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncMismatch {
    /// The step whose update the sync followed.
    pub(crate) step: u64,
    /// Tensors named on either side, and how many of them differ.
    pub(crate) tensors: usize,
    pub(crate) differing: usize,
    /// The first that differs (in the trainer's order).
    pub(crate) first: Option<TensorDifference>,
}

impl WeightSyncRecord {
    /// Add what the driver found of one sync.
    pub(crate) fn add(&mut self, check: WeightSyncCheck) {
        match check {
            WeightSyncCheck::Checked { step, comparison } => {
                let comparison = *comparison;
                self.checked += 1;
                if !comparison.matched() {
                    self.mismatches.push(SyncMismatch {
                        step,
                        tensors: comparison.tensors,
                        differing: comparison.differing,
                        first: comparison.first,
                    });
                }
            }
            WeightSyncCheck::Unavailable { reason } => {
                self.unavailable.get_or_insert(reason);
            }
        }
    }

    /// The mismatch recorded at `step`.
    pub(crate) fn at(&self, step: u64) -> Option<&SyncMismatch> {
        self.mismatches.iter().find(|m| m.step == step)
    }
}

/// A process an external trainer left running outside its process group, which the harness
/// stopped after it (found by the driver's sweep, `run/driver/strays.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stray {
    pub pid: i32,
    /// Its command line, arguments joined by spaces (at most 160 characters).
    pub cmdline: String,
}

/// How the run itself ended, as opposed to what its metrics say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every planned step ran.
    Completed,
    /// Stopped early on purpose: a fail-fast rule could no longer pass, or the watchdog saw a
    /// non-finite watched metric.
    Aborted,
    /// The driver or the backend crashed.
    Failed,
    /// A time-out or a hang.
    TimedOut,
    /// The user stopped it (Ctrl-C).
    Interrupted,
    /// Requirements not met here; nothing ran.
    Skipped,
}

impl RunStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Aborted => "aborted",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Skipped => "skipped",
        }
    }
}
