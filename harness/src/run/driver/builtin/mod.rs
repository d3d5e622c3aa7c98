//! The builtin GRPO driver: an Arctic API client that trains the way verl does through the
//! Arctic adapter. After the jobs are created, (colocated) the sampler sleeps and the four-call
//! weight sync wakes it before the first rollout. Each step: generate `n` samples per prompt
//! (one request each), score, (colocated) sleep, old log-probs by `/forward`, reference
//! log-probs with KL, GRPO advantages, per epoch and mini-batch one `/forward-backward` and one
//! `/step`, then the four-call weight sync (wake weights, weight-sync, wake kv_cache, reset).
//!
//! After each step's sync, the exact check of it (`/weight-digest`, where the backend has it).
//!
//! `step` is one training step and its metrics, `generate` the rollout's `/generate` requests,
//! `batch` the padded batch and its `/forward` frames, `digest` the check of each sync;
//! `translation` what the driver sends, which the plan translates from the config once.

mod batch;
pub(crate) mod digest;
mod generate;
mod step;
mod translation;

pub(crate) use translation::{BatchShape, Translation};

use std::time::Instant;

use serde_json::Value;

use super::client::{ArcticClient, ClientError, Reply};
use super::BuiltinDriverSpec;
use crate::model::events::{EventSender, RunEvent};
use crate::model::metrics::ModelShape;
use rlharness_arctic::task::ArithTask;
use rlharness_arctic::wire::api::JobType;
use rlharness_arctic::wire::WireError;
use step::{one_step, weight_sync_calls};

#[derive(Debug, thiserror::Error)]
pub(crate) enum DriverError {
    #[error("step {step}: {source}")]
    Backend {
        step: u64,
        #[source]
        source: ClientError,
    },
    #[error("start-up: {0}")]
    Startup(#[source] ClientError),
    #[error("step {step}: {message}")]
    Protocol { step: u64, message: String },
    /// A reply the training cannot go on with (a NaN, a wrong shape): the route is known.
    #[error("step {step}: {route}: bad reply: {message}")]
    BadReply {
        step: u64,
        route: String,
        message: String,
    },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Task(#[from] rlharness_arctic::task::TaskError),
    /// An external trainer (the command driver) failed; `step` is the step it was on.
    #[error("step {step}: {message}")]
    Trainer { step: u64, message: String },
}

impl DriverError {
    pub(crate) fn step(&self) -> Option<u64> {
        match self {
            DriverError::Backend { step, .. }
            | DriverError::Protocol { step, .. }
            | DriverError::Trainer { step, .. }
            | DriverError::BadReply { step, .. } => Some(*step),
            _ => None,
        }
    }
    pub(crate) fn route(&self) -> Option<&str> {
        match self {
            DriverError::Backend { source, .. } | DriverError::Startup(source) => {
                Some(source.route())
            }
            DriverError::BadReply { route, .. } => Some(route),
            _ => None,
        }
    }
}

/// What a driver run needs besides the translated config.
#[derive(Debug, Clone)]
pub(crate) struct DriverRun {
    pub(crate) seed: u64,
    pub(crate) steps: u64,
    pub(crate) spec: BuiltinDriverSpec,
    pub(crate) translation: Translation,
    /// For `perf/mfu/actor`: the declared model and the device's promised peak.
    pub(crate) model: Option<ModelShape>,
    pub(crate) peak_flops: Option<f64>,
}

struct Jobs {
    sampling: u64,
    log_prob: Option<u64>,
    training: u64,
}

/// One rollout: prompt and response token ids and its score.
struct Sample {
    prompt: Vec<i64>,
    response: Vec<i64>,
    score: f64,
    truncated: bool,
    /// The sampler's log-probability of each response token, when it sent them.
    sampler_logprobs: Option<Vec<f32>>,
}

/// Time of a phase. A backend that reports durations (the mock's simulated clock) is taken at
/// its word: the phase is the sum of the reported durations. Otherwise the wall time of the
/// phase is used, as verl measures it.
struct Phase {
    started: Instant,
    reported: f64,
    all_reported: bool,
    calls: usize,
}

impl Phase {
    fn start() -> Self {
        Self {
            started: Instant::now(),
            reported: 0.0,
            all_reported: true,
            calls: 0,
        }
    }
    fn add<T>(&mut self, r: &Reply<T>) {
        self.calls += 1;
        self.reported += r.seconds;
        self.all_reported &= r.reported;
    }
    fn seconds(&self) -> f64 {
        if self.calls > 0 && self.all_reported {
            self.reported
        } else {
            self.started.elapsed().as_secs_f64()
        }
    }
}

pub(crate) async fn run(
    client: &ArcticClient,
    run: &DriverRun,
    events: &EventSender,
) -> Result<(), DriverError> {
    let mut run = run.clone();
    apply_plants(&mut run);
    let run = &run;
    let t = &run.translation;
    let task = match &run.spec.task {
        super::TaskSpec::Arith(cfg) => ArithTask::new(cfg.clone())?,
    };
    client.health().await.map_err(DriverError::Startup)?;
    let jobs = create_jobs(client, t).await?;
    if t.colocate {
        // verl's hybrid engine puts the rollout to sleep once it is built, and syncs the
        // weights (which wakes it) before the first rollout.
        client
            .sleep(jobs.sampling, 1)
            .await
            .map_err(DriverError::Startup)?;
        weight_sync_calls(client, run, &jobs, 1)
            .await
            .map_err(|e| match e {
                StepError::Client(source) => DriverError::Startup(source),
                other => DriverError::Protocol {
                    step: 0,
                    message: other.message(),
                },
            })?;
    }
    let mut sync_check = digest::SyncCheck::default();
    for step in 1..=run.steps {
        let _ = events.send(RunEvent::StepStarted {
            step,
            total: run.steps,
        });
        let stepped = async {
            let mut m = one_step(client, run, &task, &jobs, step).await?;
            sync_check
                .after_sync(client, &jobs, step, &mut m, events)
                .await?;
            Ok::<_, StepError>(m)
        };
        let metrics = stepped.await.map_err(|e| match e {
            StepError::Client(source) => DriverError::Backend { step, source },
            StepError::Protocol(message) => DriverError::Protocol { step, message },
            StepError::BadReply { route, message } => DriverError::BadReply {
                step,
                route,
                message,
            },
        })?;
        let _ = events.send(RunEvent::Step(metrics));
    }
    // Tear down in reverse creation order, as the adapter does at shutdown.
    let step = run.steps;
    let teardown = [
        Some((jobs.training, JobType::Training)),
        jobs.log_prob.map(|j| (j, JobType::LogProb)),
        Some((jobs.sampling, JobType::Sampling)),
    ];
    for (job, kind) in teardown.into_iter().flatten() {
        client
            .destroy(job, kind.as_str())
            .await
            .map_err(|source| DriverError::Backend { step, source })?;
    }
    let _ = events.send(RunEvent::Finished { steps: run.steps });
    Ok(())
}

/// Rewrite the translation the way a buggy adapter would (see `Plant`).
fn apply_plants(run: &mut DriverRun) {
    for p in run.spec.plant.clone() {
        match p {
            super::Plant::SkipWeightSync
            | super::Plant::SkipWeightSyncFrom(_)
            | super::Plant::RewardOffset(_) => {}
            super::Plant::LogitsInMetaOnly => {
                for job in &mut run.translation.jobs {
                    if let Some(Value::Object(dwc)) = job.ds_worker_config.as_mut() {
                        dwc.retain(|k, _| !k.starts_with("logits_"));
                    }
                }
            }
            super::Plant::DropMetaKey(key) => {
                run.translation.meta.remove(&key);
                run.translation.update_meta.remove(&key);
                run.translation.dropped_meta.push(key);
            }
        }
    }
}

async fn create_jobs(client: &ArcticClient, t: &Translation) -> Result<Jobs, DriverError> {
    let (mut sampling, mut log_prob, mut training) = (None, None, None);
    for job in &t.jobs {
        let id = client.initialize(job).await.map_err(DriverError::Startup)?;
        match job.job_type {
            JobType::Sampling => sampling = Some(id),
            JobType::LogProb => log_prob = Some(id),
            JobType::Training => training = Some(id),
        }
    }
    // The adapter's client polls each job's record once all are created, in its own order
    // (`JOB_TYPES`: training, sampling, log_prob), until it says RUNNING.
    for id in [training, sampling, log_prob].into_iter().flatten() {
        client.job(id).await.map_err(DriverError::Startup)?;
    }
    match (sampling, training) {
        (Some(sampling), Some(training)) => Ok(Jobs {
            sampling,
            log_prob,
            training,
        }),
        _ => Err(DriverError::Config(
            "the translation must create a sampling and a training job".into(),
        )),
    }
}

enum StepError {
    Client(ClientError),
    Protocol(String),
    BadReply { route: String, message: String },
}

impl StepError {
    fn message(&self) -> String {
        match self {
            StepError::Client(e) => e.to_string(),
            StepError::Protocol(m) => m.clone(),
            StepError::BadReply { route, message } => format!("{route}: {message}"),
        }
    }
}

fn bad_reply(route: &str, message: impl Into<String>) -> StepError {
    StepError::BadReply {
        route: route.to_string(),
        message: message.into(),
    }
}

impl From<ClientError> for StepError {
    fn from(e: ClientError) -> Self {
        StepError::Client(e)
    }
}

fn wire_err(e: WireError) -> StepError {
    StepError::Protocol(format!("cannot build a request frame: {e}"))
}

fn protocol(msg: impl Into<String>) -> StepError {
    StepError::Protocol(msg.into())
}

#[cfg(test)]
mod tests;
