//! One event type joins the runner to its observers (metrics writer, progress bar, watchdog,
//! reporters). No observer reaches into the runner.

use crate::model::metrics::StepMetrics;
use rlharness_arctic::wire::digest::SyncComparison;

#[derive(Debug, Clone)]
pub enum RunEvent {
    /// The driver is about to start step `step` of `total`.
    StepStarted { step: u64, total: u64 },
    /// One training step finished with these metrics.
    Step(StepMetrics),
    /// A request went through the proxy (route, status, duration in seconds).
    Request {
        route: String,
        status: u16,
        duration_s: f64,
    },
    /// Something worth telling the user that does not stop the run.
    Warning(String),
    /// The builtin driver's exact check of a weight sync (`/weight-digest`).
    WeightSync(WeightSyncCheck),
    /// The driver ran its `steps` steps and tore its jobs down: nothing more comes from it.
    /// (A driver that ends otherwise says so by its result.)
    Finished { steps: u64 },
}

/// What the exact check of a weight sync found.
#[derive(Debug, Clone, PartialEq)]
pub enum WeightSyncCheck {
    /// The manifests of both jobs after the weight sync of step `step`, compared.
    Checked {
        step: u64,
        comparison: Box<SyncComparison>,
    },
    /// The backend has no `/weight-digest` (a real Arctic server): no sync is checked. Sent
    /// once, at the first sync.
    Unavailable { reason: String },
}

pub(crate) type EventSender = tokio::sync::mpsc::UnboundedSender<RunEvent>;
pub(crate) type EventReceiver = tokio::sync::mpsc::UnboundedReceiver<RunEvent>;

pub fn channel() -> (EventSender, EventReceiver) {
    tokio::sync::mpsc::unbounded_channel()
}
