//! One training step in verl's order, the weight sync, and the step's metrics in verl's names.

use std::time::Instant;

use serde_json::{json, Map, Value};

use super::batch::{ForwardKind, PaddedBatch, UpdateTensors};
use super::generate::generate_all;
use super::{bad_reply, protocol, DriverRun, Jobs, Phase, Sample, StepError};
use crate::model::metrics::StepMetrics;
use crate::run::driver::client::{ArcticClient, Reply};
use crate::run::driver::mismatch;
use rlharness_arctic::grpo::group_advantages;
use rlharness_arctic::task::{ArithTask, CharTokenizer};
use rlharness_arctic::wire::{pyjson, Node};

/// One training step, in verl's order: (1-3) rollout, (4-5) old and reference log-probs, (6)
/// GRPO advantages, (7) the update, (8) the weight sync; then the step's metrics in verl's
/// names.
pub(super) async fn one_step(
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
    if let Some(x) = mismatch::mismatch(&sampler, &old_logp) {
        m.insert(mismatch::PROBS_DIFF_MEAN, x.probs_diff_mean);
        m.insert(mismatch::PROBS_DIFF_MAX, x.probs_diff_max);
        m.insert(mismatch::K3_KL, x.k3_kl);
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
            let score =
                run.spec.scorer.score(&r.text, &problem.ground_truth()) + run.spec.reward_offset();
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
pub(super) async fn weight_sync_calls(
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

/// A number or a non-finite float (`{"$float": "NaN"}`, as a Python peer's `NaN` reads).
pub(super) fn mean_of(v: &Value) -> Option<f64> {
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
pub(super) fn accumulate_metrics(
    acc: &mut Map<String, Value>,
    body: &Node,
) -> Result<(), StepError> {
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
