//! Arctic RL HTTP API types (JSON side). DSSST1 bodies are `wire::Node` trees.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Header through which a simulating backend (the mock) reports how long an operation would
/// have taken on the modelled device. A driver prefers it to wall time when present.
pub const SIM_DURATION_HEADER: &str = "x-rlharness-sim-seconds";

/// Header through which the harness's own server (the mock, the torch backend) says why it
/// refused a request whose body, as the real server's, says nothing useful (a plain-text 500,
/// FastAPI's `Field required` 422). No client reads it; the recording proxy writes it to
/// `wire.jsonl` as `server_error`.
pub const ERROR_REASON_HEADER: &str = "x-rlharness-error";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum JobType {
    Training,
    Sampling,
    LogProb,
}

impl JobType {
    pub fn as_str(self) -> &'static str {
        match self {
            JobType::Training => "training",
            JobType::Sampling => "sampling",
            JobType::LogProb => "log_prob",
        }
    }
}

fn default_job_type() -> JobType {
    JobType::Training
}
fn default_seed() -> i64 {
    42
}

/// Body of `POST /initialize`. Unknown top-level keys are kept in `extra`: the real server
/// drops them silently, the harness records and flags them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobConfig {
    pub model_name: String,
    #[serde(default = "default_job_type")]
    pub job_type: JobType,
    #[serde(default)]
    pub ds_config: Option<Value>,
    #[serde(default)]
    pub training_config: Option<Value>,
    #[serde(default)]
    pub log_prob_config: Option<Value>,
    #[serde(default)]
    pub ds_worker_config: Option<Value>,
    #[serde(default)]
    pub vllm_config: Option<Value>,
    #[serde(default)]
    pub checkpoint_path: Option<String>,
    #[serde(default)]
    pub arctic_inference_config: Option<Value>,
    #[serde(default)]
    pub full_determinism: bool,
    #[serde(default = "default_seed")]
    pub seed: i64,
    #[serde(default)]
    pub cuda_ipc: bool,
    #[serde(default)]
    pub low_memory: bool,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn non_empty(v: &Option<Value>) -> Option<&Value> {
    v.as_ref().filter(|v| match v {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        _ => true,
    })
}

impl JobConfig {
    /// A JobConfig with only its model, type and seed set (every optional block absent, every
    /// flag off), as a client starts one before it fills in what the job needs.
    pub fn new(model_name: impl Into<String>, job_type: JobType, seed: i64) -> JobConfig {
        JobConfig {
            model_name: model_name.into(),
            job_type,
            ds_config: None,
            training_config: None,
            log_prob_config: None,
            ds_worker_config: None,
            vllm_config: None,
            checkpoint_path: None,
            arctic_inference_config: None,
            full_determinism: false,
            seed,
            cuda_ipc: false,
            low_memory: false,
            extra: serde_json::Map::new(),
        }
    }

    /// Whether the job runs a DeepSpeed engine: training, and log_prob when it has a
    /// `ds_config` (a log_prob job without one runs on vLLM).
    pub(crate) fn is_deepspeed(&self) -> bool {
        match self.job_type {
            JobType::Training => true,
            JobType::LogProb => non_empty(&self.ds_config).is_some(),
            JobType::Sampling => false,
        }
    }

    /// The `/initialize` body as the real client's `to_onprem(job_type)` writes it: a field only
    /// where it applies and is set, ABSENT otherwise (never `null` or a default `false`):
    /// - every job: `model_name`, `job_type`, `seed`;
    /// - DeepSpeed jobs: `full_determinism`; `ds_config` and `ds_worker_config` when non-empty;
    /// - training: `checkpoint_path` when set; `cuda_ipc` and `low_memory` always;
    /// - a DeepSpeed log_prob job: `log_prob_config` when set;
    /// - vLLM jobs (sampling, log_prob without DeepSpeed): `arctic_inference_config` when
    ///   non-empty, `vllm_config` when set.
    ///
    /// `training_config` (legacy) is never written. Keys in `extra` follow, as sent.
    pub fn to_onprem(&self) -> Value {
        let mut m = Map::new();
        m.insert("model_name".into(), Value::from(self.model_name.clone()));
        m.insert("job_type".into(), Value::from(self.job_type.as_str()));
        let deepspeed = self.is_deepspeed();
        if deepspeed {
            if let Some(v) = non_empty(&self.ds_config) {
                m.insert("ds_config".into(), v.clone());
            }
            if self.job_type == JobType::LogProb {
                if let Some(v) = non_empty(&self.log_prob_config) {
                    m.insert("log_prob_config".into(), v.clone());
                }
            }
            if let Some(v) = non_empty(&self.ds_worker_config) {
                m.insert("ds_worker_config".into(), v.clone());
            }
        } else {
            if let Some(v) = self.vllm_config.as_ref().filter(|v| !v.is_null()) {
                m.insert("vllm_config".into(), v.clone());
            }
            if let Some(v) = non_empty(&self.arctic_inference_config) {
                m.insert("arctic_inference_config".into(), v.clone());
            }
        }
        if self.job_type == JobType::Training {
            if let Some(p) = &self.checkpoint_path {
                m.insert("checkpoint_path".into(), Value::from(p.clone()));
            }
        }
        if deepspeed {
            m.insert(
                "full_determinism".into(),
                Value::Bool(self.full_determinism),
            );
        }
        m.insert("seed".into(), Value::from(self.seed));
        if self.job_type == JobType::Training {
            m.insert("cuda_ipc".into(), Value::Bool(self.cuda_ipc));
            m.insert("low_memory".into(), Value::Bool(self.low_memory));
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

/// Parse a JSON body the way a Python peer writes it (`json.loads`): strict JSON plus `NaN`,
/// `Infinity` and `-Infinity` (an aiohttp client can send them), which become
/// `{"$float": ...}` objects (see [`super::pyjson`]), never `null`.
/// When both readings fail, the error is the strict parser's.
pub fn parse_json_lenient(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Ok(v),
        Err(strict) => {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return Err(strict);
            };
            super::pyjson::parse(text).map_err(|_| strict)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(job_type: JobType) -> JobConfig {
        serde_json::from_value(json!({"model_name": "m", "job_type": job_type.as_str()})).unwrap()
    }

    #[test]
    fn to_onprem_writes_only_the_keys_that_apply() {
        let mut s = job(JobType::Sampling);
        s.vllm_config = Some(json!({"max_model_len": 32}));
        s.arctic_inference_config = Some(json!({}));
        assert_eq!(
            s.to_onprem(),
            json!({"model_name": "m", "job_type": "sampling", "vllm_config": {"max_model_len": 32}, "seed": 42})
        );
        let mut t = job(JobType::Training);
        t.ds_config = Some(json!({"train_batch_size": 8}));
        t.checkpoint_path = Some("ckpt".into());
        let keys: Vec<String> = t.to_onprem().as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "model_name",
                "job_type",
                "ds_config",
                "checkpoint_path",
                "full_determinism",
                "seed",
                "cuda_ipc",
                "low_memory"
            ]
        );
        let mut lp = job(JobType::LogProb);
        lp.ds_config = Some(json!({"train_batch_size": 8}));
        lp.log_prob_config = Some(json!({"train_micro_batch_size_per_gpu": 1}));
        let v = lp.to_onprem();
        assert_eq!(v["log_prob_config"]["train_micro_batch_size_per_gpu"], 1);
        assert_eq!(v["full_determinism"], false);
        assert!(v.get("cuda_ipc").is_none() && v.get("vllm_config").is_none());
    }

    #[test]
    fn python_json_bodies_keep_nan_apart_from_null() {
        let v = parse_json_lenient(br#"{"a": NaN, "b": null}"#).unwrap();
        assert!(super::super::pyjson::as_f64(&v["a"]).unwrap().is_nan());
        assert!(v["b"].is_null());
    }
}
