//! The compute side of an Arctic-compatible server: the [`Engine`] trait and the types it
//! takes and returns. The HTTP surface (`server`) decodes each request into these types and
//! calls the engine; the scripted mock (`mock`) and the libtorch engine (`rlharness-torch`)
//! implement it.

use serde_json::{Map, Value};

use crate::wire::api::JobConfig;
use crate::wire::digest::TensorDigest;
use crate::wire::{dssst1, DType, Node, Tensor};

pub use crate::wire::runtime::{fingerprint_hex, CpuKernels, Numerics, Runtime};

/// An engine failure with the HTTP status the server answers (400, 404, 409, 422 or 500); its
/// detail is the text of whatever error caused it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{detail}")]
pub struct EngineError {
    pub status: u16,
    pub detail: String,
}

impl EngineError {
    pub fn bad_request(detail: impl std::fmt::Display) -> Self {
        Self {
            status: 400,
            detail: detail.to_string(),
        }
    }
    pub fn unprocessable(detail: impl std::fmt::Display) -> Self {
        Self {
            status: 422,
            detail: detail.to_string(),
        }
    }
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self {
            status: 500,
            detail: detail.to_string(),
        }
    }
}

/// A result with the duration the engine reports for it, if it models time (the mock does;
/// a real engine leaves it `None` and the driver measures wall time).
#[derive(Debug, Clone)]
pub struct Timed<T> {
    pub value: T,
    pub(crate) sim_seconds: Option<f64>,
}

impl<T> Timed<T> {
    pub fn untimed(value: T) -> Self {
        Self {
            value,
            sim_seconds: None,
        }
    }
}

/// The decoded body of `/forward` and `/forward-backward`.
#[derive(Debug, Clone)]
pub struct ModelBatch {
    /// `batch`: tensors in verl's padded layout (`input_ids`, `attention_mask`, `prompts`, ...).
    pub batch: Vec<(String, Tensor)>,
    /// `meta`: the flat per-call settings.
    pub meta: Map<String, Value>,
    /// `processing.post`.
    pub post: Vec<String>,
    /// `processing.loss_fn`; the server maps an ABSENT key to `grpo`, `null` to `None`.
    pub loss_fn: Option<String>,
}

impl ModelBatch {
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.batch.iter().find(|(k, _)| k == name).map(|(_, t)| t)
    }

    /// Whether `/forward-backward` must answer the forward pass's `batch` too
    /// (`meta.return_fwd_batch`; the server has refused a value that is not a flag).
    pub fn returns_fwd_batch(&self) -> bool {
        crate::processing::return_fwd_batch(&self.meta).unwrap_or(false)
    }
}

/// What `/forward` returns: `batch.logprobs [B,S]` (+ `entropy`), metrics and `avg_loss`.
#[derive(Debug, Clone)]
pub struct ForwardOutput {
    pub logprobs: Tensor,
    pub entropy: Option<Tensor>,
    pub metrics: Map<String, Value>,
    pub avg_loss: Option<f64>,
}

/// What `/forward-backward` returns: token-mean metrics (`actor/pg_loss`, ...) and `avg_loss`;
/// with `meta.return_fwd_batch` (Arctic-Platform 0.1.4, [`ModelBatch::returns_fwd_batch`]) also
/// the forward pass's per-token `batch`, in `/forward`'s layout (`fwd_batch`).
#[derive(Debug, Clone)]
pub struct ForwardBackwardOutput {
    pub metrics: Map<String, Value>,
    pub avg_loss: f64,
    /// The forward pass's log-probs `[B,S]` (and entropy when a post-processor asked for it),
    /// before the update; `None` unless the request asked for them.
    pub fwd_batch: Option<FwdBatch>,
}

/// The per-token outputs of a forward pass, as `/forward` answers them in `batch`.
#[derive(Debug, Clone)]
pub struct FwdBatch {
    pub logprobs: Tensor,
    pub entropy: Option<Tensor>,
}

/// What `/step` returns inside `metrics`.
#[derive(Debug, Clone)]
pub struct StepOutput {
    pub last_lr: f64,
    pub grad_norm: Option<f64>,
    /// The engine's peak memory since its previous `/step`, in GB (`peak_memory_gb`): the CPU
    /// torch engine's peak resident set. `None` where the engine does not measure it.
    pub peak_memory_gb: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompts: Vec<String>,
    /// `sampling_params` as sent (`n`, `temperature`, `top_p`, `max_tokens`, `seed`, ...).
    pub sampling_params: Map<String, Value>,
}

/// One entry of `/generate`'s `results`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Completion {
    pub text: String,
    pub token_ids: Vec<i64>,
    pub finish_reason: String,
    pub prompt_len: usize,
    pub generation_len: usize,
    pub prefix_cache_len: usize,
    /// Each generated token's log-probability under the sampler, when `sampling_params.logprobs`
    /// asked for it (absent otherwise, as the real server omits it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f32>>,
}

/// The compute side of an Arctic-compatible server. The server has already checked the job
/// exists and has the right type and state before calling. Calls may come from several
/// threads; engines synchronise internally.
pub trait Engine: Send + Sync + 'static {
    /// Called once per `/initialize` after the server's own checks.
    fn create_job(&self, job_id: u64, config: &JobConfig) -> Result<(), EngineError>;
    fn destroy_job(&self, job_id: u64);
    fn forward(&self, job_id: u64, batch: &ModelBatch)
        -> Result<Timed<ForwardOutput>, EngineError>;
    fn forward_backward(
        &self,
        job_id: u64,
        batch: &ModelBatch,
    ) -> Result<Timed<ForwardBackwardOutput>, EngineError>;
    fn step(
        &self,
        job_id: u64,
        learning_rate: Option<f64>,
    ) -> Result<Timed<StepOutput>, EngineError>;
    fn generate(
        &self,
        job_id: u64,
        request: &GenerateRequest,
    ) -> Result<Timed<Vec<Completion>>, EngineError>;
    /// Copy the training job's weights into each target sampling job.
    fn weight_sync(&self, source: u64, targets: &[u64]) -> Result<Timed<()>, EngineError>;
    /// `/save`: returns `{path, hf_path, global_step}`.
    fn save(&self, job_id: u64, request: &Value) -> Result<Value, EngineError>;
    /// `/load-checkpoint`: returns `{path, global_step}`.
    fn load_checkpoint(&self, job_id: u64, request: &Value) -> Result<Value, EngineError>;
    /// `/weight-norm`: `(norm, number of parameters)` of one job's weights.
    fn weight_norm(&self, job_id: u64) -> Result<(f64, u64), EngineError>;
    /// `/weight-digest` (an rlharness extension, `wire::digest`): the digest manifest of one
    /// job's weights as it holds them. The default is the answer of an engine that reports
    /// none: the 404 a server without the route gives.
    fn weight_digest(&self, job_id: u64) -> Result<Vec<TensorDigest>, EngineError> {
        Err(EngineError {
            status: 404,
            detail: format!("/weight-digest: this engine reports no weight digests (job {job_id})"),
        })
    }
    /// A job went to sleep (`asleep`) or woke (`/sleep-*`, `/wake-*`, `/operation`); called
    /// after the server's state machine moved. The default does nothing.
    fn sleep_changed(&self, job_id: u64, asleep: bool) {
        let _ = (job_id, asleep);
    }
    /// The simulated duration of a call that computes nothing (health, sleep, wake, status).
    /// `None` for a real engine: the driver then measures wall time.
    fn control_seconds(&self) -> Option<f64> {
        None
    }
    /// Queue a `/generate` call instead of running it, for an engine that batches concurrent
    /// calls; `None` (the default): the server runs [`Engine::generate`] on a blocking thread.
    /// Called on the server's async thread, so it must not block: it checks the request and
    /// queues it. A queued call holds no thread while it waits; only the call that finds
    /// nobody serving the queue gets one, to serve it ([`QueuedGenerate::serve`]).
    fn generate_queued(
        &self,
        job_id: u64,
        request: &GenerateRequest,
    ) -> Option<Result<QueuedGenerate, EngineError>> {
        let _ = (job_id, request);
        None
    }
    /// Serve the generate queue `queue` until it is empty (see [`QueuedGenerate::serve`]).
    fn serve_generate_queue(&self, queue: usize) {
        let _ = queue;
    }
    /// `/log-probs` on a log_prob job: the `results` subtree of the answer. The verl adapter
    /// never calls it, so engines without a reference model may keep this refusal.
    fn log_probs(&self, job_id: u64, request: &Value) -> Result<Timed<Node>, EngineError> {
        let _ = request;
        Err(EngineError::bad_request(format!(
            "/log-probs: this engine does not serve log-probs (job {job_id})"
        )))
    }
}

/// The answer of a queued `/generate` call, once a batch holding it has run.
pub type GenerateAnswer = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Timed<Vec<Completion>>, EngineError>> + Send>,
>;

/// A `/generate` call an engine queued ([`Engine::generate_queued`]).
pub struct QueuedGenerate {
    /// Resolves to the call's answer once a batch holding it has run.
    pub answer: GenerateAnswer,
    /// `Some(queue)`: this call found nobody serving that queue and took the job; the server
    /// must run [`Engine::serve_generate_queue`] with it on a blocking thread, or no queued
    /// call is ever answered.
    pub serve: Option<usize>,
}

/// Used by engines to build the `[B,S]` f32 tensors they return.
pub fn f32_tensor(shape: Vec<usize>, values: &[f32]) -> Tensor {
    Tensor {
        dtype: DType::F32,
        shape,
        data: dssst1::le_bytes(values, |v| v.to_le_bytes()),
    }
}
