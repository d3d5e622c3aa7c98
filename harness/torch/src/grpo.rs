//! An engine-level GRPO loop that makes the same calls, in the same order and with the same
//! payload layout, as the driver does over HTTP: generate n rollouts per prompt on the
//! sampling job, score them, old log-probs by `forward` on the training job, group-relative
//! advantages, one `forward-backward` + `step`, then weight sync. Used by the learning test
//! and the `tiny_grpo` example; also the reference for building verl-layout payloads.

use std::time::Instant;

use serde_json::{json, Map, Value};

use rlharness_arctic::engine::{f32_tensor, Engine, EngineError, GenerateRequest, ModelBatch};
use rlharness_arctic::task::scorer::ScorerConfig;
use rlharness_arctic::task::{ArithConfig, ArithTask, CharTokenizer, PAD_ID};
use rlharness_arctic::wire::api::{JobConfig, JobType};
use rlharness_arctic::wire::{DType, Tensor};

/// The knobs of a learning run.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoRun {
    pub steps: usize,
    pub prompts_per_step: usize,
    pub n: usize,
    pub temperature: f64,
    pub max_tokens: usize,
    pub lr: f64,
    pub gradient_clipping: f64,
    pub entropy_coeff: f64,
    pub micro_batch: usize,
    pub seed: u64,
    pub task: ArithConfig,
}

impl Default for GrpoRun {
    /// The CPU flagship's settings.
    fn default() -> Self {
        GrpoRun {
            steps: 100,
            prompts_per_step: 32,
            n: 8,
            temperature: 1.0,
            max_tokens: 8,
            lr: 1e-3,
            gradient_clipping: 1.0,
            entropy_coeff: 0.0,
            micro_batch: 256,
            seed: 1,
            task: ArithConfig::default(),
        }
    }
}

impl GrpoRun {
    /// The collapse scenario's settings: a learning rate far too large for the model, fewer
    /// prompts per step and no gradient clipping. Entropy falls towards 0 while the reward
    /// stalls.
    pub fn collapse() -> Self {
        GrpoRun {
            lr: 3e-2,
            prompts_per_step: 16,
            gradient_clipping: 0.0,
            ..GrpoRun::default()
        }
    }
}

/// One step's figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepRecord {
    pub step: usize,
    pub reward_mean: f64,
    /// Mean token entropy of the sampled responses under the trainer (from the old-log-prob
    /// forward).
    pub entropy: f64,
    pub pg_loss: f64,
    pub grad_norm: f64,
    pub response_length: f64,
    pub seconds: f64,
}

/// `i64` wire tensor.
pub fn i64_tensor(shape: Vec<usize>, values: &[i64]) -> Tensor {
    Tensor {
        dtype: rlharness_arctic::wire::DType::I64,
        shape,
        data: rlharness_arctic::wire::dssst1::le_bytes(values, |v| v.to_le_bytes()),
    }
}

/// f32 values of a wire tensor (F32 only).
pub fn f32_values(t: &Tensor) -> Result<Vec<f32>, EngineError> {
    if t.dtype != DType::F32 || t.data.len() % 4 != 0 {
        return Err(EngineError::internal("expected an F32 tensor"));
    }
    Ok(t.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// verl's padded layout for prompts and responses (ids, unpadded): returns the batch tensors
/// (`input_ids`, `attention_mask`, `prompts`, `responses`, `response_mask` left-zero-padded
/// to `[B,S]`) and (P, R).
pub fn padded_batch(
    prompts: &[Vec<i64>],
    responses: &[Vec<i64>],
) -> (Vec<(String, Tensor)>, usize, usize) {
    let b = prompts.len();
    let p = prompts.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let r = responses.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let s = p + r;
    let mut ids = vec![PAD_ID; b * s];
    let mut mask = vec![0i64; b * s];
    let mut prompt_ids = vec![PAD_ID; b * p];
    let mut resp_ids = vec![PAD_ID; b * r];
    let mut resp_mask = vec![0f32; b * s];
    for i in 0..b {
        let (pr, re) = (&prompts[i], &responses[i]);
        let off = p - pr.len();
        for (j, &t) in pr.iter().enumerate() {
            ids[i * s + off + j] = t;
            mask[i * s + off + j] = 1;
            prompt_ids[i * p + off + j] = t;
        }
        for (j, &t) in re.iter().enumerate() {
            ids[i * s + p + j] = t;
            mask[i * s + p + j] = 1;
            resp_ids[i * r + j] = t;
            resp_mask[i * s + p + j] = 1.0;
        }
    }
    let tensors = vec![
        ("input_ids".to_string(), i64_tensor(vec![b, s], &ids)),
        ("attention_mask".to_string(), i64_tensor(vec![b, s], &mask)),
        ("prompts".to_string(), i64_tensor(vec![b, p], &prompt_ids)),
        ("responses".to_string(), i64_tensor(vec![b, r], &resp_ids)),
        (
            "response_mask".to_string(),
            f32_tensor(vec![b, s], &resp_mask),
        ),
    ];
    (tensors, p, r)
}

/// verl's GRPO advantage per group of `n`: `(s - mean) / (std + 1e-6)`, std with n-1; a group
/// of one gets mean 0 and std 1.
pub fn group_advantages(scores: &[f64], n: usize) -> Vec<f64> {
    // One implementation of verl's GRPO advantage: the driver's.
    rlharness_arctic::grpo::group_advantages(scores, n, true)
}

/// A JobConfig as the driver sends it (model name, type, nothing else set).
pub fn job_config(job_type: JobType) -> JobConfig {
    JobConfig::new("rlharness/tiny-arith", job_type, 42)
}

/// The sampling and training JobConfigs of a run.
pub fn job_configs(run: &GrpoRun) -> (JobConfig, JobConfig) {
    let sampling = job_config(JobType::Sampling);
    let mut training = job_config(JobType::Training);
    training.checkpoint_path = Some("checkpoints".into());
    training.ds_config = Some(json!({
        "train_batch_size": run.prompts_per_step * run.n,
        "train_micro_batch_size_per_gpu": run.micro_batch,
        "gradient_clipping": run.gradient_clipping,
        "optimizer": {"type": "AdamW", "params": {"lr": run.lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}},
    }));
    (sampling, training)
}

/// Run the loop on `engine` (a fresh one: it creates job ids 1 and 2). `on_step` sees each
/// record as it is made.
pub fn run_grpo(
    engine: &dyn Engine,
    run: &GrpoRun,
    mut on_step: impl FnMut(&StepRecord),
) -> Result<Vec<StepRecord>, EngineError> {
    let task =
        ArithTask::new(run.task.clone()).map_err(|e| EngineError::bad_request(e.to_string()))?;
    let scorer = ScorerConfig::default();
    let (sampling_cfg, training_cfg) = job_configs(run);
    let (sampler, trainer) = (1, 2);
    engine.create_job(sampler, &sampling_cfg)?;
    engine.create_job(trainer, &training_cfg)?;
    let mut records = Vec::new();
    for step in 0..run.steps {
        let t0 = Instant::now();
        let Rollouts {
            prompts,
            responses,
            scores,
        } = rollouts(engine, sampler, &task, &scorer, run, step)?;
        let (tensors, p, r) = padded_batch(&prompts, &responses);
        let b = prompts.len();
        let s = p + r;
        let meta = step_meta(run, b);
        let old = engine.forward(
            trainer,
            &ModelBatch {
                batch: tensors.clone(),
                meta: meta.clone(),
                post: vec!["compute_entropy_and_logprobs".into()],
                loss_fn: None,
            },
        )?;
        let lp = f32_values(&old.value.logprobs)?;
        let ent = old
            .value
            .entropy
            .as_ref()
            .map(f32_values)
            .transpose()?
            .unwrap_or_default();
        // Non-ZoRRo alignment: response token t at column P-1+t; re-pad to column P+t.
        let mut old_lp = vec![0f32; b * s];
        let mut ent_sum = 0.0;
        let mut tokens = 0usize;
        for (i, resp) in responses.iter().enumerate() {
            for t in 0..resp.len() {
                old_lp[i * s + p + t] = lp[i * s + p - 1 + t];
                ent_sum += ent.get(i * s + p - 1 + t).copied().unwrap_or(0.0) as f64;
                tokens += 1;
            }
        }
        let adv = group_advantages(&scores, run.n);
        let mut adv_full = vec![0f32; b * s];
        for (i, resp) in responses.iter().enumerate() {
            for t in 0..resp.len() {
                adv_full[i * s + p + t] = adv[i] as f32;
            }
        }
        let mut update = tensors;
        update.push(("old_log_probs".into(), f32_tensor(vec![b, s], &old_lp)));
        update.push(("advantages".into(), f32_tensor(vec![b, s], &adv_full)));
        let fb = engine.forward_backward(
            trainer,
            &ModelBatch {
                batch: update,
                meta,
                post: vec![
                    "apply_temperature".into(),
                    "compute_entropy_and_logprobs".into(),
                ],
                loss_fn: Some("verl_grpo".into()),
            },
        )?;
        let st = engine.step(trainer, None)?;
        engine.weight_sync(trainer, &[sampler])?;
        let rec = StepRecord {
            step: step + 1,
            reward_mean: scores.iter().sum::<f64>() / scores.len().max(1) as f64,
            entropy: ent_sum / tokens.max(1) as f64,
            pg_loss: fb
                .value
                .metrics
                .get("actor/pg_loss")
                .and_then(Value::as_f64)
                .unwrap_or(f64::NAN),
            grad_norm: st.value.grad_norm.unwrap_or(f64::NAN),
            response_length: tokens as f64 / b.max(1) as f64,
            seconds: t0.elapsed().as_secs_f64(),
        };
        on_step(&rec);
        records.push(rec);
    }
    engine.destroy_job(trainer);
    engine.destroy_job(sampler);
    Ok(records)
}

/// One step's rollouts: each response with its prompt's token ids and its score.
struct Rollouts {
    prompts: Vec<Vec<i64>>,
    responses: Vec<Vec<i64>>,
    scores: Vec<f64>,
}

/// Generate `n` responses for each of the step's prompts on the `sampler` job and score them.
fn rollouts(
    engine: &dyn Engine,
    sampler: u64,
    task: &ArithTask,
    scorer: &ScorerConfig,
    run: &GrpoRun,
    step: usize,
) -> Result<Rollouts, EngineError> {
    let problems = task.batch(run.seed, step as u64, run.prompts_per_step);
    let mut params = Map::new();
    params.insert("n".into(), json!(run.n));
    params.insert("temperature".into(), json!(run.temperature));
    params.insert("top_p".into(), json!(1.0));
    params.insert("max_tokens".into(), json!(run.max_tokens));
    let request = GenerateRequest {
        prompts: problems.iter().map(|p| p.prompt.clone()).collect(),
        sampling_params: params,
    };
    let completions = engine.generate(sampler, &request)?.value;
    let mut out = Rollouts {
        prompts: Vec::new(),
        responses: Vec::new(),
        scores: Vec::new(),
    };
    for (k, c) in completions.iter().enumerate() {
        let problem = &problems[k / run.n];
        out.prompts.push(
            CharTokenizer::encode(&problem.prompt)
                .map_err(|e| EngineError::internal(e.to_string()))?,
        );
        out.responses.push(c.token_ids.clone());
        out.scores
            .push(scorer.score(&c.text, &problem.ground_truth()));
    }
    Ok(out)
}

/// The `meta` of a step's forwards over `b` sequences, as the driver sends it.
fn step_meta(run: &GrpoRun, b: usize) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("pad_token_id".into(), json!(PAD_ID));
    meta.insert("temperature".into(), json!(run.temperature));
    meta.insert("zorro_train_enable".into(), json!(false));
    meta.insert("drop_position_ids".into(), json!(true));
    meta.insert("global_batch_size".into(), json!(b));
    meta.insert(
        "actor_config".into(),
        json!({"entropy_coeff": run.entropy_coeff, "loss_agg_mode": "token-mean", "use_kl_loss": false,
               "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0}),
    );
    meta
}

/// Mean of `field` over records `[from, to)`.
pub fn window_mean(
    records: &[StepRecord],
    from: usize,
    to: usize,
    field: impl Fn(&StepRecord) -> f64,
) -> f64 {
    let w = &records[from.min(records.len())..to.min(records.len())];
    w.iter().map(field).sum::<f64>() / w.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_follow_verl() {
        let a = group_advantages(&[1.0, 0.0, 0.0, 1.0], 2);
        let want = 0.5 / (0.5f64.sqrt() + 1e-6);
        assert!((a[0] - want).abs() < 1e-9 && (a[1] + want).abs() < 1e-9);
        assert_eq!(group_advantages(&[1.0, 1.0], 2), vec![0.0, 0.0]);
        assert_eq!(group_advantages(&[0.5], 1), vec![0.5 / (1.0 + 1e-6)]);
    }

    #[test]
    fn padded_batch_uses_verl_layout() {
        let (t, p, r) = padded_batch(&[vec![5, 6], vec![7]], &[vec![8], vec![9, 10]]);
        assert_eq!((p, r), (2, 2));
        let ids = &t[0].1;
        let vals: Vec<i64> = ids
            .data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(vals, vec![5, 6, 8, 0, 0, 7, 9, 10]);
        let rm = f32_values(&t[4].1).unwrap();
        assert_eq!(rm, vec![0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
    }
}
