//! The job table: one job of each type, its JobConfig, the sampling engine's sleep/wake state
//! machine and a DeepSpeed engine's offload state; and the way handlers reach the engine.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::error::ApiError;
use super::Shared;
use crate::engine::{Engine, EngineError};
use crate::util::lock;
use crate::wire::api::{JobConfig, JobType};

/// The sampling engine's sleep state (see the API reference's state machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SamplingState {
    Ready,
    Sleeping,
    WeightsReady,
}

impl SamplingState {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            SamplingState::Ready => "READY",
            SamplingState::Sleeping => "SLEEPING",
            SamplingState::WeightsReady => "WEIGHTS_READY",
        }
    }
}

/// A wake-up request: which parts of the sampling engine come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WakeTags {
    pub(super) weights: bool,
    pub(super) kv_cache: bool,
}

/// Why the state machine refuses to wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum WakeRefused {
    #[error(
        "cannot wake kv_cache while the sampling engine is sleeping: wake [\"weights\"] first"
    )]
    KvCacheBeforeWeights,
    #[error("wake-inference needs at least one tag")]
    NoTag,
}

/// The state machine's wake transition: the new state and the status word the server answers,
/// or why the transition is refused.
pub(super) fn wake_transition(
    state: SamplingState,
    tags: WakeTags,
) -> Result<(SamplingState, &'static str), WakeRefused> {
    use SamplingState::*;
    match (state, tags.weights, tags.kv_cache) {
        (Ready, _, _) => Ok((Ready, "already_ready")),
        (Sleeping, true, true) | (WeightsReady, _, true) => Ok((Ready, "ready")),
        (Sleeping, true, false) => Ok((WeightsReady, "weights_ready")),
        (WeightsReady, true, false) => Ok((WeightsReady, "weights_ready")),
        (Sleeping, false, true) => Err(WakeRefused::KvCacheBeforeWeights),
        (_, false, false) => Err(WakeRefused::NoTag),
    }
}

#[derive(Debug, Clone)]
pub(super) struct Job {
    pub(super) job_type: JobType,
    pub(super) config: JobConfig,
    pub(super) sampling: SamplingState,
    /// What `/sleep-training` (or `/sleep-log-prob`) moved off the GPU: `None` while on it.
    pub(super) offloaded: Option<&'static str>,
    /// The sequence-parallel degree its JobConfig resolves to (`wire::sp`; 1 when unset).
    pub(super) sp_size: u64,
}

#[derive(Debug, Default)]
pub(super) struct JobTable {
    pub(super) next_id: u64,
    pub(super) jobs: BTreeMap<u64, Job>,
}

impl JobTable {
    pub(super) fn new() -> Self {
        Self {
            next_id: 1,
            jobs: BTreeMap::new(),
        }
    }
}

pub(super) fn engine_task<T, F>(s: &Arc<Shared>, f: F) -> impl Future<Output = Result<T, ApiError>>
where
    T: Send + 'static,
    F: FnOnce(&dyn Engine) -> Result<T, EngineError> + Send + 'static,
{
    let engine = s.engine.clone();
    async move {
        tokio::task::spawn_blocking(move || f(engine.as_ref()))
            .await
            .map_err(|e| ApiError::internal(format!("engine task failed: {e}")))?
            .map_err(ApiError::from)
    }
}

impl Shared {
    /// The job's type, checked against the types the route accepts.
    pub(super) fn job_checked(
        &self,
        id: u64,
        allowed: &[JobType],
        route: &str,
    ) -> Result<Job, ApiError> {
        let t = lock(&self.table);
        let job = t
            .jobs
            .get(&id)
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("job {id} not found")))?;
        if !allowed.contains(&job.job_type) {
            let want: Vec<&str> = allowed.iter().map(|t| t.as_str()).collect();
            return Err(ApiError::bad_request(format!(
                "{route} needs a {} job, but job {id} is a {} job",
                want.join(" or "),
                job.job_type.as_str()
            )));
        }
        Ok(job.clone())
    }

    pub(super) fn set_sampling_state(&self, id: u64, state: SamplingState) {
        if let Some(j) = lock(&self.table).jobs.get_mut(&id) {
            j.sampling = state;
        }
    }
}

pub(super) fn job_info(id: u64, job: &Job) -> Value {
    let sync_path = match (&job.job_type, &job.config.checkpoint_path) {
        (JobType::Training, Some(p)) => {
            Value::String(format!("{}/weight_sync", p.trim_end_matches('/')))
        }
        _ => Value::Null,
    };
    let mut info = json!({
        "job_id": id,
        "job_type": job.job_type.as_str(),
        "model_name": job.config.model_name,
        "status": "RUNNING",
        "checkpoint_path": job.config.checkpoint_path,
        "sync_path": sync_path,
        // 0.1.4 records it on every job; 5864380's clients ignore the extra key.
        "sp_size": job.sp_size,
    });
    if job.job_type == JobType::Sampling {
        info["sampling_state"] = json!(job.sampling.as_str());
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: WakeTags = WakeTags {
        weights: true,
        kv_cache: true,
    };
    const WEIGHTS: WakeTags = WakeTags {
        weights: true,
        kv_cache: false,
    };
    const KV: WakeTags = WakeTags {
        weights: false,
        kv_cache: true,
    };

    #[test]
    fn wake_follows_the_reference_state_machine() {
        use SamplingState::*;
        assert_eq!(
            wake_transition(Sleeping, WEIGHTS),
            Ok((WeightsReady, "weights_ready"))
        );
        assert_eq!(wake_transition(WeightsReady, KV), Ok((Ready, "ready")));
        assert_eq!(wake_transition(Sleeping, ALL), Ok((Ready, "ready")));
        assert_eq!(
            wake_transition(Ready, WEIGHTS),
            Ok((Ready, "already_ready"))
        );
        assert_eq!(
            wake_transition(Sleeping, KV),
            Err(WakeRefused::KvCacheBeforeWeights)
        );
        assert!(WakeRefused::KvCacheBeforeWeights
            .to_string()
            .contains("wake [\"weights\"] first"));
    }
}
