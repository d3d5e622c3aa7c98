//! The builtin GRPO driver: an Arctic API client that trains the way verl does through the
//! Arctic adapter. After the jobs are created, (colocated) the sampler sleeps and the four-call
//! weight sync wakes it before the first rollout. Each step: generate `n` samples per prompt
//! (one request each), score, (colocated) sleep, old log-probs by `/forward`, reference
//! log-probs with KL, GRPO advantages, per epoch and mini-batch one `/forward-backward` and one
//! `/step`, then the four-call weight sync (wake weights, weight-sync, wake kv_cache, reset).

use std::collections::HashMap;
use std::time::Instant;

use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::client::{ArcticClient, ClientError, Reply};
use super::translate::{BatchShape, Translation};
use super::BuiltinDriverSpec;
use crate::events::{EventSender, RunEvent};
use crate::metrics::{ModelShape, StepMetrics};
use crate::task::{ArithTask, CharTokenizer, Problem, PAD_ID};
use crate::wire::api::JobType;
use crate::wire::{pyjson, Node, Tensor};
use rlharness_arctic::grpo::group_advantages;

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
    Task(#[from] crate::task::TaskError),
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
    for step in 1..=run.steps {
        let _ = events.send(RunEvent::StepStarted {
            step,
            total: run.steps,
        });
        let metrics = one_step(client, run, &task, &jobs, step)
            .await
            .map_err(|e| match e {
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
            super::Plant::SkipWeightSync | super::Plant::SkipWeightSyncFrom(_) => {}
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

fn wire_err(e: crate::wire::WireError) -> StepError {
    StepError::Protocol(format!("cannot build a request frame: {e}"))
}

fn protocol(msg: impl Into<String>) -> StepError {
    StepError::Protocol(msg.into())
}

/// One training step, in verl's order: (1-3) rollout, (4-5) old and reference log-probs, (6)
/// GRPO advantages, (7) the update, (8) the weight sync; then the step's metrics in verl's
/// names.
async fn one_step(
    client: &ArcticClient,
    run: &DriverRun,
    task: &ArithTask,
    jobs: &Jobs,
    step: u64,
) -> Result<StepMetrics, StepError> {
    let t = &run.translation;
    let step_started = Instant::now();
    let mut m = StepMetrics::new(step);
    let (samples, gen) = rollout(client, run, task, jobs, step).await?;
    m.insert("timing_s/gen", gen.seconds());
    let batch = PaddedBatch::build(&samples, &t.shape);
    let (old_logp, old) = old_log_probs(client, run, jobs, &batch, &mut m).await?;
    let sampler: Vec<Option<&[f32]>> = samples
        .iter()
        .map(|s| s.sampler_logprobs.as_deref())
        .collect();
    if let Some(x) = super::mismatch::mismatch(&sampler, &old_logp) {
        m.insert(super::mismatch::PROBS_DIFF_MEAN, x.probs_diff_mean);
        m.insert(super::mismatch::PROBS_DIFF_MAX, x.probs_diff_max);
        m.insert(super::mismatch::K3_KL, x.k3_kl);
    }
    let ref_logp = ref_log_probs(client, run, jobs, &batch, &mut m).await?;

    // 6: GRPO advantages.
    let scores: Vec<f64> = samples.iter().map(|s| s.score).collect();
    let adv = group_advantages(&scores, t.shape.n, t.norm_adv_by_std);
    let update = UpdateTensors {
        old_logp,
        ref_logp,
        advantages: adv.clone(),
    };
    let (upd, update_s) =
        update_actor(client, run, jobs, &batch, &update, samples.len(), &mut m).await?;
    let sync = weight_sync_calls(client, run, jobs, step + 1).await?;
    m.insert("timing_s/update_weights", sync.seconds());

    // Metrics in verl's names.
    let all_reported =
        gen.all_reported && old.all_reported && upd.all_reported && sync.all_reported;
    let step_s = if all_reported {
        m.values
            .iter()
            .filter(|(k, _)| k.starts_with("timing_s/"))
            .map(|(_, v)| v)
            .sum()
    } else {
        step_started.elapsed().as_secs_f64()
    };
    m.insert("timing_s/step", step_s);
    batch_metrics(
        &mut m, run, &samples, &batch, &scores, &adv, step_s, update_s,
    );
    m.insert("training/global_step", step as f64);
    m.insert("training/epoch", 0.0);
    Ok(m)
}

/// 1-3: generate `n` per prompt (one prompt and one sample a request), score, and (colocated)
/// put the sampler to sleep.
async fn rollout(
    client: &ArcticClient,
    run: &DriverRun,
    task: &ArithTask,
    jobs: &Jobs,
    step: u64,
) -> Result<(Vec<Sample>, Phase), StepError> {
    let t = &run.translation;
    let shape = t.shape;
    let mut gen = Phase::start();
    let problems = task.batch(run.seed, step, shape.prompts);
    let groups = generate_all(
        client,
        jobs.sampling,
        &problems,
        shape.n,
        &t.sampling_params,
    )
    .await?;
    let mut samples = Vec::with_capacity(shape.prompts * shape.n);
    for (problem, group) in problems.iter().zip(groups) {
        let prompt = CharTokenizer::encode(&problem.prompt).map_err(|e| protocol(e.to_string()))?;
        if prompt.len() > shape.max_prompt_len {
            return Err(protocol(format!(
                "prompt of {} tokens exceeds data.max_prompt_length = {}",
                prompt.len(),
                shape.max_prompt_len
            )));
        }
        for reply in group {
            gen.add(&reply);
            let r = reply.body;
            let mut response = r.token_ids;
            let truncated = response.len() >= shape.max_response_len;
            response.truncate(shape.max_response_len);
            let score = run.spec.scorer.score(&r.text, &problem.ground_truth());
            samples.push(Sample {
                prompt: prompt.clone(),
                response,
                score,
                truncated,
                sampler_logprobs: r.logprobs,
            });
        }
    }
    if t.colocate {
        let r = client.sleep(jobs.sampling, 1).await?;
        gen.add(&r);
    }
    Ok((samples, gen))
}

/// 4: old log-probs (forward-only: `loss_fn` must be an explicit null), and the entropy.
async fn old_log_probs(
    client: &ArcticClient,
    run: &DriverRun,
    jobs: &Jobs,
    batch: &PaddedBatch,
    m: &mut StepMetrics,
) -> Result<(Vec<Vec<f32>>, Phase), StepError> {
    let t = &run.translation;
    let mut old = Phase::start();
    let fwd = client
        .forward(
            jobs.training,
            &batch.frame(&t.meta, None, ForwardKind::OldLogProb, t)?,
        )
        .await?;
    old.add(&fwd);
    let (old_logp, entropy) = batch.response_logprobs(&fwd.body, t.zorro)?;
    m.insert("timing_s/old_log_prob", old.seconds());
    if let Some(e) = entropy {
        m.insert("actor/entropy", batch.masked_mean(&e));
    }
    Ok((old_logp, old))
}

/// 5: reference log-probs when KL is on.
async fn ref_log_probs(
    client: &ArcticClient,
    run: &DriverRun,
    jobs: &Jobs,
    batch: &PaddedBatch,
    m: &mut StepMetrics,
) -> Result<Option<Vec<Vec<f32>>>, StepError> {
    let t = &run.translation;
    if !t.use_kl_loss {
        return Ok(None);
    }
    let job = jobs.log_prob.ok_or_else(|| {
        protocol("actor.use_kl_loss needs a reference engine, but remote_backend.log_prob_gpus = 0")
    })?;
    let mut phase = Phase::start();
    let r = client
        .forward(
            job,
            &batch.frame(&t.meta, None, ForwardKind::OldLogProb, t)?,
        )
        .await?;
    phase.add(&r);
    m.insert("timing_s/ref", phase.seconds());
    Ok(Some(batch.response_logprobs(&r.body, t.zorro)?.0))
}

/// 7: per epoch and mini-batch, one forward-backward and one step; the losses averaged over
/// the calls, the mean grad norm, the last learning rate. Returns the phase and its seconds.
async fn update_actor(
    client: &ArcticClient,
    run: &DriverRun,
    jobs: &Jobs,
    batch: &PaddedBatch,
    update: &UpdateTensors,
    n_samples: usize,
    m: &mut StepMetrics,
) -> Result<(Phase, f64), StepError> {
    let t = &run.translation;
    let shape = t.shape;
    let mut upd = Phase::start();
    let mut fb_metrics: Map<String, Value> = Map::new();
    let mut fb_count = 0usize;
    let (mut grad_norms, mut last_lr) = (Vec::new(), None);
    // The engine's peak memory over the step: the largest of its `/step` answers.
    let mut peak_memory: Option<f64> = None;
    let per_mini = shape.mini_batch_prompts * shape.n;
    for _epoch in 0..shape.ppo_epochs {
        for mb in 0..shape.mini_batches() {
            let lo = mb * per_mini;
            let hi = ((mb + 1) * per_mini).min(n_samples);
            let frame = batch.slice(lo, hi).frame(
                &t.update_meta,
                Some(&update.slice(batch, lo, hi)),
                ForwardKind::Update,
                t,
            )?;
            let r = client.forward_backward(jobs.training, &frame).await?;
            upd.add(&r);
            accumulate_metrics(&mut fb_metrics, &r.body)?;
            fb_count += 1;
            let s = client.step(jobs.training).await?;
            upd.add(&s);
            let sm = s.body.get("metrics").cloned().unwrap_or(Value::Null);
            // A null is a non-finite value written by a Python peer (`NaN`, `Infinity`).
            let g = match sm.get("grad_norm") {
                Some(Value::Null) => Some(f64::NAN),
                Some(v) => mean_of(v),
                None => None,
            };
            if let Some(g) = g {
                if !g.is_finite() {
                    // The optimizer has just applied a non-finite update: every later step
                    // trains broken weights, so the run stops here with the evidence.
                    return Err(bad_reply(
                        "/step",
                        format!("non-finite grad_norm ({g}) after the optimizer step"),
                    ));
                }
                grad_norms.push(g);
            }
            last_lr = sm.get("last_lr").and_then(mean_of).or(last_lr);
            if let Some(p) = sm.get("peak_memory_gb").and_then(mean_of) {
                peak_memory = Some(peak_memory.map_or(p, |m: f64| m.max(p)));
            }
        }
    }
    let update_s = upd.seconds();
    m.insert("timing_s/update_actor", update_s);
    for (k, v) in &fb_metrics {
        if let Some(sum) = pyjson::as_f64(v) {
            let name = if k.starts_with("actor/") {
                k.clone()
            } else {
                format!("actor/{k}")
            };
            m.insert(name, sum / fb_count.max(1) as f64);
        }
    }
    if !grad_norms.is_empty() {
        m.insert(
            "actor/grad_norm",
            grad_norms.iter().sum::<f64>() / grad_norms.len() as f64,
        );
    }
    if let Some(lr) = last_lr {
        m.insert("actor/lr", lr);
    }
    if let Some(p) = peak_memory {
        m.insert("perf/max_memory_allocated_gb", p);
    }
    Ok((upd, update_s))
}

/// 8: the weight sync after the update, as the adapter drives it (colocated, before the first
/// rollout too): wake weights, weight-sync, wake kv_cache, one reset of the prefix cache. On
/// separate GPUs the sampler never sleeps, and its wakes answer `already_ready`.
/// `before_step`: the step whose rollout follows the sync.
async fn weight_sync_calls(
    client: &ArcticClient,
    run: &DriverRun,
    jobs: &Jobs,
    before_step: u64,
) -> Result<Phase, StepError> {
    let mut sync = Phase::start();
    let skip = run.spec.skips_sync_before(before_step);
    let r = client.wake(jobs.sampling, Some(&["weights"])).await?;
    sync.add(&r);
    if !skip {
        let r = weight_sync(client, jobs).await?;
        sync.add(&r);
    }
    let r = client.wake(jobs.sampling, Some(&["kv_cache"])).await?;
    sync.add(&r);
    let r = reset_prefix_cache(client, jobs).await?;
    sync.add(&r);
    Ok(sync)
}

/// The batch's metrics in verl's names: scores, rewards, advantages, returns, lengths and
/// clip ratios, tokens, throughput, MFU.
#[allow(clippy::too_many_arguments)]
fn batch_metrics(
    m: &mut StepMetrics,
    run: &DriverRun,
    samples: &[Sample],
    batch: &PaddedBatch,
    scores: &[f64],
    adv: &[f64],
    step_s: f64,
    update_s: f64,
) {
    let shape = run.translation.shape;
    stats(m, "critic/score", scores);
    stats(m, "critic/rewards", scores);
    let token_adv = batch.token_values(adv);
    stats(m, "critic/advantages", &token_adv);
    stats(m, "critic/returns", &token_adv);
    let resp_lens: Vec<f64> = samples.iter().map(|s| s.response.len() as f64).collect();
    let prompt_lens: Vec<f64> = samples.iter().map(|s| s.prompt.len() as f64).collect();
    stats(m, "response_length", &resp_lens);
    m.insert(
        "response_length/clip_ratio",
        samples.iter().filter(|s| s.truncated).count() as f64 / samples.len().max(1) as f64,
    );
    stats(m, "prompt_length", &prompt_lens);
    m.insert(
        "prompt_length/clip_ratio",
        samples
            .iter()
            .filter(|s| s.prompt.len() >= shape.max_prompt_len)
            .count() as f64
            / samples.len().max(1) as f64,
    );
    let seqlens: Vec<u64> = samples
        .iter()
        .map(|s| (s.prompt.len() + s.response.len()) as u64)
        .collect();
    let total_tokens: u64 = seqlens.iter().sum();
    m.insert("perf/total_num_tokens", total_tokens as f64);
    m.insert("perf/time_per_step", step_s);
    if step_s > 0.0 {
        m.insert(
            "perf/throughput",
            total_tokens as f64 / (step_s * run.translation.n_gpus.max(1.0)),
        );
    }
    if let (Some(model), Some(peak)) = (run.model, run.peak_flops) {
        if update_s > 0.0 {
            // verl's forwarder: naive tokens, the whole remote update_actor call, every epoch.
            let flops = model.training_flops(&seqlens) * shape.ppo_epochs as f64;
            m.insert("perf/mfu/actor", flops / update_s / peak);
        }
    }
}

/// `/operation weight-sync` from the training job into the sampling job.
async fn weight_sync(client: &ArcticClient, jobs: &Jobs) -> Result<Reply<Value>, StepError> {
    Ok(client
        .operation(
            jobs.training,
            "weight-sync",
            Some(jobs.training),
            "training",
            json!({"source_sub_job_id": jobs.training, "target_sub_job_ids": [jobs.sampling]}),
        )
        .await?)
}

/// `/operation reset-prefix-cache` on the sampling job: no `sub_job_id`, the adapter's payload.
async fn reset_prefix_cache(client: &ArcticClient, jobs: &Jobs) -> Result<Reply<Value>, StepError> {
    Ok(client
        .operation(
            jobs.sampling,
            "reset-prefix-cache",
            None,
            "sampling",
            json!({"drain": true, "timeout_s": 60.0, "retry_interval_s": 0.1}),
        )
        .await?)
}

/// Generate `n` samples of every prompt as the adapter does: verl repeats each prompt
/// `rollout.n` times before generating and the adapter sends one prompt a request, so every
/// request carries one prompt as text and asks for one sample, with the adapter's
/// `sampling_params` (no `n`, no `seed`) and every key present. A bounded number are in
/// flight; the answer holds, per problem, its `n` samples in the canonical order of
/// [`canonical_groups`].
async fn generate_all(
    client: &ArcticClient,
    job: u64,
    problems: &[Problem],
    n: usize,
    sampling_params: &Map<String, Value>,
) -> Result<Vec<Vec<Reply<GenResult>>>, StepError> {
    let requests: Vec<Node> = problems
        .iter()
        .flat_map(|p| std::iter::repeat_n(generate_request(&p.prompt, sampling_params), n))
        .collect();
    let futs = requests.into_iter().map(|request| {
        let client = client.clone();
        async move {
            let r = client.generate(job, &request).await?;
            let mut results = parse_generate(&r.body)?;
            if results.len() != 1 {
                return Err(protocol(format!(
                    "/generate returned {} results for one prompt and one sample",
                    results.len()
                )));
            }
            Ok::<_, StepError>(Reply {
                body: results.remove(0),
                seconds: r.seconds,
                reported: r.reported,
            })
        }
    });
    let replies: Vec<Reply<GenResult>> = futures_util::stream::iter(futs)
        // 16 prompts' worth of samples in flight, so a batching engine (vLLM, the torch
        // engine on CUDA) still sees as many rows at once as when a request asked for `n`.
        .buffered(16 * n.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    Ok(canonical_groups(problems, n, replies))
}

/// One `/generate` body, as the adapter writes it: every key, with explicit nulls.
fn generate_request(prompt: &str, sampling_params: &Map<String, Value>) -> Node {
    Node::Json(json!({
        "prompts": [prompt],
        "sampling_params": sampling_params,
        "routing_key": null,
        "strict": false,
    }))
}

/// Deal `replies` (`n` a problem, problem-major) back into one group per problem, each in a
/// canonical order: sorted by token ids, then text.
///
/// Why: the `n` requests of a prompt are identical, so which of them receives which sample
/// depends on the order they reach the server (a server seeds a request from its prompt and
/// how many times that prompt came before it, never from anything the client sends). The
/// samples of a prompt are a set; a GRPO group is exchangeable (its advantages are computed
/// over the whole group), so ordering the set canonically changes nothing the training
/// depends on and makes a run reproducible bit for bit whatever order the server answered
/// in. Problems with the same prompt text pool their samples before they are dealt, since
/// their requests are identical too.
fn canonical_groups(
    problems: &[Problem],
    n: usize,
    replies: Vec<Reply<GenResult>>,
) -> Vec<Vec<Reply<GenResult>>> {
    let mut pools: HashMap<&str, Vec<Reply<GenResult>>> = HashMap::new();
    let mut replies = replies.into_iter();
    for p in problems {
        pools
            .entry(p.prompt.as_str())
            .or_default()
            .extend(replies.by_ref().take(n));
    }
    for pool in pools.values_mut() {
        pool.sort_by(|a, b| {
            (&a.body.token_ids, &a.body.text).cmp(&(&b.body.token_ids, &b.body.text))
        });
        // Dealt from the back by `pop`, so reversed.
        pool.reverse();
    }
    problems
        .iter()
        .map(|p| match pools.get_mut(p.prompt.as_str()) {
            Some(pool) => (0..n).filter_map(|_| pool.pop()).collect(),
            None => Vec::new(),
        })
        .collect()
}

struct GenResult {
    text: String,
    token_ids: Vec<i64>,
    /// `logprobs`: one per token id, when the sampler sent them.
    logprobs: Option<Vec<f32>>,
}

fn parse_generate(node: &Node) -> Result<Vec<GenResult>, StepError> {
    let v = node
        .to_json()
        .ok_or_else(|| protocol("/generate response holds tensors where JSON was expected"))?;
    let results = v
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| protocol("/generate response has no `results` list"))?;
    results
        .iter()
        .map(|r| {
            let text = r
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| protocol("/generate result without `text`"))?
                .to_string();
            let token_ids = match r.get("token_ids").and_then(Value::as_array) {
                Some(ids) => ids
                    .iter()
                    .map(|i| i.as_i64().ok_or_else(|| protocol("non-integer token id")))
                    .collect::<Result<Vec<_>, _>>()?,
                None => CharTokenizer::encode(&text).map_err(|e| protocol(e.to_string()))?,
            };
            let logprobs = match r.get("logprobs") {
                None | Some(Value::Null) => None,
                Some(v) => {
                    let lps = v
                        .as_array()
                        .ok_or_else(|| protocol("/generate result `logprobs` is not a list"))?
                        .iter()
                        .map(|x| {
                            pyjson::as_f64(x)
                                .map(|x| x as f32)
                                .ok_or_else(|| protocol("non-numeric entry in `logprobs`"))
                        })
                        .collect::<Result<Vec<f32>, _>>()?;
                    if lps.len() != token_ids.len() {
                        return Err(protocol(format!(
                            "/generate result has {} logprobs for {} token ids",
                            lps.len(),
                            token_ids.len()
                        )));
                    }
                    Some(lps)
                }
            };
            Ok(GenResult {
                text,
                token_ids,
                logprobs,
            })
        })
        .collect()
}

/// A number or a non-finite float (`{"$float": "NaN"}`, as a Python peer's `NaN` reads).
fn mean_of(v: &Value) -> Option<f64> {
    match v {
        // Per-rank lists when the job has more than one rank.
        Value::Array(items) => {
            let xs: Vec<f64> = items.iter().filter_map(pyjson::as_f64).collect();
            (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
        }
        other => pyjson::as_f64(other),
    }
}

/// Sum each numeric metric of a `/forward-backward` response into `acc`.
fn accumulate_metrics(acc: &mut Map<String, Value>, body: &Node) -> Result<(), StepError> {
    let metrics = body
        .get_json("metrics")
        .cloned()
        .ok_or_else(|| protocol("/forward-backward response has no `metrics`"))?;
    let Value::Object(map) = metrics else {
        return Err(protocol("/forward-backward `metrics` is not an object"));
    };
    for (k, v) in map {
        // A null is a non-finite value written by a Python peer.
        let x = if v.is_null() {
            Some(f64::NAN)
        } else {
            mean_of(&v)
        };
        if let Some(x) = x {
            // A NaN loss stays NaN in the sum (and so in the step's metrics).
            let prev = acc.get(&k).and_then(pyjson::as_f64).unwrap_or(0.0);
            acc.insert(k, pyjson::float(prev + x));
        }
    }
    Ok(())
}

/// Whether a planted bug drops `key` from every call's `meta` (see `Plant::DropMetaKey`).
fn planted_drop(t: &super::translate::Translation, key: &str) -> bool {
    t.dropped_meta.iter().any(|k| k == key)
}

fn stats(m: &mut StepMetrics, prefix: &str, xs: &[f64]) {
    if xs.is_empty() {
        return;
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    m.insert(format!("{prefix}/mean"), mean);
    m.insert(format!("{prefix}/max"), max);
    m.insert(format!("{prefix}/min"), min);
}

#[derive(Clone, Copy, PartialEq)]
enum ForwardKind {
    OldLogProb,
    Update,
}

/// Per-sequence response-aligned values for an update.
struct UpdateTensors {
    old_logp: Vec<Vec<f32>>,
    ref_logp: Option<Vec<Vec<f32>>>,
    advantages: Vec<f64>,
}

impl UpdateTensors {
    fn slice(&self, _batch: &PaddedBatch, lo: usize, hi: usize) -> UpdateTensors {
        UpdateTensors {
            old_logp: self.old_logp[lo..hi].to_vec(),
            ref_logp: self.ref_logp.as_ref().map(|r| r[lo..hi].to_vec()),
            advantages: self.advantages[lo..hi].to_vec(),
        }
    }
}

/// A batch's token planes, padded as verl pads them (see [`PaddedBatch::planes`]).
struct TokenPlanes {
    input_ids: Vec<i64>,
    mask: Vec<i64>,
    prompts: Vec<i64>,
    responses: Vec<i64>,
}

/// verl's padded layout: prompts LEFT-padded to P, responses RIGHT-padded to R, S = P + R.
#[derive(Clone)]
struct PaddedBatch {
    p: usize,
    r: usize,
    prompts: Vec<Vec<i64>>,
    responses: Vec<Vec<i64>>,
}

impl PaddedBatch {
    fn build(samples: &[Sample], shape: &BatchShape) -> Self {
        Self {
            p: shape.max_prompt_len,
            r: shape.max_response_len,
            prompts: samples.iter().map(|s| s.prompt.clone()).collect(),
            responses: samples.iter().map(|s| s.response.clone()).collect(),
        }
    }

    fn slice(&self, lo: usize, hi: usize) -> PaddedBatch {
        PaddedBatch {
            p: self.p,
            r: self.r,
            prompts: self.prompts[lo..hi].to_vec(),
            responses: self.responses[lo..hi].to_vec(),
        }
    }

    fn b(&self) -> usize {
        self.prompts.len()
    }

    fn s(&self) -> usize {
        self.p + self.r
    }

    /// A `[B,S]` tensor with `f(i, t)` at response column `P + t` (t < response length),
    /// zero elsewhere ("left-zero-padded to [B,S]").
    fn response_plane<T: Copy + Default>(&self, f: impl Fn(usize, usize) -> T) -> Vec<T> {
        let (b, s) = (self.b(), self.s());
        let mut out = vec![T::default(); b * s];
        for i in 0..b {
            for t in 0..self.responses[i].len() {
                out[i * s + self.p + t] = f(i, t);
            }
        }
        out
    }

    /// The `/forward` request of this batch as the adapter frames it: the `batch` tensors,
    /// `meta` (with an update's extras) and the `processing` a `kind` of forward asks for.
    fn frame(
        &self,
        meta: &Map<String, Value>,
        update: Option<&UpdateTensors>,
        kind: ForwardKind,
        t: &Translation,
    ) -> Result<Node, StepError> {
        let (b, s, p, r) = (self.b(), self.s(), self.p, self.r);
        let planes = self.planes();
        let mut tensors = vec![
            (
                "input_ids".to_string(),
                Tensor::from_i64(vec![b, s], &planes.input_ids).map_err(wire_err)?,
            ),
            (
                "attention_mask".to_string(),
                Tensor::from_i64(vec![b, s], &planes.mask).map_err(wire_err)?,
            ),
            (
                "prompts".to_string(),
                Tensor::from_i64(vec![b, p], &planes.prompts).map_err(wire_err)?,
            ),
        ];
        if !t.drop_position_ids {
            let pos = self.position_ids(&planes.mask);
            tensors.push((
                "position_ids".into(),
                Tensor::from_i64(vec![b, s], &pos).map_err(wire_err)?,
            ));
        }
        let processing = match kind {
            ForwardKind::OldLogProb => {
                json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": null})
            }
            ForwardKind::Update => json!({
                "post": ["apply_temperature", "compute_entropy_and_logprobs"],
                "loss_fn": "verl_grpo",
            }),
        };
        if let Some(u) = update {
            tensors.push((
                "responses".into(),
                Tensor::from_i64(vec![b, r], &planes.responses).map_err(wire_err)?,
            ));
            tensors.extend(self.update_planes(u)?);
        }
        let meta_entries = self.meta_entries(meta, update.is_some(), t)?;
        Ok(Node::Dict(vec![
            (
                "batch".into(),
                Node::Dict(
                    tensors
                        .into_iter()
                        .map(|(k, tensor)| {
                            (
                                k,
                                Node::Tensor {
                                    tensor,
                                    scalar: false,
                                },
                            )
                        })
                        .collect(),
                ),
            ),
            ("meta".into(), Node::Dict(meta_entries)),
            ("processing".into(), Node::Json(processing)),
        ]))
    }

    /// The padded token planes: `input_ids` and `attention_mask` `[B,S]`, `prompts` `[B,P]`
    /// (left-padded), `responses` `[B,R]` (right-padded).
    fn planes(&self) -> TokenPlanes {
        let (b, s, p, r) = (self.b(), self.s(), self.p, self.r);
        let mut planes = TokenPlanes {
            input_ids: vec![PAD_ID; b * s],
            mask: vec![0i64; b * s],
            prompts: vec![PAD_ID; b * p],
            responses: vec![PAD_ID; b * r],
        };
        for i in 0..b {
            let pr = &self.prompts[i];
            let off = p - pr.len();
            for (j, &tok) in pr.iter().enumerate() {
                planes.input_ids[i * s + off + j] = tok;
                planes.mask[i * s + off + j] = 1;
                planes.prompts[i * p + off + j] = tok;
            }
            for (j, &tok) in self.responses[i].iter().enumerate() {
                planes.input_ids[i * s + p + j] = tok;
                planes.mask[i * s + p + j] = 1;
                planes.responses[i * r + j] = tok;
            }
        }
        planes
    }

    /// `position_ids` `[B,S]` from the attention mask: the running count of real tokens less
    /// one, never below zero.
    fn position_ids(&self, mask: &[i64]) -> Vec<i64> {
        let (b, s) = (self.b(), self.s());
        let mut pos = vec![0i64; b * s];
        for i in 0..b {
            let mut c = 0i64;
            for j in 0..s {
                c += mask[i * s + j];
                pos[i * s + j] = (c - 1).max(0);
            }
        }
        pos
    }

    /// An update's response-aligned `[B,S]` planes: the response and loss masks, the old
    /// log-probs, the advantages and (with a reference model) the reference log-probs.
    fn update_planes(&self, u: &UpdateTensors) -> Result<Vec<(String, Tensor)>, StepError> {
        let (b, s) = (self.b(), self.s());
        let rmask = self.response_plane(|_, _| 1i64);
        let mut tensors = vec![
            (
                "response_mask".into(),
                Tensor::from_i64(vec![b, s], &rmask).map_err(wire_err)?,
            ),
            (
                "loss_mask".into(),
                Tensor::from_i64(vec![b, s], &rmask).map_err(wire_err)?,
            ),
        ];
        let old = self.response_plane(|i, t| u.old_logp[i].get(t).copied().unwrap_or(0.0));
        tensors.push((
            "old_log_probs".into(),
            Tensor::from_f32(vec![b, s], &old).map_err(wire_err)?,
        ));
        let adv = self.response_plane(|i, _| u.advantages[i] as f32);
        tensors.push((
            "advantages".into(),
            Tensor::from_f32(vec![b, s], &adv).map_err(wire_err)?,
        ));
        if let Some(rl) = &u.ref_logp {
            let rp = self.response_plane(|i, t| rl[i].get(t).copied().unwrap_or(0.0));
            tensors.push((
                "ref_log_prob".into(),
                Tensor::from_f32(vec![b, s], &rp).map_err(wire_err)?,
            ));
        }
        Ok(tensors)
    }

    /// The frame's `meta`: the step's meta, then for an update the mini-batch's
    /// `batch_num_tokens` (a 0-d I64 tensor: `response_mask.sum()`) and `rollout_is_weights`
    /// (no importance weights: an explicit null), as the adapter sends them.
    fn meta_entries(
        &self,
        meta: &Map<String, Value>,
        update: bool,
        t: &Translation,
    ) -> Result<Vec<(String, Node)>, StepError> {
        let mut meta_entries: Vec<(String, Node)> = meta
            .clone()
            .into_iter()
            .map(|(k, v)| (k, Node::Json(v)))
            .collect();
        if update {
            let tokens: usize = self.responses.iter().map(Vec::len).sum();
            if !planted_drop(t, "batch_num_tokens") {
                meta_entries.push((
                    "batch_num_tokens".into(),
                    Node::scalar(Tensor::from_i64(vec![], &[tokens as i64]).map_err(wire_err)?),
                ));
            }
            if !planted_drop(t, "rollout_is_weights") {
                meta_entries.push(("rollout_is_weights".into(), Node::Json(Value::Null)));
            }
        }
        Ok(meta_entries)
    }

    /// Response-aligned log-probs (and entropy) out of a `/forward` reply's `[B,S]` planes:
    /// column `P-1+t` without ZoRRo, `P+t` with it.
    #[allow(clippy::type_complexity)]
    fn response_logprobs(
        &self,
        reply: &Node,
        zorro: bool,
    ) -> Result<(Vec<Vec<f32>>, Option<Vec<Vec<f32>>>), StepError> {
        let batch = reply
            .get("batch")
            .ok_or_else(|| protocol("/forward response has no `batch`"))?;
        let plane = |name: &str| -> Result<Option<Vec<Vec<f32>>>, StepError> {
            let Some(Node::Tensor { tensor, .. }) = batch.get(name) else {
                return Ok(None);
            };
            if tensor.shape != [self.b(), self.s()] {
                return Err(bad_reply(
                    "/forward",
                    format!(
                        "`batch.{name}` has shape {:?}, expected [{}, {}]",
                        tensor.shape,
                        self.b(),
                        self.s()
                    ),
                ));
            }
            let flat = tensor.to_f32_vec();
            let shift = if zorro { self.p } else { self.p - 1 };
            let rows: Vec<Vec<f32>> = (0..self.b())
                .map(|i| {
                    (0..self.responses[i].len())
                        .map(|t| flat[i * self.s() + shift + t])
                        .collect()
                })
                .collect();
            // A non-finite value would flow into the loss and the weights unnoticed.
            for (i, row) in rows.iter().enumerate() {
                if let Some(t) = row.iter().position(|x| !x.is_finite()) {
                    return Err(bad_reply(
                        "/forward",
                        format!(
                            "`batch.{name}` holds a non-finite value ({}) at sequence {i}, response token {t}",
                            row[t]
                        ),
                    ));
                }
            }
            Ok(Some(rows))
        };
        let logp = plane("logprobs")?
            .ok_or_else(|| protocol("/forward response has no `batch.logprobs`"))?;
        Ok((logp, plane("entropy")?))
    }

    fn masked_mean(&self, per_seq: &[Vec<f32>]) -> f64 {
        let (sum, n) = per_seq
            .iter()
            .flatten()
            .fold((0.0f64, 0usize), |(s, n), &x| (s + x as f64, n + 1));
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    }

    /// A per-sequence value repeated over its response tokens (verl's token-level stats).
    fn token_values(&self, per_seq: &[f64]) -> Vec<f64> {
        per_seq
            .iter()
            .zip(&self.responses)
            .flat_map(|(&v, r)| std::iter::repeat_n(v, r.len()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> Reply<GenResult> {
        Reply {
            body: GenResult {
                text: text.to_string(),
                token_ids: CharTokenizer::encode(text).unwrap(),
                logprobs: None,
            },
            seconds: 0.001,
            reported: true,
        }
    }

    /// A result's `logprobs`: one float per token id, or refused with what is wrong.
    #[test]
    fn generate_log_probs_are_parsed_and_bad_ones_refused() {
        let parse = |r: Value| {
            parse_generate(&Node::Json(json!({"results": [r]})))
                .map(|mut v| v.remove(0).logprobs)
                .map_err(|e| e.message())
        };
        let ok = json!({"text": "ab", "token_ids": [5, 6], "logprobs": [-0.5, -1.25]});
        assert_eq!(parse(ok), Ok(Some(vec![-0.5, -1.25])));
        assert_eq!(parse(json!({"text": "ab", "token_ids": [5, 6]})), Ok(None));
        for (bad, why) in [
            (
                json!({"text": "ab", "token_ids": [5, 6], "logprobs": [-0.5]}),
                "1 logprobs for 2 token ids",
            ),
            (
                json!({"text": "ab", "token_ids": [5, 6], "logprobs": "x"}),
                "`logprobs` is not a list",
            ),
            (
                json!({"text": "ab", "token_ids": [5, 6], "logprobs": [-0.5, "x"]}),
                "non-numeric entry",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    /// The samples of a prompt come back in whatever order the server answered its `n`
    /// identical requests; the groups the training sees are the same whatever that order,
    /// also when two problems share a prompt text (their requests are identical too).
    #[test]
    fn groups_are_canonical_whatever_order_the_server_answers_in() {
        let problems = [
            Problem {
                prompt: "Q:1+2=?\nA:".into(),
                answer: 3,
            },
            Problem {
                prompt: "Q:2+2=?\nA:".into(),
                answer: 4,
            },
            Problem {
                prompt: "Q:1+2=?\nA:".into(),
                answer: 3,
            },
        ];
        let texts = [
            "#### 3", "#### 4", "#### 1", "#### 3", // Q:1+2, first problem
            "#### 5", "#### 4", "#### 2", "#### 9", // Q:2+2
            "#### 7", "#### 3", "#### 0", "#### 8", // Q:1+2 again
        ];
        let flatten = |groups: Vec<Vec<Reply<GenResult>>>| -> Vec<Vec<String>> {
            groups
                .into_iter()
                .map(|g| g.into_iter().map(|r| r.body.text).collect())
                .collect()
        };
        let want = flatten(canonical_groups(
            &problems,
            4,
            texts.iter().map(|t| reply(t)).collect(),
        ));
        assert_eq!(
            want,
            [
                ["#### 0", "#### 1", "#### 3", "#### 3"],
                ["#### 2", "#### 4", "#### 5", "#### 9"],
                ["#### 3", "#### 4", "#### 7", "#### 8"],
            ]
        );
        // Every arrival order that hands a prompt's samples to its requests differently.
        let same_prompt: Vec<usize> = [0, 1, 2, 3, 8, 9, 10, 11].to_vec();
        let other: Vec<usize> = [4, 5, 6, 7].to_vec();
        for shift in 1..8 {
            let mut order: Vec<usize> = (0..12).collect();
            for (k, &slot) in same_prompt.iter().enumerate() {
                order[slot] = same_prompt[(k + shift) % 8];
            }
            for (k, &slot) in other.iter().enumerate() {
                order[slot] = other[(k + shift) % 4];
            }
            let permuted = order.iter().map(|&i| reply(texts[i])).collect();
            assert_eq!(flatten(canonical_groups(&problems, 4, permuted)), want);
        }
    }

    /// A `/generate` body is the adapter's: the prompt as text, alone; its `sampling_params`
    /// with no `n` and no `seed`; `routing_key` an explicit null; `strict` false.
    #[test]
    fn a_generate_request_is_the_adapters() {
        let params = json!({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 8,
                            "logprobs": null, "repetition_penalty": 1.0});
        let Value::Object(map) = params.clone() else {
            unreachable!()
        };
        let body = generate_request("Q:1+2=?\nA:", &map).to_json().unwrap();
        assert_eq!(
            body,
            json!({"prompts": ["Q:1+2=?\nA:"], "sampling_params": params,
                   "routing_key": null, "strict": false})
        );
    }

    /// A NaN loss from the server (the `NaN` literal in the frame) stays NaN in the summed
    /// metrics, never silently dropped or turned into 0.
    #[test]
    fn a_nan_loss_in_a_reply_stays_nan_in_the_metrics() {
        let reply = crate::wire::decode(bytes::Bytes::from(
            crate::wire::encode(&Node::json(json!({
                "job_id": 2,
                "metrics": {"loss": pyjson::float(f64::NAN), "actor/pg_loss": 0.5},
                "avg_loss": pyjson::float(f64::NAN),
            })))
            .unwrap(),
        ))
        .unwrap();
        let mut acc = Map::new();
        assert!(accumulate_metrics(&mut acc, &reply).is_ok());
        assert!(accumulate_metrics(&mut acc, &reply).is_ok());
        assert!(pyjson::as_f64(&acc["loss"]).unwrap().is_nan());
        assert_eq!(pyjson::as_f64(&acc["actor/pg_loss"]), Some(1.0));
        assert!(mean_of(&pyjson::float(f64::NAN)).unwrap().is_nan());
        assert_eq!(mean_of(&json!([1.0, 3.0])), Some(2.0));
    }
}
