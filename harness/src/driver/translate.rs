//! The Arctic adapter's translation of a verl-style config into JobConfigs and per-call `meta`,
//! following every row of the knob reference (`arctic-knobs.md`). The driver sends exactly
//! this; the propagation check compares it with what the server consumes.

use serde_json::{json, Map, Value};

use crate::wire::api::{JobConfig, JobType};

/// Read a dotted path from a JSON tree.
pub(crate) fn lookup<'a>(tree: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = tree;
    for part in path.split('.') {
        cur = cur.as_object()?.get(part)?;
    }
    Some(cur)
}

#[derive(Debug, thiserror::Error)]
#[error("config key `{key}`: {message}")]
pub(crate) struct TranslateError {
    pub(crate) key: String,
    pub(crate) message: String,
}

/// Typed access to the resolved config tree with errors that name the key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cfg<'a>(pub(crate) &'a Value);

impl<'a> Cfg<'a> {
    pub(crate) fn raw(&self, path: &str) -> Option<&'a Value> {
        lookup(self.0, path).filter(|v| !v.is_null())
    }
    fn err(path: &str, expected: &str, v: &Value) -> TranslateError {
        TranslateError {
            key: path.to_string(),
            message: format!("expected {expected}, found {v}"),
        }
    }
    pub(crate) fn f64_or(&self, path: &str, default: f64) -> Result<f64, TranslateError> {
        match self.raw(path) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| Self::err(path, "a number", v)),
        }
    }
    pub(crate) fn u64_or(&self, path: &str, default: u64) -> Result<u64, TranslateError> {
        match self.raw(path) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| Self::err(path, "a non-negative integer", v)),
        }
    }
    pub(crate) fn opt_u64(&self, path: &str) -> Result<Option<u64>, TranslateError> {
        match self.raw(path) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| Self::err(path, "a non-negative integer", v)),
        }
    }
    /// A step count where verl writes `-1` or `null` for "unset".
    pub(crate) fn opt_positive(&self, path: &str) -> Result<Option<u64>, TranslateError> {
        match self.raw(path) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(|n| u64::try_from(n).ok().filter(|&n| n > 0))
                .ok_or_else(|| Self::err(path, "an integer", v)),
        }
    }
    pub(crate) fn bool_or(&self, path: &str, default: bool) -> Result<bool, TranslateError> {
        match self.raw(path) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| Self::err(path, "true or false", v)),
        }
    }
    pub(crate) fn str_or(&self, path: &str, default: &str) -> Result<String, TranslateError> {
        match self.raw(path) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(Self::err(path, "a string", v)),
        }
    }
    pub(crate) fn value_or(&self, path: &str, default: Value) -> Value {
        self.raw(path).cloned().unwrap_or(default)
    }
}

/// Everything the driver derives from the config once, at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Translation {
    /// In creation order: sampling, log_prob (when `log_prob_gpus > 0`), training.
    pub(crate) jobs: Vec<JobConfig>,
    /// The `meta` of every `/forward`: the adapter's 14 keys.
    pub(crate) meta: Map<String, Value>,
    /// The `meta` of every `/forward-backward` before its per-mini-batch tensors: the 14 keys
    /// (with the actor's `calculate_entropy`), `actor_config`, `policy_loss_config`,
    /// `global_batch_size`.
    pub(crate) update_meta: Map<String, Value>,
    /// `meta` keys a planted bug drops (the per-mini-batch ones included).
    pub(crate) dropped_meta: Vec<String>,
    /// `sampling_params` of every `/generate`: exactly the adapter's keys (`temperature`,
    /// `top_p`, `top_k`, `max_tokens`, `logprobs`, `repetition_penalty`).
    pub(crate) sampling_params: Map<String, Value>,
    pub(crate) shape: BatchShape,
    pub(crate) zorro: bool,
    pub(crate) colocate: bool,
    pub(crate) use_kl_loss: bool,
    pub(crate) drop_position_ids: bool,
    pub(crate) norm_adv_by_std: bool,
}

/// Batch sizing of one training step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BatchShape {
    /// Prompts per step (`data.train_batch_size`).
    pub(crate) prompts: usize,
    /// Rollouts per prompt (`actor_rollout_ref.rollout.n`).
    pub(crate) n: usize,
    /// Prompts per PPO mini-batch (`actor.ppo_mini_batch_size`).
    pub(crate) mini_batch_prompts: usize,
    pub(crate) ppo_epochs: usize,
    pub(crate) max_prompt_len: usize,
    pub(crate) max_response_len: usize,
}

impl BatchShape {
    pub(crate) fn mini_batches(&self) -> usize {
        self.prompts.div_ceil(self.mini_batch_prompts).max(1)
    }
    /// forward-backward + step pairs per training step.
    #[cfg(test)]
    pub(crate) fn updates_per_step(&self) -> usize {
        self.ppo_epochs * self.mini_batches()
    }
}

const A: &str = "actor_rollout_ref.actor";
const R: &str = "actor_rollout_ref.rollout";
const RB: &str = "remote_backend";

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
    seed: Value,
    full_det: bool,
    /// Sequences per optimizer step: `mini * n`.
    train_batch_size: u64,
    max_token_len: Value,
}

fn basics(c: &Cfg) -> Result<Basics, TranslateError> {
    let model = c.str_or("actor_rollout_ref.model.path", "")?;
    if model.is_empty() {
        return Err(TranslateError {
            key: "actor_rollout_ref.model.path".into(),
            message: "required (the model every job loads)".into(),
        });
    }
    let n = c.u64_or(&format!("{R}.n"), 1)?.max(1);
    let prompts = c.u64_or("data.train_batch_size", 1)?.max(1);
    let mini = c
        .u64_or(&format!("{A}.ppo_mini_batch_size"), prompts)?
        .max(1);
    Ok(Basics {
        model,
        n,
        prompts,
        mini,
        micro: c
            .opt_u64(&format!("{A}.ppo_micro_batch_size_per_gpu"))?
            .unwrap_or(1)
            .max(1),
        epochs: c.u64_or(&format!("{A}.ppo_epochs"), 1)?.max(1),
        max_prompt: c.u64_or("data.max_prompt_length", 512)?,
        max_response: c.u64_or("data.max_response_length", 512)?,
        training_gpus: c.u64_or(&format!("{RB}.training_gpus"), 1)?,
        log_prob_gpus: c.u64_or(&format!("{RB}.log_prob_gpus"), 0)?,
        zorro: c.bool_or(&format!("{RB}.train.zorro_train.enable"), false)?,
        colocate: c.bool_or(&format!("{RB}.colocate"), true)?,
        temperature: c.f64_or(&format!("{R}.temperature"), 1.0)?,
        seed: c.value_or(&format!("{RB}.train.determinism.seed"), json!(42)),
        full_det: c.bool_or(&format!("{RB}.train.determinism.full"), false)?,
        train_batch_size: mini * n,
        max_token_len: c.value_or(&format!("{A}.ppo_max_token_len_per_gpu"), json!(16384)),
    })
}

/// Translate the resolved `config` tree (plain JSON) for a run of `total_steps` steps.
pub(crate) fn translate(config: &Value, total_steps: u64) -> Result<Translation, TranslateError> {
    let c = Cfg(config);
    let b = basics(&c)?;
    let ds = ds_config(&c, &b, total_steps)?;
    let dwc = ds_worker_config(&c, &b);
    let jobs = job_configs(&c, &b, ds, dwc)?;
    let drop_position_ids = c.bool_or(&format!("{RB}.comms.drop_position_ids"), true)?;
    let meta = forward_meta(&c, &b, drop_position_ids);
    let entropy_coeff = c.f64_or(&format!("{A}.entropy_coeff"), 0.0)?;
    let update_meta = update_meta(&c, &b, &meta, entropy_coeff)?;
    Ok(Translation {
        jobs,
        meta,
        update_meta,
        dropped_meta: Vec::new(),
        sampling_params: sampling_params(&c, &b),
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
        use_kl_loss: c.bool_or(&format!("{A}.use_kl_loss"), false)?,
        drop_position_ids,
        norm_adv_by_std: c.bool_or("algorithm.norm_adv_by_std_in_grpo", true)?,
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
    let lr = c.f64_or(&format!("{A}.optim.lr"), 1e-6)?;
    ds.insert(
        "optimizer".into(),
        json!({"type": "AdamW", "params": {
            "lr": lr,
            "weight_decay": c.f64_or(&format!("{A}.optim.weight_decay"), 0.01)?,
            "betas": c.value_or(&format!("{A}.optim.betas"), json!([0.9, 0.999])),
            "eps": 1e-8,
        }}),
    );
    let clip = match c.raw(&format!("{A}.optim.clip_grad")) {
        Some(_) => c.f64_or(&format!("{A}.optim.clip_grad"), 1.0)?,
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
    let warmup_ratio = c.f64_or(&format!("{A}.optim.lr_warmup_steps_ratio"), 0.0)?;
    let warmup = (warmup_ratio * horizon as f64) as u64;
    let sched_type = c.str_or(&format!("{A}.optim.lr_scheduler_type"), "constant")?;
    Ok(if sched_type == "cosine" {
        Some(json!({"type": "WarmupCosineLR", "params": {
            "total_num_steps": horizon,
            "warmup_num_steps": warmup,
            "warmup_min_ratio": 0.0,
            "cos_min_ratio": c.f64_or(&format!("{A}.optim.min_lr_ratio"), 0.0)?,
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

/// The `remote_backend.train.logits.*` knob `k`, or its default.
fn logits(c: &Cfg, k: &str, default: Value) -> Value {
    c.value_or(&format!("{RB}.train.logits.{k}"), default)
}

/// ds_worker_config: model knobs always; ZoRRo and logits keys with ZoRRo.
fn ds_worker_config(c: &Cfg, b: &Basics) -> Map<String, Value> {
    let mut dwc = Map::new();
    dwc.insert(
        "attn_implementation".into(),
        c.value_or(
            "actor_rollout_ref.model.override_config.attn_implementation",
            json!("flash_attention_2"),
        ),
    );
    dwc.insert(
        "use_liger".into(),
        c.value_or("actor_rollout_ref.model.use_liger", json!(false)),
    );
    dwc.insert(
        "enable_gradient_checkpointing".into(),
        c.value_or(
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            json!(true),
        ),
    );
    if b.zorro {
        dwc.insert("zorro_train_enable".into(), json!(true));
        dwc.insert("response_len".into(), json!(b.max_response));
        dwc.insert("max_token_len".into(), b.max_token_len.clone());
        dwc.insert("rollout_n".into(), json!(b.n));
        dwc.insert("temperature".into(), json!(b.temperature));
        dwc.insert("use_unpad".into(), json!(true));
        for (key, knob, default) in [
            ("logits_optimization", "optimization", json!("none")),
            (
                "logits_optimization_peak_mem_size_in_gib",
                "optimization_peak_mem_size_in_gib",
                json!(4),
            ),
            ("logits_compute_in_fp32", "compute_in_fp32", json!(false)),
            (
                "logits_compute_from_fp32_inputs",
                "compute_from_fp32_inputs",
                json!(false),
            ),
        ] {
            dwc.insert(key.into(), logits(c, knob, default));
        }
    }
    dwc
}

/// vllm_config of the sampling job.
fn vllm_config(c: &Cfg, b: &Basics) -> Map<String, Value> {
    let mut vllm = Map::new();
    vllm.insert(
        "tensor_parallel_size".into(),
        c.value_or(&format!("{RB}.sampling_tp_size"), json!(1)),
    );
    vllm.insert(
        "max_model_len".into(),
        c.raw(&format!("{R}.max_model_len"))
            .cloned()
            .unwrap_or(json!(b.max_prompt + b.max_response)),
    );
    for k in [
        "gpu_memory_utilization",
        "max_num_seqs",
        "enforce_eager",
        "enable_chunked_prefill",
        "quantization",
    ] {
        // Written only when set: `to_onprem` leaves out an unset quantization.
        if let Some(v) = c.raw(&format!("{R}.{k}")) {
            vllm.insert(k.into(), v.clone());
        }
    }
    vllm
}

/// The JobConfigs, in `/initialize` order: sampling, log_prob (with log-prob GPUs), training.
fn job_configs(
    c: &Cfg,
    b: &Basics,
    ds: Map<String, Value>,
    dwc: Map<String, Value>,
) -> Result<Vec<JobConfig>, TranslateError> {
    let base = |job_type: JobType| {
        JobConfig::new(b.model.clone(), job_type, b.seed.as_i64().unwrap_or(42))
    };
    let mut jobs = Vec::new();
    let mut sampling = base(JobType::Sampling);
    sampling.vllm_config = Some(Value::Object(vllm_config(c, b)));
    sampling.arctic_inference_config = Some(c.value_or(&format!("{RB}.rollout"), json!({})));
    jobs.push(sampling);
    if b.log_prob_gpus > 0 {
        // A DeepSpeed log_prob job gets the training job's ds_config and ds_worker_config
        // (they only select DeepSpeed); its own engine settings travel in log_prob_config.
        let mut lp = base(JobType::LogProb);
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
        jobs.push(lp);
    }
    let mut training = base(JobType::Training);
    training.ds_config = Some(Value::Object(ds));
    training.ds_worker_config = Some(Value::Object(dwc));
    training.checkpoint_path = Some(c.str_or("trainer.default_local_dir", "checkpoints")?);
    training.full_determinism = b.full_det;
    training.cuda_ipc = c.bool_or(&format!("{RB}.weight_sync.cuda_ipc"), false)?;
    training.low_memory = c.bool_or(&format!("{RB}.weight_sync.low_memory"), false)?;
    jobs.push(training);
    Ok(jobs)
}

/// Per-call meta, as the adapter sends it: exactly these 14 keys on `/forward`.
fn forward_meta(c: &Cfg, b: &Basics, drop_position_ids: bool) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("zorro_train_enable".into(), json!(b.zorro));
    meta.insert(
        "zorro_train_max_rollouts".into(),
        c.value_or(&format!("{RB}.train.zorro_train.max_rollouts"), json!(b.n)),
    );
    meta.insert(
        "load_balancer".into(),
        c.value_or(&format!("{RB}.train.load_balancer"), json!(true)),
    );
    meta.insert("rollout_n".into(), json!(b.n));
    meta.insert("max_prompt_len".into(), json!(b.max_prompt));
    meta.insert("max_response_len".into(), json!(b.max_response));
    meta.insert("max_token_len_per_gpu".into(), b.max_token_len.clone());
    meta.insert("temperature".into(), json!(b.temperature));
    meta.insert("calculate_entropy".into(), json!(true));
    meta.insert("pad_token_id".into(), json!(crate::task::PAD_ID));
    meta.insert("drop_position_ids".into(), json!(drop_position_ids));
    meta.insert(
        "logits_optimization".into(),
        logits(c, "optimization", json!("none")),
    );
    meta.insert(
        "logits_optimization_peak_mem_size_in_gib".into(),
        logits(c, "optimization_peak_mem_size_in_gib", json!(4)),
    );
    meta.insert(
        "logits_compute_in_fp32".into(),
        logits(c, "compute_in_fp32", json!(false)),
    );
    meta
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
    update_meta.insert("actor_config".into(), actor_config(c, b, &actor));
    update_meta.insert(
        "policy_loss_config".into(),
        actor
            .get("policy_loss")
            .map(crate::wire::pyjson::json_safe)
            .unwrap_or(json!({})),
    );
    update_meta.insert("global_batch_size".into(), json!(b.train_batch_size));
    Ok(update_meta)
}

/// `meta.actor_config` as the adapter sends verl 0.7.1's `ActorConfig`: `vars()` of the
/// dataclass through `json.dumps(default=lambda o: None)`, so its nested configs (`optim`,
/// `fsdp_config`, `policy_loss`, `checkpoint`, ...) arrive as `null`, and with the two fields
/// verl's actor config interpolates from elsewhere (`use_remove_padding` from the model,
/// `rollout_n` from the rollout).
fn actor_config(c: &Cfg, b: &Basics, actor: &Value) -> Value {
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
        c.value_or("actor_rollout_ref.model.use_remove_padding", json!(false)),
    );
    out.insert("rollout_n".into(), json!(b.n));
    crate::wire::pyjson::json_safe(&Value::Object(out))
}

/// The adapter's defaults, overlaid by verl's rollout values. Nothing else: no `n` (the
/// driver sends each prompt `rollout.n` times, one sample a request, as verl repeats its
/// prompts before generating) and no `seed` (servers seed each request from their own seed,
/// the weights' version, the prompt and its repetition).
fn sampling_params(c: &Cfg, b: &Basics) -> Map<String, Value> {
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
        match c.raw(&format!("{R}.calculate_log_probs")) {
            Some(Value::Bool(true)) => json!(0),
            _ => Value::Null,
        },
    );
    sampling_params.insert(
        "repetition_penalty".into(),
        c.value_or(&format!("{R}.repetition_penalty"), json!(1.0)),
    );
    sampling_params
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked expectation of the knob reference: GSM8K recipe, Qwen3-1.7B, ZoRRo on.
    #[test]
    fn worked_expectation_of_the_knob_reference() {
        let cfg = json!({
            "data": {"train_batch_size": 32, "max_prompt_length": 1024, "max_response_length": 1024},
            "actor_rollout_ref": {
                "model": {"path": "Qwen/Qwen3-1.7B"},
                "actor": {"ppo_mini_batch_size": 32, "ppo_micro_batch_size_per_gpu": 8,
                          "ppo_max_token_len_per_gpu": 16384, "ppo_epochs": 1,
                          "optim": {"lr": 1e-6, "betas": [0.9, 0.95], "lr_warmup_steps_ratio": 0.05}},
                "rollout": {"n": 8, "temperature": 1.0}
            },
            "remote_backend": {"colocate": true, "training_gpus": 1, "log_prob_gpus": 0,
                "weight_sync": {"cuda_ipc": true},
                "train": {"zorro_train": {"enable": true, "max_rollouts": 8},
                          "logits": {"optimization": "memory"},
                          "deepspeed": {"zero_optimization": {"stage": 2}}}}
        });
        let t = translate(&cfg, 100).unwrap();
        assert_eq!(t.jobs.len(), 2, "no log_prob job with log_prob_gpus = 0");
        assert_eq!(t.jobs[0].job_type, JobType::Sampling);
        let train = &t.jobs[1];
        let ds = train.ds_config.as_ref().unwrap();
        assert_eq!(ds["train_batch_size"], 256);
        assert_eq!(ds["train_micro_batch_size_per_gpu"], 8);
        assert_eq!(ds["gradient_accumulation_steps"], 32);
        assert_eq!(ds["optimizer"]["params"]["lr"], 1e-6);
        assert_eq!(ds["zero_optimization"]["stage"], 2);
        assert_eq!(ds["scheduler"]["type"], "WarmupLR");
        let dwc = train.ds_worker_config.as_ref().unwrap();
        assert_eq!(dwc["zorro_train_enable"], true);
        assert_eq!(dwc["response_len"], 1024);
        assert_eq!(dwc["max_token_len"], 16384);
        assert_eq!(dwc["rollout_n"], 8);
        assert_eq!(dwc["temperature"], 1.0);
        assert_eq!(dwc["use_unpad"], true);
        assert_eq!(dwc["logits_optimization"], "memory");
        assert!(train.cuda_ipc);
        assert_eq!(t.shape.updates_per_step(), 1);
        assert_eq!(t.update_meta["global_batch_size"], 256);
    }

    /// The adapter's `sampling_params`: its defaults overlaid by verl's values, and nothing
    /// more (no `n`: each prompt is sent `rollout.n` times; no `seed`).
    #[test]
    fn sampling_params_are_the_adapters_keys() {
        let cfg = json!({"data": {"max_prompt_length": 12, "max_response_length": 8},
            "actor_rollout_ref": {"model": {"path": "m"},
            "actor": {"ppo_mini_batch_size": 2}, "rollout": {"n": 4, "temperature": 0.7}}});
        let t = translate(&cfg, 1).unwrap();
        assert_eq!(
            Value::Object(t.sampling_params.clone()),
            json!({"temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_tokens": 8,
                   "logprobs": null, "repetition_penalty": 1.0})
        );
    }

    /// The adapter's `meta`: exactly 14 keys on `/forward`; on `/forward-backward` those plus
    /// `actor_config`, `policy_loss_config`, `global_batch_size` (the driver adds the
    /// per-mini-batch `batch_num_tokens` and `rollout_is_weights`).
    #[test]
    fn meta_has_the_adapters_keys_per_route() {
        let cfg = json!({"actor_rollout_ref": {"model": {"path": "m"},
            "actor": {"ppo_mini_batch_size": 2, "entropy_coeff": 0.0}, "rollout": {"n": 4}}});
        let t = translate(&cfg, 1).unwrap();
        let keys: Vec<&str> = t.meta.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
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
            ]
        );
        let extra: Vec<&str> = t
            .update_meta
            .keys()
            .map(String::as_str)
            .filter(|k| !t.meta.contains_key(*k))
            .collect();
        assert_eq!(
            extra,
            ["actor_config", "policy_loss_config", "global_batch_size"]
        );
        assert_eq!(t.update_meta["global_batch_size"], 8);
        assert_eq!(t.update_meta["calculate_entropy"], false);
        assert_eq!(t.meta["calculate_entropy"], true);
    }

    /// `to_onprem` writes no null or false extras: the sampling job has no DeepSpeed keys,
    /// an unset quantization is absent, a DeepSpeed log_prob job gets the training job's
    /// `ds_config` and its own settings in `log_prob_config`.
    #[test]
    fn job_configs_carry_only_the_keys_the_real_client_writes() {
        let cfg = json!({"actor_rollout_ref": {"model": {"path": "m"},
            "rollout": {"quantization": null, "gpu_memory_utilization": 0.5}},
            "remote_backend": {"log_prob_gpus": 1}});
        let t = translate(&cfg, 1).unwrap();
        let s = t.jobs[0].to_onprem();
        // An empty arctic_inference_config (no rollout block) is not written either.
        assert_eq!(
            s.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["model_name", "job_type", "vllm_config", "seed"]
        );
        assert!(s["vllm_config"].get("quantization").is_none());
        let lp = t.jobs[1].to_onprem();
        assert_eq!(lp["ds_config"], t.jobs[2].to_onprem()["ds_config"]);
        assert_eq!(lp["log_prob_config"]["train_micro_batch_size_per_gpu"], 1);
        let train = t.jobs[2].to_onprem();
        for absent in [
            "vllm_config",
            "arctic_inference_config",
            "log_prob_config",
            "training_config",
        ] {
            assert!(train.get(absent).is_none(), "{absent}");
        }
        assert_eq!(train["cuda_ipc"], false);
    }

    #[test]
    fn without_zorro_the_logits_knobs_travel_only_in_meta() {
        let cfg = json!({
            "actor_rollout_ref": {"model": {"path": "m"}},
            "remote_backend": {"log_prob_gpus": 1, "train": {"logits": {"compute_in_fp32": true}}}
        });
        let t = translate(&cfg, 5).unwrap();
        let kinds: Vec<_> = t.jobs.iter().map(|j| j.job_type).collect();
        assert_eq!(
            kinds,
            vec![JobType::Sampling, JobType::LogProb, JobType::Training]
        );
        let dwc = t.jobs[2].ds_worker_config.as_ref().unwrap();
        assert!(dwc.get("logits_compute_in_fp32").is_none());
        assert_eq!(t.meta["logits_compute_in_fp32"], true);
        let err = translate(&json!({"data": {"train_batch_size": "x"}, "actor_rollout_ref": {"model": {"path": "m"}}}), 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("data.train_batch_size"), "{err}");
    }
}
