//! The exact check of each weight sync: right after a step's sync (or where it would be, when a
//! planted bug skips it) the driver asks the backend for both jobs' weight digests
//! (`/weight-digest`, an rlharness extension: `wire::digest`) and logs `weight_sync/match`, 1
//! when the sampler holds the trainer's weights bit for bit and 0 otherwise. What differs (the
//! first tensor, with its dtype, shape and SHA-256 on both sides) goes to the run log and, as a
//! `RunEvent::WeightSync`, into `run.json`, where the rule `weight_sync:match` reads it.
//!
//! A backend without the route (a real Arctic server) answers `404 Not Found`: the driver says
//! so once, logs no metric, and asks no more. Any other failure of the route fails the step, as
//! any other call's would.

use super::{bad_reply, Jobs, StepError};
use crate::model::events::{EventSender, RunEvent, WeightSyncCheck};
use crate::model::metrics::StepMetrics;
use crate::run::driver::client::{ArcticClient, ClientError};
use rlharness_arctic::wire::digest::{WeightDigest, WEIGHT_DIGEST_ROUTE};

/// The metric: 1 when the sync left the sampler with the trainer's weights bit for bit.
pub(crate) const MATCH_METRIC: &str = "weight_sync/match";

/// The check across a run's steps: off for good once the backend said it has no digests.
#[derive(Debug, Default)]
pub(super) struct SyncCheck {
    unavailable: bool,
}

/// A server without the route: the real server's (FastAPI's) and the harness's own 404 for an
/// unknown path, `{"detail": "Not Found"}`. A 404 that names a job is a lost job, not this.
fn route_absent(e: &ClientError) -> bool {
    matches!(e, ClientError::Status { status: 404, detail, .. } if detail == "Not Found")
}

impl SyncCheck {
    /// Check the sync that followed `step`'s update: `weight_sync/match` into `m`, what was
    /// found to the run's events.
    pub(super) async fn after_sync(
        &mut self,
        client: &ArcticClient,
        jobs: &Jobs,
        step: u64,
        m: &mut StepMetrics,
        events: &EventSender,
    ) -> Result<(), StepError> {
        if self.unavailable {
            return Ok(());
        }
        let reply = match client.weight_digest(jobs.training, jobs.sampling).await {
            Ok(r) => r,
            Err(e) if route_absent(&e) => {
                self.unavailable = true;
                let reason = format!(
                    "weight syncs not checked bit for bit: the backend has no {WEIGHT_DIGEST_ROUTE} \
                     (an rlharness extension a real Arctic server lacks), so no `{MATCH_METRIC}` \
                     is logged; the sampler-vs-trainer mismatch metrics still are"
                );
                tracing::warn!("{reason}");
                let _ = events.send(RunEvent::WeightSync(WeightSyncCheck::Unavailable {
                    reason,
                }));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let digest: WeightDigest = serde_json::from_value(reply.body)
            .map_err(|e| bad_reply(WEIGHT_DIGEST_ROUTE, format!("not a digest manifest: {e}")))?;
        if digest.training.is_empty() {
            return Err(bad_reply(
                WEIGHT_DIGEST_ROUTE,
                "the training job's manifest lists no tensor",
            ));
        }
        let comparison = digest.compare();
        m.insert(MATCH_METRIC, if comparison.matched() { 1.0 } else { 0.0 });
        if let Some(first) = &comparison.first {
            tracing::warn!(
                "step {step}: after the weight sync the sampler does not hold the trainer's \
                 weights: {} of {} tensors differ, the first {}",
                comparison.differing,
                comparison.tensors,
                first.describe()
            );
        }
        let _ = events.send(RunEvent::WeightSync(WeightSyncCheck::Checked {
            step,
            comparison: Box::new(comparison),
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_404_without_a_job_means_the_route_is_absent() {
        let status = |status, detail: &str| ClientError::Status {
            route: WEIGHT_DIGEST_ROUTE.into(),
            status,
            detail: detail.into(),
        };
        assert!(route_absent(&status(404, "Not Found")));
        assert!(!route_absent(&status(404, "job 2 not found")));
        assert!(!route_absent(&status(422, "Not Found")));
        assert!(!route_absent(&ClientError::Transport {
            route: WEIGHT_DIGEST_ROUTE.into(),
            message: "connection refused".into(),
        }));
    }
}
