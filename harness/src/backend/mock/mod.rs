//! The scripted mock engine: deterministic per seed, sensitive to the pipeline (the sampler's
//! accuracy follows the number of weight syncs that brought it new weights; log-probs follow
//! the policy version), and simulating time with a cost model instead of sleeping.

pub(crate) mod cost;
pub(crate) mod faults;
pub mod grpo;
pub mod policy;
pub(crate) mod schedule;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::backend::server::frame::{tensor_f64, tensor_i64};
use crate::backend::server::{self, ServerOptions};
use crate::backend::{
    f32_tensor, Completion, Engine, EngineError, ForwardBackwardOutput, ForwardOutput,
    GenerateRequest, ModelBatch, StepOutput, Timed,
};
use crate::metrics::{promised_peak_flops, ModelSpec};
use crate::task::{ArithTask, CharTokenizer, EOS_ID};
use crate::wire::api::{JobConfig, JobType};
use crate::wire::Node;

use cost::CostModel;
use grpo::{LossSettings, SeqTokens};
use schedule::LrSchedule;

/// How the sampler's accuracy moves from `start` to `end` over the syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CurveShape {
    /// Straight line, flat after `syncs_to_plateau`.
    #[default]
    Linear,
    /// Fast early gains: `1 - exp(-3 x)` of the way at `x = syncs / syncs_to_plateau`.
    Exp,
}

/// The probability that the sampler answers an arith prompt correctly, as a function of the
/// number of weight syncs that brought it new weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RewardCurve {
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) syncs_to_plateau: u64,
    pub(crate) shape: CurveShape,
    /// Added to the whole curve (a scenario lowers it with `backend.reward.offset=-0.1`).
    pub(crate) offset: f64,
}

impl Default for RewardCurve {
    fn default() -> Self {
        Self {
            start: 0.1,
            end: 0.9,
            syncs_to_plateau: 20,
            shape: CurveShape::Linear,
            offset: 0.0,
        }
    }
}

impl RewardCurve {
    /// Accuracy after `syncs` effective syncs, clamped to `[0, 1]`.
    pub(crate) fn accuracy(&self, syncs: u64) -> f64 {
        let x = syncs as f64 / self.syncs_to_plateau.max(1) as f64;
        let progress = match self.shape {
            CurveShape::Linear => x.min(1.0),
            CurveShape::Exp => 1.0 - (-3.0 * x).exp(),
        };
        (self.start + (self.end - self.start) * progress + self.offset).clamp(0.0, 1.0)
    }
}

/// The fraction of the device peak that compute-bound work reaches, by batch tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EfficiencyCurve {
    /// Efficiency of a tiny batch.
    pub(crate) start: f64,
    /// Efficiency approached by large batches.
    pub(crate) end: f64,
    /// Tokens at which about 63% of the way from `start` to `end` is covered.
    pub(crate) ramp_tokens: f64,
    /// Multiplies everything (a scenario lowers the MFU 10% with `backend.efficiency.scale=0.9`).
    pub(crate) scale: f64,
    /// Efficiency of autoregressive decoding in `/generate`.
    pub(crate) decode: f64,
}

impl Default for EfficiencyCurve {
    fn default() -> Self {
        // Dense bf16 training of sub-2B models on one H200 lands at 0.3-0.5 MFU (the
        // Arctic verl README reports 0.26 for 1.7B and 0.49 for 0.6B).
        Self {
            start: 0.3,
            end: 0.45,
            ramp_tokens: 4096.0,
            scale: 1.0,
            decode: 0.05,
        }
    }
}

/// Lengths of wrong answers and noise responses, in characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponseShape {
    pub(crate) min_len: usize,
    pub(crate) max_len: usize,
}

impl Default for ResponseShape {
    fn default() -> Self {
        Self {
            min_len: 2,
            max_len: 12,
        }
    }
}

fn default_device() -> String {
    "h200".into()
}
fn default_model() -> ModelSpec {
    ModelSpec::Preset("qwen3-0.6b".into())
}

/// The mock's script, from the scenario's `backend: {kind: mock, ...}` block. Every field has
/// a default, so `backend: {kind: mock}` is a complete script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockScript {
    /// Overrides the scenario seed for the mock's randomness.
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub reward: RewardCurve,
    #[serde(default)]
    pub efficiency: EfficiencyCurve,
    /// The simulated device (its promised peak and bandwidth time every operation).
    #[serde(default = "default_device")]
    pub device: String,
    /// The simulated model (its FLOPs per token time every operation).
    #[serde(default = "default_model")]
    pub model: ModelSpec,
    #[serde(default)]
    pub response: ResponseShape,
    /// Scripted faults (see `faults`): none by default, and then absent from the plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<faults::FaultSpec>,
}

impl Default for MockScript {
    fn default() -> Self {
        Self {
            seed: None,
            reward: RewardCurve::default(),
            efficiency: EfficiencyCurve::default(),
            device: default_device(),
            model: default_model(),
            response: ResponseShape::default(),
            faults: Vec::new(),
        }
    }
}

/// A script the mock cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid mock script: {0}")]
pub struct MockScriptError(pub(crate) String);

impl MockScript {
    /// The cost model the script describes, or what is wrong with it.
    pub(crate) fn cost_model(&self) -> Result<CostModel, MockScriptError> {
        let err = |m: String| Err(MockScriptError(m));
        let Some(shape) = self.model.shape() else {
            return err(format!(
                "model: unknown preset {:?} (known: qwen3-0.6b, qwen3-1.7b)",
                self.model
            ));
        };
        let (Some(peak), Some(bw)) = (
            promised_peak_flops(&self.device),
            cost::hbm_bandwidth(&self.device),
        ) else {
            return err(format!(
                "device: {:?} has no known peak (h100, h200, h800, a100, b200)",
                self.device
            ));
        };
        let e = &self.efficiency;
        for (k, v) in [
            ("efficiency.start", e.start),
            ("efficiency.end", e.end),
            ("efficiency.scale", e.scale),
            ("efficiency.decode", e.decode),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return err(format!("{k} must be in (0, 1], got {v}"));
            }
        }
        if !(e.ramp_tokens.is_finite() && e.ramp_tokens > 0.0) {
            return err(format!(
                "efficiency.ramp_tokens must be positive, got {}",
                e.ramp_tokens
            ));
        }
        let r = &self.reward;
        for (k, v) in [
            ("reward.start", r.start),
            ("reward.end", r.end),
            ("reward.offset", r.offset),
        ] {
            if !v.is_finite() {
                return err(format!("{k} must be finite, got {v}"));
            }
        }
        if r.syncs_to_plateau == 0 {
            return err("reward.syncs_to_plateau must be at least 1".into());
        }
        faults::validate(&self.faults).map_err(MockScriptError)?;
        if self.response.min_len == 0 || self.response.min_len > self.response.max_len {
            return err(format!(
                "response: need 1 <= min_len <= max_len, got {}..{}",
                self.response.min_len, self.response.max_len
            ));
        }
        Ok(CostModel {
            shape,
            peak_flops: peak,
            bandwidth: bw,
            eff_start: e.start,
            eff_end: e.end,
            ramp_tokens: e.ramp_tokens,
            scale: e.scale,
            decode_eff: e.decode,
        })
    }
}

#[derive(Debug)]
struct MockJob {
    job_type: JobType,
    config: JobConfig,
    /// Policy version: optimizer steps taken (training), last synced version (sampling),
    /// always 0 for the reference model (log_prob).
    version: u64,
    /// Sampling: syncs that delivered a version it did not hold.
    syncs: u64,
    /// Sampling: how often each prompt was answered since the last effective sync, so repeated
    /// rollouts of one prompt differ but a rerun repeats them.
    occurrences: HashMap<u64, u64>,
    /// Training: ZoRRo installed at init (`ds_worker_config.zorro_train_enable`).
    zorro_init: bool,
    schedule: LrSchedule,
    /// Training: loss and token count accumulated by forward-backward since the last step.
    pending: Option<(f64, u64)>,
}

/// The scripted engine. Cheap to share (`Arc`), synchronised inside.
pub struct MockEngine {
    script: MockScript,
    seed: u64,
    cost: CostModel,
    jobs: Mutex<HashMap<u64, MockJob>>,
}

fn not_found(id: u64) -> EngineError {
    EngineError {
        status: 404,
        detail: format!("job {id} not found"),
    }
}

impl MockEngine {
    /// `seed` is the scenario seed; the script's own `seed`, when set, wins.
    pub fn new(script: MockScript, seed: u64) -> Result<Self, MockScriptError> {
        let cost = script.cost_model()?;
        Ok(Self {
            seed: script.seed.unwrap_or(seed),
            script,
            cost,
            jobs: Mutex::new(HashMap::new()),
        })
    }

    #[cfg(test)]
    pub(crate) fn cost_model(&self) -> &CostModel {
        &self.cost
    }

    /// The mock's numbers are a function of its seed and of the platform's math library
    /// (`exp`, `ln`, `cos`, ... of the simulated curves, losses and costs), whose last bits
    /// may differ between implementations. The fingerprint hashes those functions' results
    /// over a probe set, so a golden made on another libm is judged by its bands only.
    pub(crate) fn numerics() -> super::Numerics {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"mock v1");
        for i in 1..=512u32 {
            let x = f64::from(i) * 0.037 - 9.5;
            let y = f64::from(i) * 1.37;
            for v in [
                x.exp(),
                y.ln(),
                x.abs().ln_1p(),
                x.cos(),
                y.sqrt(),
                x.powi(2),
                (x * 0.01).tanh(),
            ] {
                h.update(v.to_bits().to_le_bytes());
            }
        }
        super::Numerics {
            fingerprint: super::fingerprint_hex(&h.finalize()),
            cpu_kernels: None,
            simulated_time: true,
        }
    }

    fn jobs(&self) -> MutexGuard<'_, HashMap<u64, MockJob>> {
        crate::util::lock(&self.jobs)
    }

    /// The policy version a job holds (what a weight sync copies).
    pub(crate) fn policy_version(&self, job_id: u64) -> Result<u64, EngineError> {
        self.jobs()
            .get(&job_id)
            .map(|j| j.version)
            .ok_or_else(|| not_found(job_id))
    }

    /// The sampler's accuracy now: the reward curve at its effective sync count.
    #[cfg(test)]
    pub(crate) fn sampling_accuracy(&self, job_id: u64) -> Result<f64, EngineError> {
        let jobs = self.jobs();
        let j = jobs.get(&job_id).ok_or_else(|| not_found(job_id))?;
        Ok(self.script.reward.accuracy(j.syncs))
    }

    /// The sampler-side view of log-probs: log p(response token t) under the sampling job's
    /// weights, for a response that follows `prompt`. Equal to the trainer's `/forward`
    /// values only when both hold the same version.
    #[cfg(test)]
    pub(crate) fn sampler_logprobs(
        &self,
        job_id: u64,
        prompt: &str,
        response_ids: &[i64],
    ) -> Result<Vec<f32>, EngineError> {
        let version = self.policy_version(job_id)?;
        let p = prompt_token_len(prompt);
        Ok(response_ids
            .iter()
            .enumerate()
            .map(|(t, &tok)| policy::token_logprob(self.seed, tok, p + t, version))
            .collect())
    }

    fn zorro(&self, job_id: u64, meta: &Map<String, Value>) -> Result<(u64, bool), EngineError> {
        let jobs = self.jobs();
        let j = jobs.get(&job_id).ok_or_else(|| not_found(job_id))?;
        let per_call = meta
            .get("zorro_train_enable")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok((j.version, j.zorro_init || per_call))
    }
}

fn prompt_token_len(prompt: &str) -> usize {
    CharTokenizer::encode(prompt)
        .map(|t| t.len())
        .unwrap_or_else(|_| prompt.chars().count())
}

/// The response tokens of a batch, read once: per row the (column, token id, position) of
/// each response token the attention mask keeps.
struct ResponseView {
    b: usize,
    s: usize,
    p: usize,
    rows: Vec<Vec<(usize, i64, usize)>>,
    seqlens: Vec<u64>,
}

fn unprocessable(e: String) -> EngineError {
    EngineError::unprocessable(e)
}

fn response_view(batch: &ModelBatch) -> Result<ResponseView, EngineError> {
    let need = |n: &str| {
        batch
            .tensor(n)
            .ok_or_else(|| EngineError::unprocessable(format!("missing tensor batch.{n}")))
    };
    let ids_t = need("input_ids")?;
    let (b, s) = match ids_t.shape[..] {
        [b, s] => (b, s),
        _ => {
            return Err(unprocessable(format!(
                "batch.input_ids must be 2-D, got shape {:?}",
                ids_t.shape
            )))
        }
    };
    let ids = tensor_i64(ids_t, "batch.input_ids").map_err(unprocessable)?;
    let mask =
        tensor_i64(need("attention_mask")?, "batch.attention_mask").map_err(unprocessable)?;
    let p = need("prompts")?.shape.get(1).copied().unwrap_or(0);
    if ids.len() != b * s || mask.len() != b * s || p > s {
        return Err(unprocessable(format!(
            "batch.input_ids, attention_mask and prompts disagree on [B,S] = [{b}, {s}], P = {p}"
        )));
    }
    let mut rows = Vec::with_capacity(b);
    let mut seqlens = Vec::with_capacity(b);
    for r in 0..b {
        let m = &mask[r * s..(r + 1) * s];
        let prompt_valid = m[..p].iter().filter(|&&v| v != 0).count();
        let mut row = Vec::new();
        let mut pos = prompt_valid;
        for (t, &keep) in m[p..].iter().enumerate() {
            if keep != 0 {
                row.push((p + t, ids[r * s + p + t], pos));
                pos += 1;
            }
        }
        seqlens.push(m.iter().filter(|&&v| v != 0).count() as u64);
        rows.push(row);
    }
    Ok(ResponseView {
        b,
        s,
        p,
        rows,
        seqlens,
    })
}

fn float_rows(batch: &ModelBatch, name: &str) -> Result<Option<Vec<f64>>, EngineError> {
    batch
        .tensor(name)
        .map(|t| tensor_f64(t, &format!("batch.{name}")).map_err(unprocessable))
        .transpose()
}

fn wants_entropy(batch: &ModelBatch) -> bool {
    batch
        .post
        .iter()
        .any(|p| p == "compute_entropy_and_logprobs" || p == "compute_entropy")
}

impl MockEngine {
    /// Loss metrics of a batch under the job's current weights (`/forward` with a loss and
    /// `/forward-backward`).
    fn loss(
        &self,
        batch: &ModelBatch,
        view: &ResponseView,
        version: u64,
        loss_fn: &str,
    ) -> Result<(Map<String, Value>, f64, u64), EngineError> {
        let mask_name = if batch.tensor("loss_mask").is_some() {
            "loss_mask"
        } else {
            "response_mask"
        };
        let mask = float_rows(batch, mask_name)?.ok_or_else(|| {
            unprocessable(format!(
                "loss_fn {loss_fn:?} needs batch.response_mask or batch.loss_mask"
            ))
        })?;
        let settings =
            LossSettings::from_meta(&batch.meta, view.s - view.p).map_err(unprocessable)?;
        let is_policy = loss_fn == "grpo" || loss_fn == "verl_grpo";
        let (old, adv) = if is_policy {
            let get = |n: &str| {
                float_rows(batch, n)?
                    .ok_or_else(|| unprocessable(format!("loss_fn {loss_fn:?} needs batch.{n}")))
            };
            (get("old_log_probs")?, get("advantages")?)
        } else {
            (Vec::new(), Vec::new())
        };
        let ref_lp = float_rows(batch, "ref_log_prob")?;
        let mut seqs = Vec::with_capacity(view.b);
        let mut tokens = 0u64;
        for (r, row) in view.rows.iter().enumerate() {
            let mut q = SeqTokens::default();
            let mut refs = Vec::new();
            for &(col, tok, pos) in row {
                let i = r * view.s + col;
                if mask[i] == 0.0 {
                    continue;
                }
                tokens += 1;
                q.logp
                    .push(policy::token_logprob(self.seed, tok, pos, version) as f64);
                q.entropy
                    .push(policy::token_entropy(self.seed, pos, version) as f64);
                if is_policy {
                    q.old_logp.push(old[i]);
                    q.advantages.push(adv[i]);
                }
                if let Some(rl) = &ref_lp {
                    refs.push(rl[i]);
                }
            }
            if ref_lp.is_some() {
                q.ref_logp = Some(refs);
            }
            seqs.push(q);
        }
        let (metrics, loss) = if is_policy {
            grpo::policy_loss(&seqs, &settings, wants_entropy(batch))
        } else {
            grpo::sft_loss(&seqs, &settings)
        };
        Ok((metrics, loss, tokens))
    }

    fn job_mut(jobs: &mut HashMap<u64, MockJob>, id: u64) -> Result<&mut MockJob, EngineError> {
        jobs.get_mut(&id).ok_or_else(|| not_found(id))
    }

    fn checkpoint_root(&self, job_id: u64) -> Result<(PathBuf, u64, String), EngineError> {
        let jobs = self.jobs();
        let j = jobs.get(&job_id).ok_or_else(|| not_found(job_id))?;
        let root = j.config.checkpoint_path.clone().ok_or_else(|| {
            EngineError::bad_request(format!("job {job_id} has no checkpoint_path"))
        })?;
        Ok((PathBuf::from(root), j.version, j.config.model_name.clone()))
    }
}

const CHECKPOINT_FILE: &str = "mock_checkpoint.json";

fn io_error(what: &str, path: &Path, e: std::io::Error) -> EngineError {
    EngineError::internal(format!("failed to {what} {}: {e}", path.display()))
}

/// Checkpoint folders this engine wrote under `root`, oldest first by global step.
fn saved_checkpoints(root: &Path) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root) {
        for entry in rd.flatten() {
            let dir = entry.path();
            let file = dir.join(CHECKPOINT_FILE);
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            if let Some(step) = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("global_step").and_then(Value::as_u64))
            {
                out.push((step, dir));
            }
        }
    }
    out.sort();
    out
}

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
                .map_err(EngineError::bad_request)?
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
        if !zorro && view.p == 0 {
            return Err(unprocessable(
                "batch.prompts has width 0: without ZoRRo log p(response token t) sits at column P-1+t".into(),
            ));
        }
        let fill = if zorro {
            0.0
        } else {
            match batch.meta.get("pad_token_id") {
                None | Some(Value::Null) => 0.0,
                Some(v) => v.as_f64().ok_or_else(|| {
                    unprocessable(format!("meta.pad_token_id must be a number, got {v}"))
                })? as f32,
            }
        };
        let mut lp = vec![fill; view.b * view.s];
        let mut ent = vec![fill; view.b * view.s];
        for (r, row) in view.rows.iter().enumerate() {
            for &(col, tok, pos) in row {
                let out_col = if zorro { col } else { col - 1 };
                lp[r * view.s + out_col] = policy::token_logprob(self.seed, tok, pos, version);
                ent[r * view.s + out_col] = policy::token_entropy(self.seed, pos, version);
            }
        }
        let shape = vec![view.b, view.s];
        let (metrics, avg_loss) = match batch.loss_fn.as_deref() {
            Some(loss_fn) => {
                let (m, l, _) = self.loss(batch, &view, version, loss_fn)?;
                (m, Some(l))
            }
            None => (Map::new(), None),
        };
        Ok(Timed {
            value: ForwardOutput {
                logprobs: f32_tensor(shape.clone(), &lp),
                entropy: wants_entropy(batch).then(|| f32_tensor(shape, &ent)),
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
                let mut ids = CharTokenizer::encode(&text).map_err(EngineError::internal)?;
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

/// Serve the mock standalone (`rlharness serve mock`) until Ctrl-C.
pub async fn serve_mock_standalone(
    host: &str,
    port: u16,
    script: MockScript,
    seed: u64,
) -> std::io::Result<()> {
    let script_faults = script.faults.clone();
    let engine = MockEngine::new(script, seed)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = server::bind(&format!("{host}:{port}"))
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("failed to bind {host}:{port}: {e}")))?;
    let addr = listener.local_addr()?;
    let seed = engine.seed;
    let (router, handle) = server::router(Arc::new(engine), ServerOptions::default());
    let router = faults::inject(router, handle, &script_faults, seed);
    outln!("mock Arctic server listening on http://{addr}");
    server::serve(listener, router, async {
        // If the signal handler cannot be installed, serve until the process is killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
    .await
}

#[cfg(test)]
mod tests;
