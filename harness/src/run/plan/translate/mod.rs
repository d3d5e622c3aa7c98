//! The Arctic adapter's translation of a verl-style config into JobConfigs and per-call `meta`,
//! following the knob table (`crate::run::knobs`, the Arctic knob manifest): every knob the adapter
//! copies as it is goes where its row's `to` says, under its condition, and a knob the config
//! leaves out takes its row's default. What is left here is computed: batch sizes, the
//! optimizer and scheduler, `max_tokens`, the ZoRRo block, the JobConfigs' own fields. The plan
//! computes it once; the builtin driver sends exactly this (its `Translation`, the driver's
//! input); the propagation check compares it with what the server consumes.

mod cfg;

use serde_json::{json, Map, Value};

use crate::run::driver::builtin::{BatchShape, Translation};
pub(crate) use cfg::{Cfg, TranslateError};
use rlharness_arctic::task::PAD_ID;
use rlharness_arctic::wire::api::{JobConfig, JobType};
use rlharness_arctic::wire::pyjson::json_safe;

const A: &str = "actor_rollout_ref.actor";
const R: &str = "actor_rollout_ref.rollout";
const RB: &str = "remote_backend";

/// The adapter's `meta` keys, in the order it writes them.
const META_KEYS: [&str; 14] = [
    "zorro_train_enable",
    "zorro_train_max_rollouts",
    "load_balancer",
    "rollout_n",
    "max_prompt_len",
    "max_response_len",
    "max_token_len_per_gpu",
    "temperature",
    "calculate_entropy",
    "pad_token_id",
    "drop_position_ids",
    "logits_optimization",
    "logits_optimization_peak_mem_size_in_gib",
    "logits_compute_in_fp32",
];

/// `ds_worker_config`'s keys, in the adapter's order: the model's, then ZoRRo's.
const DWC_KEYS: [&str; 13] = [
    "attn_implementation",
    "use_liger",
    "enable_gradient_checkpointing",
    "zorro_train_enable",
    "response_len",
    "max_token_len",
    "rollout_n",
    "temperature",
    "use_unpad",
    "logits_optimization",
    "logits_optimization_peak_mem_size_in_gib",
    "logits_compute_in_fp32",
    "logits_compute_from_fp32_inputs",
];

/// `vllm_config`'s keys, in the adapter's order.
const VLLM_KEYS: [&str; 7] = [
    "tensor_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "enforce_eager",
    "enable_chunked_prefill",
    "quantization",
];

/// The sizes and switches every part of the translation reads, read once.
struct Basics {
    model: String,
    /// `rollout.n`.
    n: u64,
    /// `data.train_batch_size`.
    prompts: u64,
    /// `ppo_mini_batch_size`, in prompts.
    mini: u64,
    micro: u64,
    epochs: u64,
    max_prompt: u64,
    max_response: u64,
    training_gpus: u64,
    log_prob_gpus: u64,
    zorro: bool,
    colocate: bool,
    temperature: f64,
    seed: i64,
    full_det: bool,
    /// Sequences per optimizer step: `mini * n`.
    train_batch_size: u64,
}

fn basics(c: &Cfg) -> Result<Basics, TranslateError> {
    let model = c.string("actor_rollout_ref.model.path")?;
    if model.is_empty() {
        return Err(TranslateError {
            key: "actor_rollout_ref.model.path".into(),
            message: "required (the model every job loads)".into(),
        });
    }
    let n = c.u64(&format!("{R}.n"))?.max(1);
    let prompts = c.u64("data.train_batch_size")?.max(1);
    let mini = c.u64(&format!("{A}.ppo_mini_batch_size"))?.max(1);
    Ok(Basics {
        model,
        n,
        prompts,
        mini,
        // `null` lets the backend choose; the adapter then sends 1.
        micro: c
            .opt_u64(&format!("{A}.ppo_micro_batch_size_per_gpu"))?
            .unwrap_or(1)
            .max(1),
        epochs: c.u64(&format!("{A}.ppo_epochs"))?.max(1),
        max_prompt: c.u64("data.max_prompt_length")?,
        max_response: c.u64("data.max_response_length")?,
        training_gpus: c.u64(&format!("{RB}.training_gpus"))?,
        log_prob_gpus: c.u64(&format!("{RB}.log_prob_gpus"))?,
        zorro: c.bool(&format!("{RB}.train.zorro_train.enable"))?,
        colocate: c.bool(&format!("{RB}.colocate"))?,
        temperature: c.f64(&format!("{R}.temperature"))?,
        seed: c.i64(&format!("{RB}.train.determinism.seed"))?,
        full_det: c.bool(&format!("{RB}.train.determinism.full"))?,
        train_batch_size: mini * n,
    })
}

/// The blocks the knob rows are copied into.
#[derive(Default)]
struct Blocks {
    meta: Map<String, Value>,
    dwc: Map<String, Value>,
    vllm: Map<String, Value>,
}

impl Blocks {
    /// The block and key a destination names.
    fn slot(&mut self, at: &str) -> Option<(&mut Map<String, Value>, String)> {
        let (block, key) = if let Some(k) = at.strip_prefix("meta.") {
            (&mut self.meta, k)
        } else if let Some(k) = at.strip_prefix("job.training.ds_worker_config.") {
            (&mut self.dwc, k)
        } else {
            (
                &mut self.vllm,
                at.strip_prefix("job.sampling.vllm_config.")?,
            )
        };
        Some((block, key.to_string()))
    }
}

/// Every row's value to each of its destinations whose condition holds (a `null` is not
/// written: `to_onprem` leaves out an unset quantization).
fn copy_rows(c: &Cfg) -> Result<Blocks, TranslateError> {
    let mut blocks = Blocks::default();
    for knob in &c.table.knobs {
        for d in &knob.to {
            if !c.holds(&d.when)? {
                continue;
            }
            let v = c.value(&knob.path)?;
            if v.is_null() {
                continue;
            }
            let (block, key) = blocks.slot(&d.at).ok_or_else(|| TranslateError {
                key: knob.path.clone(),
                message: format!(
                    "the knob table sends it to `{}`, which no translation writes",
                    d.at
                ),
            })?;
            block.insert(key, v);
        }
    }
    Ok(blocks)
}

/// `map`'s keys in `order` (any other key after them).
fn ordered(map: Map<String, Value>, order: &[&str]) -> Map<String, Value> {
    let mut out: Map<String, Value> = order
        .iter()
        .filter_map(|k| map.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    for (k, v) in map {
        if !out.contains_key(&k) {
            out.insert(k, v);
        }
    }
    out
}

/// Translate the resolved `config` tree (plain JSON) for a run of `total_steps` steps.
pub(crate) fn translate(config: &Value, total_steps: u64) -> Result<Translation, TranslateError> {
    let c = Cfg::new(config)?;
    let b = basics(&c)?;
    let ds = ds_config(&c, &b, total_steps)?;
    let rows = copy_rows(&c)?;
    let jobs = job_configs(&c, &b, ds, ds_worker_config(&b, rows.dwc), rows.vllm)?;
    let drop_position_ids = c.bool(&format!("{RB}.comms.drop_position_ids"))?;
    let meta = forward_meta(&b, rows.meta);
    let entropy_coeff = c.f64(&format!("{A}.entropy_coeff"))?;
    let update_meta = update_meta(&c, &b, &meta, entropy_coeff)?;
    let gpus = |k: &str| c.f64_or(k, 1.0).unwrap_or(1.0);
    Ok(Translation {
        jobs,
        meta,
        update_meta,
        dropped_meta: Vec::new(),
        sampling_params: sampling_params(&c, &b)?,
        shape: BatchShape {
            prompts: b.prompts as usize,
            n: b.n as usize,
            mini_batch_prompts: b.mini as usize,
            ppo_epochs: b.epochs as usize,
            max_prompt_len: b.max_prompt as usize,
            max_response_len: b.max_response as usize,
        },
        zorro: b.zorro,
        colocate: b.colocate,
        use_kl_loss: c.bool(&format!("{A}.use_kl_loss"))?,
        drop_position_ids,
        norm_adv_by_std: c.bool_or("algorithm.norm_adv_by_std_in_grpo", true)?,
        n_gpus: gpus("trainer.n_gpus_per_node") * gpus("trainer.nnodes"),
    })
}

/// ds_config: the deepspeed block verbatim, merged with sizing, optimizer, scheduler, clip.
fn ds_config(c: &Cfg, b: &Basics, total_steps: u64) -> Result<Map<String, Value>, TranslateError> {
    let mut ds = match c.raw(&format!("{RB}.train.deepspeed")) {
        Some(Value::Object(m)) => m.clone(),
        Some(v) => {
            return Err(Cfg::err(&format!("{RB}.train.deepspeed"), "a mapping", v));
        }
        None => Map::new(),
    };
    ds.insert("train_batch_size".into(), json!(b.train_batch_size));
    ds.insert("train_micro_batch_size_per_gpu".into(), json!(b.micro));
    ds.insert(
        "gradient_accumulation_steps".into(),
        json!((b.train_batch_size / (b.micro * b.training_gpus.max(1))).max(1)),
    );
    let lr = c.f64(&format!("{A}.optim.lr"))?;
    ds.insert(
        "optimizer".into(),
        json!({"type": "AdamW", "params": {
            "lr": lr,
            "weight_decay": c.f64(&format!("{A}.optim.weight_decay"))?,
            "betas": c.value(&format!("{A}.optim.betas"))?,
            "eps": 1e-8,
        }}),
    );
    // verl's `actor.grad_clip` applies where `optim.clip_grad` is not set.
    let clip = match c.raw(&format!("{A}.optim.clip_grad")) {
        Some(_) => c.f64(&format!("{A}.optim.clip_grad"))?,
        None => c.f64_or(&format!("{A}.grad_clip"), 1.0)?,
    };
    if clip > 0.0 {
        ds.insert("gradient_clipping".into(), json!(clip));
    }
    if let Some(scheduler) = scheduler(c, b, total_steps, lr)? {
        ds.insert("scheduler".into(), scheduler);
    }
    if let Some(sp) = c.opt_u64(&format!("{A}.fsdp_config.ulysses_sequence_parallel_size"))? {
        ds.insert("sequence_parallel_size".into(), json!(sp));
    }
    Ok(ds)
}

/// The LR schedule over the run's optimizer steps: cosine, or a linear warm-up, or none.
fn scheduler(
    c: &Cfg,
    b: &Basics,
    total_steps: u64,
    lr: f64,
) -> Result<Option<Value>, TranslateError> {
    // verl overwrites `actor.optim.total_training_steps` with its own horizon before the
    // adapter reads it: `trainer.total_training_steps`, else the data loader's length.
    let horizon = c
        .opt_positive("trainer.total_training_steps")?
        .unwrap_or(total_steps)
        * b.epochs
        * b.prompts.div_ceil(b.mini);
    let warmup_ratio = c.f64(&format!("{A}.optim.lr_warmup_steps_ratio"))?;
    let warmup = (warmup_ratio * horizon as f64) as u64;
    let sched_type = c.string(&format!("{A}.optim.lr_scheduler_type"))?;
    Ok(if sched_type == "cosine" {
        Some(json!({"type": "WarmupCosineLR", "params": {
            "total_num_steps": horizon,
            "warmup_num_steps": warmup,
            "warmup_min_ratio": 0.0,
            "cos_min_ratio": c.f64(&format!("{A}.optim.min_lr_ratio"))?,
            "warmup_type": "linear",
        }}))
    } else if warmup > 0 {
        Some(json!({"type": "WarmupLR", "params": {
            "warmup_min_lr": 0.0,
            "warmup_max_lr": lr,
            "warmup_num_steps": warmup,
            "warmup_type": "linear",
        }}))
    } else {
        None
    })
}

/// ds_worker_config: the rows' model knobs always, their logits knobs with ZoRRo, and the
/// ZoRRo block computed from the sizes.
fn ds_worker_config(b: &Basics, mut dwc: Map<String, Value>) -> Map<String, Value> {
    if b.zorro {
        dwc.insert("zorro_train_enable".into(), json!(true));
        dwc.insert("response_len".into(), json!(b.max_response));
        dwc.insert("rollout_n".into(), json!(b.n));
        dwc.insert("temperature".into(), json!(b.temperature));
        dwc.insert("use_unpad".into(), json!(true));
    }
    ordered(dwc, &DWC_KEYS)
}

/// The JobConfigs, in `/initialize` order: sampling, log_prob (with log-prob GPUs), training.
fn job_configs(
    c: &Cfg,
    b: &Basics,
    ds: Map<String, Value>,
    dwc: Map<String, Value>,
    mut vllm: Map<String, Value>,
) -> Result<Vec<JobConfig>, TranslateError> {
    let base = |job_type: JobType| JobConfig::new(b.model.clone(), job_type, b.seed);
    let mut jobs = Vec::new();
    let mut sampling = base(JobType::Sampling);
    let max_model_len = c
        .raw(&format!("{R}.max_model_len"))
        .cloned()
        .unwrap_or(json!(b.max_prompt + b.max_response));
    vllm.insert("max_model_len".into(), max_model_len);
    sampling.vllm_config = Some(Value::Object(ordered(vllm, &VLLM_KEYS)));
    // The rollout block whole (its rows are leaves of it).
    sampling.arctic_inference_config = Some(c.value_or(&format!("{RB}.rollout"), json!({})));
    jobs.push(sampling);
    if b.log_prob_gpus > 0 {
        jobs.push(log_prob_job(base(JobType::LogProb), b, &ds, &dwc));
    }
    let mut training = base(JobType::Training);
    training.ds_config = Some(Value::Object(ds));
    training.ds_worker_config = Some(Value::Object(dwc));
    training.checkpoint_path = Some(c.string("trainer.default_local_dir")?);
    training.full_determinism = b.full_det;
    training.cuda_ipc = c.bool(&format!("{RB}.weight_sync.cuda_ipc"))?;
    training.low_memory = c.bool(&format!("{RB}.weight_sync.low_memory"))?;
    jobs.push(training);
    Ok(jobs)
}

/// A DeepSpeed log_prob job gets the training job's ds_config and ds_worker_config (they only
/// select DeepSpeed); its own engine settings travel in log_prob_config.
fn log_prob_job(
    mut lp: JobConfig,
    b: &Basics,
    ds: &Map<String, Value>,
    dwc: &Map<String, Value>,
) -> JobConfig {
    let mut zero = ds
        .get("zero_optimization")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(z) = zero.as_object_mut() {
        z.remove("offload_optimizer");
    }
    let mut lds = Map::new();
    lds.insert("train_micro_batch_size_per_gpu".into(), json!(b.micro));
    lds.insert("zero_optimization".into(), zero);
    if let Some(sp) = ds.get("sequence_parallel_size") {
        lds.insert("sequence_parallel_size".into(), sp.clone());
    }
    lp.ds_config = Some(Value::Object(ds.clone()));
    lp.ds_worker_config = Some(Value::Object(dwc.clone()));
    lp.log_prob_config = Some(Value::Object(lds));
    lp.full_determinism = b.full_det;
    lp
}

/// Per-call meta, as the adapter sends it: exactly these 14 keys on `/forward`, the rows'
/// and the sizes'.
fn forward_meta(b: &Basics, mut meta: Map<String, Value>) -> Map<String, Value> {
    meta.insert("zorro_train_enable".into(), json!(b.zorro));
    meta.insert("rollout_n".into(), json!(b.n));
    meta.insert("max_prompt_len".into(), json!(b.max_prompt));
    meta.insert("max_response_len".into(), json!(b.max_response));
    meta.insert("temperature".into(), json!(b.temperature));
    meta.insert("calculate_entropy".into(), json!(true));
    meta.insert("pad_token_id".into(), json!(PAD_ID));
    ordered(meta, &META_KEYS)
}

/// `/forward-backward`: the same 14 (entropy only when the actor computes it), the actor and
/// policy-loss configs, and the mini-batch's `global_batch_size`; the driver adds
/// `batch_num_tokens` (a 0-d I64 tensor) and `rollout_is_weights` per mini-batch.
fn update_meta(
    c: &Cfg,
    b: &Basics,
    meta: &Map<String, Value>,
    entropy_coeff: f64,
) -> Result<Map<String, Value>, TranslateError> {
    let actor = c.value_or(A, json!({}));
    let mut update_meta = meta.clone();
    update_meta.insert(
        "calculate_entropy".into(),
        json!(c.bool_or(&format!("{A}.calculate_entropy"), entropy_coeff != 0.0)?),
    );
    update_meta.insert("actor_config".into(), actor_config(c, b, &actor)?);
    update_meta.insert(
        "policy_loss_config".into(),
        actor.get("policy_loss").map(json_safe).unwrap_or(json!({})),
    );
    update_meta.insert("global_batch_size".into(), json!(b.train_batch_size));
    Ok(update_meta)
}

/// `meta.actor_config` as the adapter sends verl 0.7.1's `ActorConfig`: `vars()` of the
/// dataclass through `json.dumps(default=lambda o: None)`, so its nested configs (`optim`,
/// `fsdp_config`, `policy_loss`, `checkpoint`, ...) arrive as `null`, and with the two fields
/// verl's actor config interpolates from elsewhere (`use_remove_padding` from the model,
/// `rollout_n` from the rollout).
fn actor_config(c: &Cfg, b: &Basics, actor: &Value) -> Result<Value, TranslateError> {
    let mut out = Map::new();
    if let Some(m) = actor.as_object() {
        for (k, v) in m {
            let v = if v.is_object() {
                Value::Null
            } else {
                v.clone()
            };
            out.insert(k.clone(), v);
        }
    }
    out.insert(
        "use_remove_padding".into(),
        c.value("actor_rollout_ref.model.use_remove_padding")?,
    );
    out.insert("rollout_n".into(), json!(b.n));
    Ok(json_safe(&Value::Object(out)))
}

/// The adapter's defaults, overlaid by verl's rollout values. Nothing else: no `n` (the
/// driver sends each prompt `rollout.n` times, one sample a request, as verl repeats its
/// prompts before generating) and no `seed` (servers seed each request from their own seed,
/// the weights' version, the prompt and its repetition).
fn sampling_params(c: &Cfg, b: &Basics) -> Result<Map<String, Value>, TranslateError> {
    let mut sampling_params = Map::new();
    sampling_params.insert("temperature".into(), json!(b.temperature));
    sampling_params.insert(
        "top_p".into(),
        c.value_or(&format!("{R}.top_p"), json!(1.0)),
    );
    // verl's -1 ("off") goes through as is, as the adapter sends it.
    sampling_params.insert("top_k".into(), c.value_or(&format!("{R}.top_k"), json!(-1)));
    let max_model_len = c
        .raw(&format!("{R}.max_model_len"))
        .and_then(Value::as_u64)
        .unwrap_or(b.max_prompt + b.max_response);
    sampling_params.insert(
        "max_tokens".into(),
        json!(b
            .max_response
            .min(max_model_len.saturating_sub(b.max_prompt).max(1))),
    );
    sampling_params.insert(
        "logprobs".into(),
        match c.value(&format!("{R}.calculate_log_probs"))? {
            Value::Bool(true) => json!(0),
            _ => Value::Null,
        },
    );
    sampling_params.insert(
        "repetition_penalty".into(),
        c.value_or(&format!("{R}.repetition_penalty"), json!(1.0)),
    );
    Ok(sampling_params)
}

#[cfg(test)]
mod tests;
