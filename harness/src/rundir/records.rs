//! What `run.json` keeps besides the run's facts: values dropped from the series, a replay's
//! account of its requests, processes a trainer left behind.

use serde::{Deserialize, Serialize};

use crate::metrics::json_f64;

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
/// backend writes it from its outcome; `compare` turns it into the replay rule).
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

/// A process an external trainer left running outside its process group, which the harness
/// stopped after it (found by the driver's sweep, `driver/strays.rs`).
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
