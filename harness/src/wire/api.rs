//! Arctic RL HTTP API types (JSON side). DSSST1 bodies are `wire::Node` trees.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Header through which a simulating backend (the mock) reports how long an operation would
/// have taken on the modelled device. A driver prefers it to wall time when present.
pub const SIM_DURATION_HEADER: &str = "x-rlharness-sim-seconds";

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

/// `{"detail": ...}` error body used by every route.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub detail: Value,
}

/// Parse a JSON body the way a Python peer writes it (`json.loads`): strict JSON plus `NaN`,
/// `Infinity` and `-Infinity` (an aiohttp client can send them), which become
/// `{"$float": ...}` objects (see [`super::pyjson`]), never `null`.
pub fn parse_json_lenient(bytes: &[u8]) -> Result<Value, String> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Ok(v),
        Err(strict) => {
            let text = std::str::from_utf8(bytes).map_err(|_| strict.to_string())?;
            super::pyjson::parse(text).map_err(|_| strict.to_string())
        }
    }
}
