//! The Arctic routes the mock serves: its [`Engine`] implementation (jobs, forward, step,
//! generate, weight sync, checkpoints, log-probs, weight digests).

use std::collections::HashMap;
use std::path::PathBuf;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Map, Value};

use super::loss::{prompt_token_len, response_view, unprocessable};
use super::schedule::{self, LrSchedule};
use super::state::{io_error, not_found, saved_checkpoints, MockJob, CHECKPOINT_FILE};
use super::{policy, MockEngine};
use crate::engine::{
    f32_tensor, Completion, Engine, EngineError, ForwardBackwardOutput, ForwardOutput,
    GenerateRequest, ModelBatch, StepOutput, Timed,
};
use crate::task::{ArithTask, CharTokenizer, EOS_ID};
use crate::wire::api::{JobConfig, JobType};
use crate::wire::digest::TensorDigest;
use crate::wire::Node;

fn opt_u64(req: &Value, key: &str, route: &str) -> Result<Option<u64>, EngineError> {
    match req.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            EngineError::unprocessable(format!(
                "{route}: {key} must be a non-negative integer, got {v}"
            ))
        }),
    }
}

fn opt_str<'a>(req: &'a Value, key: &str, route: &str) -> Result<Option<&'a str>, EngineError> {
    match req.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(EngineError::unprocessable(format!(
            "{route}: {key} must be a string, got {v}"
        ))),
    }
}

impl Engine for MockEngine {
    fn create_job(&self, job_id: u64, config: &JobConfig) -> Result<(), EngineError> {
        let schedule = if config.job_type == JobType::Training {
            LrSchedule::from_ds_config(config.ds_config.as_ref())
                .map_err(|e| EngineError::bad_request(e.to_string()))?
        } else {
            LrSchedule::Constant(schedule::DEFAULT_LR)
        };
        let zorro_init = config
            .ds_worker_config
            .as_ref()
            .and_then(|d| d.get("zorro_train_enable"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        self.jobs().insert(
            job_id,
            MockJob {
                job_type: config.job_type,
                config: config.clone(),
                version: 0,
                syncs: 0,
                occurrences: HashMap::new(),
                zorro_init,
                schedule,
                pending: None,
            },
        );
        Ok(())
    }

    fn destroy_job(&self, job_id: u64) {
        self.jobs().remove(&job_id);
    }

    fn forward(
        &self,
        job_id: u64,
        batch: &ModelBatch,
    ) -> Result<Timed<ForwardOutput>, EngineError> {
        let (version, zorro) = self.zorro(job_id, &batch.meta)?;
        let view = response_view(batch)?;
        let fwd = self.fwd_batch(batch, &view, version, zorro)?;
        let (metrics, avg_loss) = match batch.loss_fn.as_deref() {
            Some(loss_fn) => {
                let (m, l, _) = self.loss(batch, &view, version, loss_fn)?;
                (m, Some(l))
            }
            None => (Map::new(), None),
        };
        Ok(Timed {
            value: ForwardOutput {
                logprobs: fwd.logprobs,
                entropy: fwd.entropy,
                metrics,
                avg_loss,
            },
            sim_seconds: Some(self.cost.forward(&view.seqlens)),
        })
    }

    fn forward_backward(
        &self,
        job_id: u64,
        batch: &ModelBatch,
    ) -> Result<Timed<ForwardBackwardOutput>, EngineError> {
        let version = self.policy_version(job_id)?;
        let view = response_view(batch)?;
        let loss_fn = batch.loss_fn.as_deref().unwrap_or("grpo");
        let (metrics, loss, tokens) = self.loss(batch, &view, version, loss_fn)?;
        // 0.1.4's `meta.return_fwd_batch`: the forward pass's log-probs (and entropy), as
        // `/forward` would answer them under the same weights.
        let fwd_batch = if batch.returns_fwd_batch() {
            let (_, zorro) = self.zorro(job_id, &batch.meta)?;
            Some(self.fwd_batch(batch, &view, version, zorro)?)
        } else {
            None
        };
        {
            let mut jobs = self.jobs();
            let j = Self::job_mut(&mut jobs, job_id)?;
            let (l, t) = j.pending.unwrap_or((0.0, 0));
            j.pending = Some((l + loss.abs() * tokens as f64, t + tokens));
        }
        Ok(Timed {
            value: ForwardBackwardOutput {
                metrics,
                avg_loss: loss,
                fwd_batch,
            },
            sim_seconds: Some(self.cost.forward_backward(&view.seqlens)),
        })
    }

    fn step(
        &self,
        job_id: u64,
        learning_rate: Option<f64>,
    ) -> Result<Timed<StepOutput>, EngineError> {
        let mut jobs = self.jobs();
        let j = Self::job_mut(&mut jobs, job_id)?;
        // A step without gradients leaves a zero gradient norm, as DeepSpeed reports it;
        // otherwise the norm follows the accumulated loss, shrinking as the policy settles.
        let grad_norm = match j.pending.take() {
            None => 0.0,
            Some((loss_tokens, tokens)) => {
                let mean = loss_tokens / tokens.max(1) as f64;
                let jitter = policy::unit(policy::hash_words(&[self.seed, 0x6A, j.version]));
                (0.2 + 2.0 * mean) * (0.9 + 0.2 * jitter)
            }
        };
        j.version += 1;
        let last_lr = learning_rate.unwrap_or_else(|| j.schedule.after_steps(j.version));
        Ok(Timed {
            value: StepOutput {
                last_lr,
                grad_norm: Some(grad_norm),
                peak_memory_gb: None,
            },
            sim_seconds: Some(self.cost.optimizer_step()),
        })
    }

    fn generate(
        &self,
        job_id: u64,
        request: &GenerateRequest,
    ) -> Result<Timed<Vec<Completion>>, EngineError> {
        let sp = &request.sampling_params;
        let n = match sp.get("n") {
            None | Some(Value::Null) => 1,
            Some(v) => v.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
                unprocessable(format!(
                    "sampling_params.n must be a positive integer, got {v}"
                ))
            })?,
        };
        let max_tokens = match sp.get("max_tokens") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|&m| m >= 1).ok_or_else(|| {
                unprocessable(format!(
                    "sampling_params.max_tokens must be a positive integer, got {v}"
                ))
            })? as usize),
        };
        // Bounded so a typo in `n` cannot make the mock build billions of completions.
        const MAX_COMPLETIONS: u64 = 1 << 20;
        if (request.prompts.len() as u64).saturating_mul(n) > MAX_COMPLETIONS {
            return Err(unprocessable(format!(
                "{} prompts x n = {n} exceeds the mock's {MAX_COMPLETIONS} completions a request",
                request.prompts.len()
            )));
        }
        let user_seed = sp.get("seed").and_then(Value::as_u64).unwrap_or(0);
        let want_logprobs = match sp.get("logprobs") {
            None | Some(Value::Null) => false,
            Some(v) if v.as_u64().is_some() => true,
            Some(v) => {
                return Err(unprocessable(format!(
                    "sampling_params.logprobs must be null or a non-negative integer, got {v}"
                )))
            }
        };
        let mut jobs = self.jobs();
        let j = Self::job_mut(&mut jobs, job_id)?;
        let accuracy = self.script.reward.accuracy(j.syncs);
        let shape = &self.script.response;
        let mut out = Vec::with_capacity(request.prompts.len() * n as usize);
        let (mut prompt_tokens, mut generated) = (0u64, 0u64);
        for prompt in &request.prompts {
            let ph = policy::hash_text(prompt);
            let answer = ArithTask::solve(prompt);
            let prompt_len = prompt_token_len(prompt);
            for k in 0..n {
                let occ = j.occurrences.entry(ph).or_insert(0);
                let nth = *occ;
                *occ += 1;
                let mut rng = ChaCha8Rng::seed_from_u64(policy::hash_words(&[
                    self.seed, j.version, j.syncs, ph, nth, user_seed,
                ]));
                let text = match answer {
                    Some(a) if rng.random::<f64>() < accuracy => format!("#### {a}"),
                    Some(a) if rng.random::<bool>() => {
                        let d = rng.random_range(1..=9) * if rng.random::<bool>() { 1 } else { -1 };
                        format!("#### {}", a + d)
                    }
                    _ => {
                        let len = rng.random_range(shape.min_len..=shape.max_len);
                        const NOISE: &[u8] = b"0123456789 +-=";
                        (0..len)
                            .map(|_| NOISE[rng.random_range(0..NOISE.len())] as char)
                            .collect()
                    }
                };
                let mut ids = CharTokenizer::encode(&text)
                    .map_err(|e| EngineError::internal(e.to_string()))?;
                ids.push(EOS_ID);
                let (ids, finish) = match max_tokens {
                    Some(m) if ids.len() > m => (ids[..m].to_vec(), "length"),
                    _ => (ids, "stop"),
                };
                let text = CharTokenizer::decode(&ids);
                prompt_tokens += if k == 0 { prompt_len as u64 } else { 0 };
                generated += ids.len() as u64;
                // The sampler's policy is the version it was last synced to: the same
                // log-probabilities `/forward` gives for those tokens when the trainer holds
                // that version too.
                let logprobs = want_logprobs.then(|| {
                    ids.iter()
                        .enumerate()
                        .map(|(t, &tok)| {
                            policy::token_logprob(self.seed, tok, prompt_len + t, j.version)
                        })
                        .collect()
                });
                out.push(Completion {
                    generation_len: ids.len(),
                    text,
                    token_ids: ids,
                    finish_reason: finish.to_string(),
                    prompt_len,
                    prefix_cache_len: 0,
                    logprobs,
                });
            }
        }
        Ok(Timed {
            value: out,
            sim_seconds: Some(self.cost.generate(prompt_tokens, generated)),
        })
    }

    fn control_seconds(&self) -> Option<f64> {
        // A control call is a round trip and a state flip: a millisecond.
        Some(1e-3)
    }

    fn weight_sync(&self, source: u64, targets: &[u64]) -> Result<Timed<()>, EngineError> {
        let mut jobs = self.jobs();
        let (version, cuda_ipc) = {
            let s = jobs.get(&source).ok_or_else(|| not_found(source))?;
            if s.job_type != JobType::Training {
                return Err(EngineError::bad_request(format!(
                    "weight sync source {source} is not a training job"
                )));
            }
            (s.version, s.config.cuda_ipc)
        };
        for &t in targets {
            let j = Self::job_mut(&mut jobs, t)?;
            if j.job_type != JobType::Sampling {
                return Err(EngineError::bad_request(format!(
                    "weight sync target {t} is not a sampling job"
                )));
            }
            if j.version != version {
                j.version = version;
                j.syncs += 1;
                j.occurrences.clear();
            }
        }
        Ok(Timed {
            value: (),
            sim_seconds: Some(self.cost.weight_sync(cuda_ipc) * targets.len() as f64),
        })
    }

    fn save(&self, job_id: u64, request: &Value) -> Result<Value, EngineError> {
        let route = "/save";
        let (root, version, model_name) = self.checkpoint_root(job_id)?;
        let step = opt_u64(request, "step", route)?.unwrap_or(version);
        let dir = match opt_str(request, "path", route)? {
            Some(p) => PathBuf::from(p),
            None => {
                let name = match opt_str(request, "checkpoint_id", route)? {
                    Some(id) if !id.is_empty() && !id.contains(['/', '\\']) && id != ".." => {
                        id.to_string()
                    }
                    Some(id) => {
                        return Err(EngineError::unprocessable(format!(
                            "{route}: checkpoint_id {id:?} must be a plain folder name"
                        )))
                    }
                    None => format!("global_step_{step}"),
                };
                root.join(name)
            }
        };
        std::fs::create_dir_all(&dir).map_err(|e| io_error("create checkpoint folder", &dir, e))?;
        let state = json!({
            "model_name": model_name,
            "global_step": step,
            "version": version,
            "seed": self.seed,
            "checkpoint_type": request.get("checkpoint_type").cloned().unwrap_or(Value::Null),
        });
        let file = dir.join(CHECKPOINT_FILE);
        // Atomic, so a server killed mid-save leaves the previous checkpoint or this one.
        crate::fsx::write_atomic(&file, format!("{state:#}\n").as_bytes())
            .map_err(|e| EngineError::internal(format!("failed to write checkpoint: {e}")))?;
        let export_hf = request
            .get("export_hf")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let hf_path = if export_hf {
            let hf = dir.join("huggingface");
            std::fs::create_dir_all(&hf).map_err(|e| io_error("create folder", &hf, e))?;
            let cfg = hf.join("config.json");
            let shape = serde_json::to_value(self.cost.shape)
                .map_err(|e| EngineError::internal(format!("cannot encode model shape: {e}")))?;
            crate::fsx::write_atomic(&cfg, format!("{shape:#}\n").as_bytes())
                .map_err(|e| EngineError::internal(format!("failed to write: {e}")))?;
            Value::String(hf.display().to_string())
        } else {
            Value::Null
        };
        if let Some(limit) = opt_u64(request, "save_total_limit", route)?.filter(|&l| l > 0) {
            let saved = saved_checkpoints(&root);
            let excess = saved.len().saturating_sub(limit as usize);
            for (_, old) in saved.into_iter().take(excess).filter(|(_, d)| *d != dir) {
                std::fs::remove_dir_all(&old)
                    .map_err(|e| io_error("remove old checkpoint", &old, e))?;
            }
        }
        Ok(json!({"path": dir.display().to_string(), "hf_path": hf_path, "global_step": step}))
    }

    fn load_checkpoint(&self, job_id: u64, request: &Value) -> Result<Value, EngineError> {
        let route = "/load-checkpoint";
        let (root, _, _) = self.checkpoint_root(job_id)?;
        let dir = match (
            opt_str(request, "path", route)?,
            opt_u64(request, "step", route)?,
        ) {
            (Some(p), _) => PathBuf::from(p),
            (None, Some(step)) => root.join(format!("global_step_{step}")),
            (None, None) => saved_checkpoints(&root)
                .pop()
                .map(|(_, d)| d)
                .ok_or_else(|| {
                    EngineError::bad_request(format!(
                        "{route}: no checkpoint under {}",
                        root.display()
                    ))
                })?,
        };
        let file = dir.join(CHECKPOINT_FILE);
        let text = std::fs::read_to_string(&file).map_err(|e| {
            EngineError::bad_request(format!("{route}: cannot read {}: {e}", file.display()))
        })?;
        let state: Value = serde_json::from_str(&text).map_err(|e| {
            EngineError::bad_request(format!(
                "{route}: {} is not valid JSON: {e}",
                file.display()
            ))
        })?;
        let (Some(version), Some(step)) = (
            state.get("version").and_then(Value::as_u64),
            state.get("global_step").and_then(Value::as_u64),
        ) else {
            return Err(EngineError::bad_request(format!(
                "{route}: {} lacks version or global_step",
                file.display()
            )));
        };
        let mut jobs = self.jobs();
        let j = Self::job_mut(&mut jobs, job_id)?;
        j.version = version;
        j.pending = None;
        Ok(json!({"path": dir.display().to_string(), "global_step": step}))
    }

    fn weight_norm(&self, job_id: u64) -> Result<(f64, u64), EngineError> {
        let version = self.policy_version(job_id)?;
        let params = self.cost.shape.dense_params();
        // Weight decay and updates move the norm slowly and deterministically with the version.
        let norm = params.sqrt() * 0.02 * (1.0 + 0.002 * (version as f64).ln_1p());
        Ok((norm, params as u64))
    }

    /// The simulated weights of the version the job holds (`weights.rs`).
    fn weight_digest(&self, job_id: u64) -> Result<Vec<TensorDigest>, EngineError> {
        let version = self.policy_version(job_id)?;
        Ok(super::weights::manifest(
            &self.cost.shape,
            self.seed,
            version,
        ))
    }

    fn log_probs(&self, job_id: u64, request: &Value) -> Result<Timed<Node>, EngineError> {
        let version = self.policy_version(job_id)?;
        let strings = |key: &str| -> Result<Option<Vec<String>>, EngineError> {
            match request.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .map(Some)
                    .ok_or_else(|| unprocessable(format!("/log-probs: {key} must be strings"))),
                Some(v) => Err(unprocessable(format!(
                    "/log-probs: {key} must be a list, got {v}"
                ))),
            }
        };
        let prompts = strings("prompts")?.unwrap_or_default();
        let completions = strings("completions")?;
        if let Some(c) = &completions {
            if c.len() != prompts.len() {
                return Err(unprocessable(format!(
                    "/log-probs: {} completions for {} prompts",
                    c.len(),
                    prompts.len()
                )));
            }
        }
        let mut results = Vec::with_capacity(prompts.len());
        let mut tokens = Vec::new();
        for (i, prompt) in prompts.iter().enumerate() {
            // Scored text: the completion after its prompt, or the prompt itself.
            let (text, offset) = match &completions {
                Some(c) => (c[i].as_str(), prompt_token_len(prompt)),
                None => (prompt.as_str(), 0),
            };
            let ids = CharTokenizer::encode(text)
                .map_err(|e| unprocessable(format!("/log-probs: entry {i}: {e}")))?;
            let lp: Vec<f32> = ids
                .iter()
                .enumerate()
                .map(|(t, &tok)| policy::token_logprob(self.seed, tok, offset + t, version))
                .collect();
            tokens.push((offset + ids.len()) as u64);
            results.push(Node::Dict(vec![
                ("token_ids".into(), Node::Json(json!(ids))),
                (
                    "logprobs".into(),
                    Node::Tensor {
                        tensor: f32_tensor(vec![lp.len()], &lp),
                        scalar: false,
                    },
                ),
            ]));
        }
        let node = if results.is_empty() {
            Node::Json(json!([]))
        } else {
            Node::List(results)
        };
        Ok(Timed {
            value: node,
            sim_seconds: Some(self.cost.forward(&tokens)),
        })
    }
}
