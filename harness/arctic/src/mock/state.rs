//! The engine's state: [`MockEngine`] and its jobs, the policy version and sampler accuracy
//! they carry, and where checkpoints go.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde_json::{Map, Value};

use super::cost::CostModel;
#[cfg(test)]
use super::loss::prompt_token_len;
#[cfg(test)]
use super::policy;
use super::schedule::LrSchedule;
use super::{MockScript, MockScriptError};
use crate::engine::{fingerprint_hex, EngineError, Numerics};
use crate::wire::api::{JobConfig, JobType};

#[derive(Debug)]
pub(super) struct MockJob {
    pub(super) job_type: JobType,
    pub(super) config: JobConfig,
    /// Policy version: optimizer steps taken (training), last synced version (sampling),
    /// always 0 for the reference model (log_prob).
    pub(super) version: u64,
    /// Sampling: syncs that delivered a version it did not hold.
    pub(super) syncs: u64,
    /// Sampling: how often each prompt was answered since the last effective sync, so repeated
    /// rollouts of one prompt differ but a rerun repeats them.
    pub(super) occurrences: HashMap<u64, u64>,
    /// Training: ZoRRo installed at init (`ds_worker_config.zorro_train_enable`).
    pub(super) zorro_init: bool,
    pub(super) schedule: LrSchedule,
    /// Training: loss and token count accumulated by forward-backward since the last step.
    pub(super) pending: Option<(f64, u64)>,
}

/// The scripted engine. Cheap to share (`Arc`), synchronised inside.
pub struct MockEngine {
    pub(super) script: MockScript,
    pub(super) seed: u64,
    pub(super) cost: CostModel,
    pub(super) jobs: Mutex<HashMap<u64, MockJob>>,
}

pub(super) fn not_found(id: u64) -> EngineError {
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
    pub fn numerics() -> Numerics {
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
        Numerics {
            fingerprint: fingerprint_hex(&h.finalize()),
            cpu_kernels: None,
            simulated_time: true,
        }
    }

    pub(super) fn jobs(&self) -> MutexGuard<'_, HashMap<u64, MockJob>> {
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

    pub(super) fn zorro(
        &self,
        job_id: u64,
        meta: &Map<String, Value>,
    ) -> Result<(u64, bool), EngineError> {
        let jobs = self.jobs();
        let j = jobs.get(&job_id).ok_or_else(|| not_found(job_id))?;
        let per_call = meta
            .get("zorro_train_enable")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok((j.version, j.zorro_init || per_call))
    }
}

impl MockEngine {
    pub(super) fn job_mut(
        jobs: &mut HashMap<u64, MockJob>,
        id: u64,
    ) -> Result<&mut MockJob, EngineError> {
        jobs.get_mut(&id).ok_or_else(|| not_found(id))
    }

    pub(super) fn checkpoint_root(
        &self,
        job_id: u64,
    ) -> Result<(PathBuf, u64, String), EngineError> {
        let jobs = self.jobs();
        let j = jobs.get(&job_id).ok_or_else(|| not_found(job_id))?;
        let root = j.config.checkpoint_path.clone().ok_or_else(|| {
            EngineError::bad_request(format!("job {job_id} has no checkpoint_path"))
        })?;
        Ok((PathBuf::from(root), j.version, j.config.model_name.clone()))
    }
}

pub(super) const CHECKPOINT_FILE: &str = "mock_checkpoint.json";

pub(super) fn io_error(what: &str, path: &Path, e: std::io::Error) -> EngineError {
    EngineError::internal(format!("failed to {what} {}: {e}", path.display()))
}

/// Checkpoint folders this engine wrote under `root`, oldest first by global step.
pub(super) fn saved_checkpoints(root: &Path) -> Vec<(u64, PathBuf)> {
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
