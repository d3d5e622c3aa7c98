//! The libtorch engine (feature `torch`; without it this crate is empty and its executable a
//! stub that says how to build the real one): a real model behind the Arctic API. Each job holds
//! its own copy of the weights, as on the real server: the training job (model + AdamW),
//! the sampling job (a separate copy, refreshed only by weight sync) and the log_prob job
//! (the reference copy). Every job starts from the same "pretrained" weights: the cached warm
//! start for the tiny arith model, or seeded random weights for the Qwen3 shapes.
//!
//! Threading: calls may arrive from several threads. Each job sits behind its own mutex;
//! torch's global generator (model init, CUDA sampling draws) behind one more. On the CPU a
//! sampling call draws from a stream of its own seed on the host and holds no lock while it
//! samples, so concurrent `/generate` calls use every core and a run is still bit-identical
//! for the same seed and thread count, whatever order the calls arrive in. Calls that write
//! weights (`step`, weight sync, checkpoint load) wait for running samplers on the weight
//! gate.
//!
//! The engine runs in its own process, the `rlharness-torch` executable (`src/main.rs`), so
//! that `rlharness` itself never loads libtorch (docs/architecture.md, "The torch backend's
//! process").
#![cfg(feature = "torch")]

pub mod batch;
pub mod convert;
pub mod cuda_graph;
pub mod grpo;
pub mod head;
pub mod layout;
pub mod loss;
pub mod model;
pub mod numerics;
pub mod optim;
pub mod sample;
pub mod settings;
pub mod warm_start;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::{json, Map, Value};
use tch::{Device, Kind, Tensor};

use self::batch::{place, response_logprobs, Padded};
use self::layout::{
    device_name, EngineLayout, JobPlacement, LayoutRecord, SleepRecord, SyncRecord,
};
use self::loss::{grpo_micro_loss, AggMode, AggTotals, LossSums, Sum};
use self::model::{Decoder, DecoderConfig};
use self::optim::{AdamW, OptimConfig};
use self::sample::{Draws, Sampled, SamplingParams};
use self::settings::{CallSettings, WorkerSettings};
use rlharness::backend::mock::policy::hash_words;
use rlharness::backend::torch_spec::{ModelKind, TorchDType, TorchDevice, TorchSpec};
use rlharness::backend::{
    Completion, Engine, EngineError, ForwardBackwardOutput, ForwardOutput, GenerateRequest,
    ModelBatch, QueuedGenerate, StepOutput, Timed,
};
use rlharness::task::{CharTokenizer, EOS_ID, PAD_ID};
use rlharness::wire::api::{JobConfig, JobType};

/// The PyTorch version this build links (read from the libtorch install by `build.rs`).
pub const TORCH_VERSION: &str = env!("RLHARNESS_TORCH_VERSION");

/// Serialises every use of torch's global generator.
static TORCH_RNG: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside libtorch poisons the lock; the state it guards is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_gate(g: &RwLock<()>) -> RwLockReadGuard<'_, ()> {
    g.read().unwrap_or_else(|e| e.into_inner())
}

fn write_gate(g: &RwLock<()>) -> RwLockWriteGuard<'_, ()> {
    g.write().unwrap_or_else(|e| e.into_inner())
}

/// What a run records about the engine (`run.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RuntimeInfo {
    pub device: String,
    pub dtype: String,
    pub threads: usize,
    pub torch_version: String,
    pub seed: u64,
    pub num_parameters: u64,
    /// For the tiny model: whether the warm start came from the cache.
    pub warm_start_cached: Option<bool>,
    /// On the CPU: the kernels' pinning and this host's numeric fingerprint.
    pub numerics: Option<rlharness::backend::Numerics>,
}

struct Trainer {
    opt: AdamW,
    global_step: u64,
}

struct Job {
    job_type: JobType,
    /// Where this job's model lives (the layout's device for its role).
    device: Device,
    model: Decoder,
    trainer: Option<Trainer>,
    worker: WorkerSettings,
    micro_batch: usize,
    checkpoint_path: Option<String>,
    /// Bumped whenever the weights change (weight sync, checkpoint load, optimizer step).
    weights_version: u64,
    /// Per request prompts (hashed): how many requests of them came since the weights last
    /// changed. Seeds a request that brings no seed of its own (see [`Job::request_seed`]).
    occurrences: HashMap<u64, u64>,
}

impl Job {
    fn weights_changed(&mut self) {
        self.weights_version += 1;
        self.occurrences.clear();
    }

    /// The sampling seed of a request without `sampling_params.seed`: a function of the
    /// engine's seed, the weights' version, the request's prompts and how many times the same
    /// prompts were asked for since the weights last changed. The samples a prompt receives
    /// are then the same set whatever order concurrent requests arrive in (the adapter sends
    /// a prompt `n` times, one sample a request, and no seed), where a counter of calls would
    /// hand them out by arrival order.
    fn request_seed(&mut self, engine_seed: u64, prompts: &[Vec<i64>]) -> u64 {
        let words: Vec<u64> = prompts
            .iter()
            .flat_map(|p| std::iter::once(p.len() as u64).chain(p.iter().map(|&t| t as u64)))
            .collect();
        let key = hash_words(&words);
        let occurrence = self.occurrences.entry(key).or_insert(0);
        let nth = *occurrence;
        *occurrence += 1;
        hash_words(&[engine_seed, self.weights_version, key, nth])
    }
}

pub struct TorchEngine {
    config: DecoderConfig,
    device: Device,
    kind: Kind,
    seed: u64,
    /// The "pretrained" weights every new job loads.
    base: Mutex<Decoder>,
    jobs: Mutex<HashMap<u64, Arc<Mutex<Job>>>>,
    /// On CUDA, concurrent `/generate` calls ride in one batch, as vLLM batches requests: the
    /// driver sends one call per prompt, and a GPU decoding 5 rows costs about what 80 cost.
    gen_queue: Mutex<GenQueue>,
    batch_generate: bool,
    /// On the CPU, concurrent identical one-row calls (the adapter's: one prompt, one sample,
    /// no seed) ride in one batch, each row drawing from its own call's stream.
    cpu_queue: Mutex<GenQueue>,
    /// The most rows one CPU batch held (for tests and the bench).
    cpu_batch_max: std::sync::atomic::AtomicU64,
    /// `backend.slowdown`: each forward-backward sleeps this fraction of its compute time.
    slowdown: f64,
    /// `backend.sampler_dtype` when it differs from the engine's: the sampler's weights are
    /// rounded through it.
    sampler_round: Option<Kind>,
    /// `backend.sampler_mantissa_bits`: the sampler's weights keep this many mantissa bits.
    sampler_mantissa_bits: Option<u32>,
    /// Held shared by CPU sampling calls (which read weights outside their job's lock) and
    /// exclusively by every call that writes weights in place.
    weight_gate: RwLock<()>,
    /// On the fused path, do the vocabulary head by hand (`head.rs`); off only to measure
    /// the autograd head beside it.
    hand_head: bool,
    info: RuntimeInfo,
    /// Where each role's model lives ([`TorchEngine::with_layout`]).
    layout: EngineLayout,
    /// What the engine did of the layout (`backend_layout.json`).
    record: Mutex<LayoutRecord>,
}

/// Generate calls waiting for the running batch to end (CUDA only).
#[derive(Default)]
struct GenQueue {
    pending: Vec<PendingGen>,
    /// A call is serving batches; new calls queue behind it.
    serving: bool,
}

struct PendingGen {
    job_id: u64,
    prompts: Vec<Vec<i64>>,
    params: SamplingParams,
    reply: tokio::sync::oneshot::Sender<Result<Vec<Sampled>, EngineError>>,
}

/// The generate queues ([`TorchEngine::enqueue`]): the CPU's identical one-row calls, and the
/// batched calls of `batch_generate`.
const CPU_QUEUE: usize = 0;
const GEN_QUEUE: usize = 1;

/// What a queued call's answer is when its batch ended without one.
fn lost_answer() -> EngineError {
    EngineError::internal("generate: the batch this call rode in ended without an answer")
}

/// A `/generate` request's sampling parameters and tokenized prompts.
fn parse_generate(
    request: &GenerateRequest,
) -> Result<(SamplingParams, Vec<Vec<i64>>), EngineError> {
    let params = SamplingParams::from_map(&request.sampling_params)?;
    let prompts = request
        .prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            CharTokenizer::encode(p)
                .map_err(|e| EngineError::bad_request(format!("prompt {i}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((params, prompts))
}

/// The `/generate` answer of sampled rows: `n` rows a prompt, in prompt order.
fn completions(sampled: Vec<Sampled>, prompts: &[Vec<i64>], n: usize) -> Vec<Completion> {
    sampled
        .into_iter()
        .enumerate()
        .map(|(k, s)| Completion {
            text: CharTokenizer::decode(&s.tokens),
            generation_len: s.tokens.len(),
            prompt_len: prompts[k / n].len(),
            finish_reason: if s.stopped { "stop" } else { "length" }.into(),
            token_ids: s.tokens,
            prefix_cache_len: 0,
            logprobs: s.logprobs,
        })
        .collect()
}

/// Calls batch together when they sample the same way; the seed of the batch is its first
/// call's.
fn same_sampling(a: &PendingGen, b: &PendingGen) -> bool {
    a.job_id == b.job_id
        && SamplingParams {
            seed: None,
            ..a.params.clone()
        } == SamplingParams {
            seed: None,
            ..b.params.clone()
        }
}

/// Makes libtorch's CUDA backend register itself. rustc links with `--as-needed` and drops
/// `libtorch_cuda.so`, whose static initialisers are what registers CUDA.
fn register_cuda() -> Result<(), EngineError> {
    let name = c"libtorch_cuda.so";
    // SAFETY: dlopen with a valid NUL-terminated name; the handle is kept for the process.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(EngineError::internal(format!(
            "device cuda asked for, but libtorch_cuda.so cannot be loaded: {why}"
        )));
    }
    if !tch::Cuda::is_available() {
        return Err(EngineError::internal(
            "device cuda asked for, but torch sees no CUDA device",
        ));
    }
    Ok(())
}

/// The process's peak resident set since the last call (or its start), in GB, then reset
/// (Linux: `VmHWM` of `/proc/self/status`; writing 5 to `/proc/self/clear_refs` resets it).
/// `None` where the kernel does not provide it. The engine holds every job's model, so this is
/// the CPU engine's peak memory over one training step when called at each `/step`.
fn peak_rss_gb_and_reset() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    Some(kb * 1024.0 / 1e9)
}

impl TorchEngine {
    /// `backend.sampler_dtype`: round the sampler's weights through that dtype, in place.
    /// `backend.sampler_mantissa_bits`: keep that many mantissa bits, in place.
    fn round_sampler(&self, model: &mut Decoder) -> Result<(), EngineError> {
        if self.sampler_round.is_none() && self.sampler_mantissa_bits.is_none() {
            return Ok(());
        }
        let rounded: Vec<Tensor> = {
            let _g = tch::no_grad_guard();
            model
                .params
                .iter()
                .map(|p| {
                    let p = match self.sampler_round {
                        Some(kind) => p.to_kind(kind),
                        None => p.shallow_clone(),
                    };
                    match self.sampler_mantissa_bits {
                        Some(bits) => round_mantissa(&p, bits),
                        None => p,
                    }
                })
                .collect()
        };
        model.copy_from(&rounded).map_err(EngineError::internal)
    }

    pub fn new(spec: &TorchSpec, seed: u64) -> Result<TorchEngine, EngineError> {
        let config = DecoderConfig::from_spec(&spec.model).map_err(EngineError::bad_request)?;
        if !(spec.slowdown.is_finite() && (0.0..=10.0).contains(&spec.slowdown)) {
            return Err(EngineError::bad_request(format!(
                "backend.slowdown must be a fraction in [0, 10], got {}",
                spec.slowdown
            )));
        }
        if let Some(bits) = spec.sampler_mantissa_bits {
            if !(1..=22).contains(&bits) {
                return Err(EngineError::bad_request(format!(
                    "backend.sampler_mantissa_bits must be in 1..=22 (an f32 mantissa has 23), got {bits}"
                )));
            }
        }
        if spec.threads == 0 {
            return Err(EngineError::bad_request(
                "backend.threads must be at least 1",
            ));
        }
        let (device, kernels) = match spec.device {
            // Before libtorch's first CPU op, so every library reads the pinned level.
            TorchDevice::Cpu => (Device::Cpu, Some(numerics::pin(spec.cpu_isa)?)),
            TorchDevice::Cuda => {
                register_cuda()?;
                (Device::Cuda(0), None)
            }
        };
        tch::set_num_threads(spec.threads as i32);
        let kind = match spec.dtype {
            TorchDType::F32 => Kind::Float,
            TorchDType::Bf16 => Kind::BFloat16,
        };
        let _rng = lock(&TORCH_RNG);
        let numerics = kernels.map(|k| rlharness::backend::Numerics {
            fingerprint: numerics::fingerprint(&config, spec.threads),
            cpu_kernels: Some(k),
            simulated_time: false,
        });
        let (base, cached) = match spec.model.kind {
            ModelKind::Tiny => {
                let (m, cached) = warm_start::pretrained(
                    &config,
                    &spec.warm_start,
                    spec.threads,
                    numerics.as_ref().map(|n| n.fingerprint.as_str()),
                    Path::new(&spec.cache_dir),
                    device,
                    kind,
                )
                .map_err(EngineError::internal)?;
                (m, Some(cached))
            }
            ModelKind::Qwen3 => {
                tch::manual_seed(seed as i64);
                (Decoder::new_random(config.clone(), device, kind), None)
            }
        };
        let mut base = base;
        base.graphs = spec.cuda_graphs && device != Device::Cpu;
        let info = RuntimeInfo {
            device: match device {
                Device::Cuda(i) => format!("cuda:{i}"),
                _ => "cpu".into(),
            },
            dtype: match kind {
                Kind::BFloat16 => "bf16".into(),
                _ => "f32".into(),
            },
            threads: tch::get_num_threads() as usize,
            torch_version: TORCH_VERSION.to_string(),
            seed,
            num_parameters: base.num_parameters(),
            warm_start_cached: cached,
            numerics,
        };
        Ok(TorchEngine {
            config,
            device,
            kind,
            seed,
            base: Mutex::new(base),
            jobs: Mutex::new(HashMap::new()),
            gen_queue: Mutex::new(GenQueue::default()),
            cpu_queue: Mutex::new(GenQueue::default()),
            cpu_batch_max: std::sync::atomic::AtomicU64::new(0),
            batch_generate: device != Device::Cpu,
            slowdown: spec.slowdown,
            sampler_round: match spec.sampler_dtype {
                Some(TorchDType::Bf16) if kind != Kind::BFloat16 => Some(Kind::BFloat16),
                _ => None,
            },
            sampler_mantissa_bits: spec.sampler_mantissa_bits,
            weight_gate: RwLock::new(()),
            hand_head: true,
            info,
            record: Mutex::new(LayoutRecord::new(&EngineLayout::colocated(device))),
            layout: EngineLayout::colocated(device),
        })
    }

    /// What `run.json` records of the engine; `info()` has the rest.
    pub fn runtime(&self) -> rlharness::backend::Runtime {
        rlharness::backend::Runtime {
            device: self.info.device.clone(),
            threads: Some(self.info.threads as u64),
            torch_version: Some(self.info.torch_version.clone()),
            numerics: self.info.numerics.clone(),
        }
    }

    pub fn info(&self) -> &RuntimeInfo {
        &self.info
    }

    pub fn model_config(&self) -> &DecoderConfig {
        &self.config
    }

    fn job(&self, job_id: u64) -> Result<Arc<Mutex<Job>>, EngineError> {
        lock(&self.jobs)
            .get(&job_id)
            .cloned()
            .ok_or_else(|| EngineError {
                status: 404,
                detail: format!("job {job_id} not found"),
            })
    }

    /// A job's weights, named, detached and on CPU in fp32 (for tests and inspection).
    pub fn job_weights(&self, job_id: u64) -> Result<Vec<(String, Tensor)>, EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        Ok(job.model.host_weights(Some(Kind::Float)))
    }

    /// Sample from a job's model given token ids (no tokenizer); what `generate` does after
    /// encoding, and what the performance bench calls with random prompts.
    /// Batch concurrent generate calls (on by default on CUDA only, where it pays; on the CPU
    /// each call keeps its own seed, which bit-exact runs rely on).
    pub fn with_generate_batching(mut self, on: bool) -> TorchEngine {
        self.batch_generate = on;
        self
    }

    /// Use the hand-made vocabulary head on the fused path (the default), or autograd's (to
    /// measure one beside the other).
    pub fn with_hand_head(mut self, on: bool) -> TorchEngine {
        self.hand_head = on;
        self
    }

    /// Place the trainer (and the log_prob job) and the sampler as `layout` says (by default
    /// both on the engine's device, colocated). Before any job is created: jobs already there
    /// stay where they are. A layout on devices of another kind than the engine's is refused.
    pub fn with_layout(mut self, layout: EngineLayout) -> Result<TorchEngine, EngineError> {
        for d in [layout.training, layout.sampling] {
            if d.is_cuda() != self.device.is_cuda() {
                return Err(EngineError::bad_request(format!(
                    "layout: a {} role on an engine on {}",
                    device_name(d),
                    device_name(self.device)
                )));
            }
        }
        let record = LayoutRecord::new(&layout);
        record.write(layout.record.as_ref());
        self.record = Mutex::new(record);
        self.layout = layout;
        Ok(self)
    }

    /// What the engine recorded of its layout so far: each job's device, each weight sync.
    pub fn layout_record(&self) -> LayoutRecord {
        lock(&self.record).clone()
    }

    /// The most rows one batch of identical one-row CPU calls held so far.
    pub fn cpu_batch_max(&self) -> u64 {
        self.cpu_batch_max
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn generate_ids(
        &self,
        job_id: u64,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
    ) -> Result<Vec<Sampled>, EngineError> {
        self.check_prompts(prompts)?;
        let Some(queue) = self.queue_for(prompts, params) else {
            // One call at a time, each under its own seed: bit-exact CPU runs.
            return self.generate_now(job_id, prompts, params);
        };
        let (answer, serve) = self.enqueue(queue, job_id, prompts, params);
        if serve {
            self.serve_queue(queue);
        }
        answer
            .blocking_recv()
            .unwrap_or_else(|_| Err(lost_answer()))
    }

    fn check_prompts(&self, prompts: &[Vec<i64>]) -> Result<(), EngineError> {
        let vocab = self.config.vocab_size as i64;
        for (i, p) in prompts.iter().enumerate() {
            if p.is_empty() {
                return Err(EngineError::bad_request(format!("prompt {i} is empty")));
            }
            if let Some(bad) = p.iter().find(|&&t| t < 0 || t >= vocab) {
                return Err(EngineError::bad_request(format!(
                    "prompt {i} holds token id {bad}, outside the vocabulary of {vocab}"
                )));
            }
        }
        Ok(())
    }

    /// The queue a call goes to, or `None` when it runs at once.
    fn queue_for(&self, prompts: &[Vec<i64>], params: &SamplingParams) -> Option<usize> {
        if self.device == Device::Cpu
            && prompts.len() == 1
            && params.n == 1
            && params.seed.is_none()
        {
            // The adapter's one-row call on the CPU ([`TorchEngine::serve_cpu_batches`]).
            return Some(CPU_QUEUE);
        }
        self.batch_generate.then_some(GEN_QUEUE)
    }

    /// Queue a call; returns where its answer arrives, and whether this caller found nobody
    /// serving the queue (then it must serve it, [`TorchEngine::serve_queue`], or no queued
    /// call is answered).
    fn enqueue(
        &self,
        queue: usize,
        job_id: u64,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
    ) -> (
        tokio::sync::oneshot::Receiver<Result<Vec<Sampled>, EngineError>>,
        bool,
    ) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let mut q = lock(self.queue(queue));
        q.pending.push(PendingGen {
            job_id,
            prompts: prompts.to_vec(),
            params: params.clone(),
            reply,
        });
        let serve = !q.serving;
        q.serving = true;
        (answer, serve)
    }

    fn queue(&self, queue: usize) -> &Mutex<GenQueue> {
        if queue == CPU_QUEUE {
            &self.cpu_queue
        } else {
            &self.gen_queue
        }
    }

    /// Serve `queue` until it is empty; only the caller [`TorchEngine::enqueue`] told to.
    fn serve_queue(&self, queue: usize) {
        if queue == CPU_QUEUE {
            self.serve_cpu_batches();
        } else {
            self.serve_generate_batches();
        }
    }

    /// Serve the queue of the adapter's one-row calls on the CPU: the first caller serves every
    /// call queued meanwhile, identical calls (same job, prompt and sampling) as one batch whose
    /// rows each draw from their own call's seed ([`Job::request_seed`], taken in queue order).
    /// A row of a batch is computed exactly as it would be alone (identical prompts need no
    /// padding, and no kernel mixes rows; `batched_cpu_rows_equal_single_calls` checks it), so
    /// the bits do not depend on how the calls happened to batch.
    fn serve_cpu_batches(&self) {
        loop {
            let pending = {
                let mut q = lock(&self.cpu_queue);
                if q.pending.is_empty() {
                    q.serving = false;
                    return;
                }
                std::mem::take(&mut q.pending)
            };
            // Identical calls together, in queue order.
            let mut groups: Vec<Vec<PendingGen>> = Vec::new();
            for call in pending {
                match groups.iter_mut().find(|g| {
                    g[0].job_id == call.job_id
                        && g[0].prompts == call.prompts
                        && g[0].params == call.params
                }) {
                    Some(g) => g.push(call),
                    None => groups.push(vec![call]),
                }
            }
            for group in groups {
                let first = &group[0];
                let result = self.job(first.job_id).and_then(|job| {
                    let eos = if first.params.ignore_eos { -1 } else { EOS_ID };
                    let _reading = read_gate(&self.weight_gate);
                    let (model, seeds) = {
                        let mut job = lock(&job);
                        let seeds: Vec<u64> = group
                            .iter()
                            .map(|g| job.request_seed(self.seed, &g.prompts))
                            .collect();
                        (job.model.share(), seeds)
                    };
                    let rows: Vec<Vec<i64>> = vec![first.prompts[0].clone(); group.len()];
                    self.cpu_batch_max
                        .fetch_max(rows.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    guard("generate", || {
                        Ok(sample::sample(
                            &model,
                            &rows,
                            &first.params,
                            eos,
                            PAD_ID,
                            &mut Draws::rows(&seeds),
                        ))
                    })
                });
                match result {
                    Ok(rows) => {
                        for (g, row) in group.into_iter().zip(rows) {
                            let _ = g.reply.send(Ok(vec![row]));
                        }
                    }
                    Err(e) => {
                        for g in group {
                            let _ = g.reply.send(Err(e.clone()));
                        }
                    }
                }
            }
        }
    }

    /// Serve queued generate calls, a batch at a time, until none is left. Waits briefly for
    /// calls sent together to arrive, so the first of them does not run alone.
    fn serve_generate_batches(&self) {
        const SETTLE: std::time::Duration = std::time::Duration::from_millis(20);
        const MAX_WAIT: std::time::Duration = std::time::Duration::from_millis(250);
        loop {
            let start = std::time::Instant::now();
            let mut seen = lock(&self.gen_queue).pending.len();
            while start.elapsed() < MAX_WAIT {
                std::thread::sleep(SETTLE);
                let now = lock(&self.gen_queue).pending.len();
                if now == seen {
                    break;
                }
                seen = now;
            }
            let group: Vec<PendingGen> = {
                let mut q = lock(&self.gen_queue);
                if q.pending.is_empty() {
                    q.serving = false;
                    return;
                }
                let mut pending = std::mem::take(&mut q.pending).into_iter();
                let Some(first) = pending.next() else {
                    q.serving = false;
                    return;
                };
                let (mut group, rest): (Vec<_>, Vec<_>) =
                    pending.partition(|p| same_sampling(p, &first));
                group.insert(0, first);
                q.pending = rest;
                group
            };
            let prompts: Vec<Vec<i64>> = group.iter().flat_map(|g| g.prompts.clone()).collect();
            let first = &group[0];
            match self.generate_now(first.job_id, &prompts, &first.params) {
                Ok(mut rows) => {
                    for g in group.into_iter().rev() {
                        let take = g.prompts.len() * g.params.n;
                        let mine = rows.split_off(rows.len().saturating_sub(take));
                        let _ = g.reply.send(Ok(mine));
                    }
                }
                Err(e) => {
                    for g in group {
                        let _ = g.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// One sampling call on the job's model, seeded by the call's seed (or, without one, by
    /// [`Job::request_seed`]). On CUDA the draws come from torch's generator (the batch stays on
    /// the device); elsewhere from the call's own host stream, without holding the job's lock.
    fn generate_now(
        &self,
        job_id: u64,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
    ) -> Result<Vec<Sampled>, EngineError> {
        let job = self.job(job_id)?;
        let eos = if params.ignore_eos { -1 } else { EOS_ID };
        if self.device == Device::Cpu {
            let _reading = read_gate(&self.weight_gate);
            let (model, seed) = {
                let mut job = lock(&job);
                let seed = match params.seed {
                    Some(seed) => seed,
                    None => job.request_seed(self.seed, prompts),
                };
                (job.model.share(), seed)
            };
            let mut draws = Draws::host(seed);
            return guard("generate", || {
                Ok(sample::sample(
                    &model, prompts, params, eos, PAD_ID, &mut draws,
                ))
            });
        }
        let mut job = lock(&job);
        let seed = match params.seed {
            Some(seed) => seed,
            None => job.request_seed(self.seed, prompts),
        };
        let _rng = lock(&TORCH_RNG);
        tch::manual_seed(seed as i64);
        guard("generate", || {
            Ok(sample::sample(
                &job.model,
                prompts,
                params,
                eos,
                PAD_ID,
                &mut Draws::Torch,
            ))
        })
    }

    fn forward_impl(&self, job: &Job, batch: &ModelBatch) -> Result<ForwardOutput, EngineError> {
        let settings = CallSettings::resolve(&job.worker, &batch.meta, &batch.post)?;
        let x = Padded::from_batch(batch, &settings, self.config.vocab_size, job.device)?;
        let loss_inputs = match batch.loss_fn.as_deref() {
            None => None,
            Some(name @ ("grpo" | "verl_grpo" | "sft" | "sft_ce")) => {
                Some(LossInputs::read(batch, &x, name, job.device)?)
            }
            Some(other) => {
                return Err(EngineError::bad_request(format!(
                    "unknown loss_fn {other:?}"
                )))
            }
        };
        let _g = tch::no_grad_guard();
        let mut lps = Vec::new();
        let mut ents = Vec::new();
        let mb = job.micro_batch.max(1) as i64;
        let mut start = 0;
        while start < x.b {
            let rows = x.rows(start, mb.min(x.b - start));
            let (lp, ent) = if job.model.fused && self.hand_head {
                head::response_logprobs(&job.model, &rows, &settings, settings.want_entropy)
            } else {
                let entropy = if settings.want_entropy {
                    head::Entropy::Value
                } else {
                    head::Entropy::Off
                };
                response_logprobs(&job.model, &rows, &settings, entropy)
            };
            lps.push(lp);
            if let Some(e) = ent {
                ents.push(e);
            }
            start += rows.b;
        }
        let lp = Tensor::cat(&lps, 0);
        let ent = (!ents.is_empty()).then(|| Tensor::cat(&ents, 0));
        let (metrics, avg_loss) = match &loss_inputs {
            Some(li) => {
                let mut sums = LossSums::default();
                let totals = AggTotals::of(&li.mask);
                let _ = li.loss(&lp, ent.as_ref(), &settings, totals, &mut sums);
                sums.settle()
                    .map_err(|e| EngineError::internal(e.to_string()))?;
                (li.metrics(&sums, &settings), Some(sums.loss))
            }
            None => (Map::new(), None),
        };
        let logprobs = place(&lp, &x, settings.zorro, settings.pad_token_id as f64);
        let entropy = ent.map(|e| place(&e, &x, settings.zorro, 0.0));
        Ok(ForwardOutput {
            logprobs: convert::to_wire_f32(&logprobs)?,
            entropy: entropy.map(|e| convert::to_wire_f32(&e)).transpose()?,
            metrics,
            avg_loss,
        })
    }

    fn forward_backward_impl(
        &self,
        job: &mut Job,
        batch: &ModelBatch,
    ) -> Result<ForwardBackwardOutput, EngineError> {
        if job.trainer.is_none() {
            return Err(EngineError::bad_request(
                "forward-backward needs a training job",
            ));
        }
        let settings = CallSettings::resolve(&job.worker, &batch.meta, &batch.post)?;
        let loss_name = match batch.loss_fn.as_deref() {
            None => {
                return Err(EngineError::bad_request(
                    "forward-backward needs a loss_fn (got null)",
                ))
            }
            Some(n @ ("grpo" | "verl_grpo" | "sft" | "sft_ce")) => n.to_string(),
            Some(other) => {
                return Err(EngineError::bad_request(format!(
                    "unknown loss_fn {other:?}"
                )))
            }
        };
        let x = Padded::from_batch(batch, &settings, self.config.vocab_size, job.device)?;
        let li = LossInputs::read(batch, &x, &loss_name, job.device)?;
        let totals = AggTotals::of(&li.mask);
        let mut sums = LossSums::default();
        let mb = job.micro_batch.max(1) as i64;
        let mut start = 0;
        let entropy_grad = li.is_grpo() && settings.actor.entropy_coeff != 0.0;
        while start < x.b {
            let n = mb.min(x.b - start);
            let rows = x.rows(start, n);
            let part = li.rows(start, n);
            let entropy = if entropy_grad {
                head::Entropy::WithGrad
            } else if settings.want_entropy || part.needs_entropy(&settings) {
                head::Entropy::Value
            } else {
                head::Entropy::Off
            };
            if job.model.fused && self.hand_head {
                let chunk = head::chunk_rows(&settings, rows.r, self.config.vocab_size as i64);
                head::forward_backward(
                    &job.model,
                    &rows,
                    &settings,
                    entropy,
                    chunk,
                    |r0, c, lp, ent| part.rows(r0, c).loss(lp, ent, &settings, totals, &mut sums),
                )
                .map_err(EngineError::internal)?;
            } else {
                let (lp, ent) = response_logprobs(&job.model, &rows, &settings, entropy);
                let loss = part.loss(&lp, ent.as_ref(), &settings, totals, &mut sums);
                loss.backward();
            }
            start += n;
        }
        sums.settle()
            .map_err(|e| EngineError::internal(e.to_string()))?;
        Ok(ForwardBackwardOutput {
            metrics: li.metrics(&sums, &settings),
            avg_loss: sums.loss,
        })
    }

    fn save_impl(&self, job: &Job, request: &Value) -> Result<Value, EngineError> {
        let trainer = job
            .trainer
            .as_ref()
            .ok_or_else(|| EngineError::bad_request("save needs a training job"))?;
        let step = match request.get("step") {
            None | Some(Value::Null) => trainer.global_step,
            Some(v) => v.as_u64().ok_or_else(|| {
                EngineError::bad_request(format!(
                    "save: step must be a non-negative integer, got {v}"
                ))
            })?,
        };
        let dir = match request.get("path").and_then(Value::as_str) {
            Some(p) => PathBuf::from(p),
            None => {
                let root = job.checkpoint_path.as_deref().ok_or_else(|| {
                    EngineError::bad_request(
                        "save: no path given and the job has no checkpoint_path",
                    )
                })?;
                Path::new(root).join(format!("global_step_{step}"))
            }
        };
        rlharness::fsx::create_dir_all(&dir).map_err(|e| EngineError::internal(e.to_string()))?;
        let _g = tch::no_grad_guard();
        let weights = job.model.host_weights(None);
        let model_file = dir.join("model.safetensors");
        Tensor::write_safetensors(&weights, &model_file).map_err(|e| {
            EngineError::internal(format!("cannot write {}: {e}", model_file.display()))
        })?;
        let mut opt_state = Vec::new();
        for (k, name) in job.model.names.iter().enumerate() {
            opt_state.push((
                format!("exp_avg.{name}"),
                trainer.opt.m[k].to_device(Device::Cpu),
            ));
            opt_state.push((
                format!("exp_avg_sq.{name}"),
                trainer.opt.v[k].to_device(Device::Cpu),
            ));
            if let Some(m) = trainer.opt.master.get(k) {
                opt_state.push((format!("master.{name}"), m.to_device(Device::Cpu)));
            }
        }
        let opt_file = dir.join("optimizer.safetensors");
        Tensor::write_safetensors(&opt_state, &opt_file).map_err(|e| {
            EngineError::internal(format!("cannot write {}: {e}", opt_file.display()))
        })?;
        let state = json!({"global_step": step, "optimizer_steps": trainer.opt.steps});
        rlharness::fsx::write_atomic(
            &dir.join("trainer_state.json"),
            state.to_string().as_bytes(),
        )
        .map_err(|e| EngineError::internal(e.to_string()))?;
        let export_hf = request
            .get("export_hf")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let path = dir.display().to_string();
        Ok(
            json!({"path": path, "hf_path": if export_hf { Value::String(path.clone()) } else { Value::Null }, "global_step": step}),
        )
    }

    fn load_impl(&self, job: &mut Job, request: &Value) -> Result<Value, EngineError> {
        if job.trainer.is_none() {
            return Err(EngineError::bad_request(
                "load-checkpoint needs a training job",
            ));
        }
        let dir = match (
            request.get("path").and_then(Value::as_str),
            request.get("step").and_then(Value::as_u64),
        ) {
            (Some(p), _) => PathBuf::from(p),
            (None, step) => {
                let root = job.checkpoint_path.as_deref().ok_or_else(|| {
                    EngineError::bad_request(
                        "load-checkpoint: no path given and the job has no checkpoint_path",
                    )
                })?;
                match step {
                    Some(s) => Path::new(root).join(format!("global_step_{s}")),
                    None => latest_checkpoint(Path::new(root))?,
                }
            }
        };
        let read = |file: &str| -> Result<HashMap<String, Tensor>, EngineError> {
            let p = dir.join(file);
            Tensor::read_safetensors(&p)
                .map(|v| v.into_iter().collect())
                .map_err(|e| {
                    EngineError::bad_request(format!(
                        "cannot read checkpoint file {}: {e}",
                        p.display()
                    ))
                })
        };
        let weights = read("model.safetensors")?;
        let opt = read("optimizer.safetensors")?;
        let state_path = dir.join("trainer_state.json");
        let state: Value = serde_json::from_str(
            &rlharness::fsx::read_to_string(&state_path)
                .map_err(|e| EngineError::bad_request(e.to_string()))?,
        )
        .map_err(|e| {
            EngineError::bad_request(format!("{} is not valid JSON: {e}", state_path.display()))
        })?;
        let get = |m: &HashMap<String, Tensor>, key: String| {
            m.get(&key).map(|t| t.shallow_clone()).ok_or_else(|| {
                EngineError::bad_request(format!("checkpoint {} lacks {key}", dir.display()))
            })
        };
        let names = job.model.names.clone();
        let new_weights = names
            .iter()
            .map(|n| get(&weights, n.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        job.model
            .copy_from(&new_weights)
            .map_err(EngineError::bad_request)?;
        let trainer = job
            .trainer
            .as_mut()
            .ok_or_else(|| EngineError::internal("training job lost its trainer"))?;
        let _g = tch::no_grad_guard();
        for (k, n) in names.iter().enumerate() {
            trainer.opt.m[k].copy_(&get(&opt, format!("exp_avg.{n}"))?.to_device(job.device));
            trainer.opt.v[k].copy_(&get(&opt, format!("exp_avg_sq.{n}"))?.to_device(job.device));
            if !trainer.opt.master.is_empty() {
                trainer.opt.master[k]
                    .copy_(&get(&opt, format!("master.{n}"))?.to_device(job.device));
            }
        }
        trainer.global_step = state
            .get("global_step")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        trainer.opt.steps = state
            .get("optimizer_steps")
            .and_then(Value::as_u64)
            .unwrap_or(trainer.global_step);
        Ok(json!({"path": dir.display().to_string(), "global_step": trainer.global_step}))
    }
}

fn latest_checkpoint(root: &Path) -> Result<PathBuf, EngineError> {
    let entries = std::fs::read_dir(root).map_err(|e| {
        EngineError::bad_request(format!(
            "load-checkpoint: cannot list {}: {e}",
            root.display()
        ))
    })?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("global_step_")
                .and_then(|s| s.parse::<u64>().ok())
                .map(|s| (s, e.path()))
        })
        .max_by_key(|(s, _)| *s)
        .map(|(_, p)| p)
        .ok_or_else(|| {
            EngineError::bad_request(format!(
                "load-checkpoint: no global_step_* checkpoint in {}",
                root.display()
            ))
        })
}

/// Run torch work, turning a libtorch panic (a shape or device error we did not foresee)
/// into a 500 instead of tearing down the server thread.
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T, EngineError>) -> Result<T, EngineError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(EngineError::internal(format!(
                "{what} failed inside libtorch: {msg}"
            )))
        }
    }
}

/// The response-side inputs of a loss, `[B,R]`.
struct LossInputs {
    name: String,
    mask: Tensor,
    old: Option<Tensor>,
    adv: Option<Tensor>,
    reference: Option<Tensor>,
}

impl LossInputs {
    fn read(
        batch: &ModelBatch,
        x: &Padded,
        name: &str,
        device: Device,
    ) -> Result<LossInputs, EngineError> {
        let mask = match x.response_side(batch, "response_mask", device)? {
            Some(m) => m,
            None => match x.response_side(batch, "loss_mask", device)? {
                Some(m) => m,
                None => x.mask.narrow(1, x.p, x.r).to_kind(Kind::Float),
            },
        };
        let mask = mask.ne(0.0).to_kind(Kind::Float);
        let grpo = name == "grpo" || name == "verl_grpo";
        let need = |t: Option<Tensor>, key: &str| -> Result<Option<Tensor>, EngineError> {
            match t {
                Some(t) => Ok(Some(t)),
                None if grpo => Err(EngineError::unprocessable(format!(
                    "loss_fn {name} needs batch.{key} (send loss_fn null for log-probs only)"
                ))),
                None => Ok(None),
            }
        };
        Ok(LossInputs {
            name: name.to_string(),
            old: need(
                x.response_side(batch, "old_log_probs", device)?,
                "old_log_probs",
            )?,
            adv: need(x.response_side(batch, "advantages", device)?, "advantages")?,
            reference: x.response_side(batch, "ref_log_prob", device)?,
            mask,
        })
    }

    fn rows(&self, start: i64, n: i64) -> LossInputs {
        let cut = |t: &Tensor| t.narrow(0, start, n);
        LossInputs {
            name: self.name.clone(),
            mask: cut(&self.mask),
            old: self.old.as_ref().map(cut),
            adv: self.adv.as_ref().map(cut),
            reference: self.reference.as_ref().map(cut),
        }
    }

    fn is_grpo(&self) -> bool {
        self.name == "grpo" || self.name == "verl_grpo"
    }

    fn needs_entropy(&self, s: &CallSettings) -> bool {
        self.is_grpo() && s.actor.entropy_coeff != 0.0
    }

    fn loss(
        &self,
        lp: &Tensor,
        ent: Option<&Tensor>,
        s: &CallSettings,
        totals: AggTotals,
        sums: &mut LossSums,
    ) -> Tensor {
        match (&self.old, &self.adv) {
            (Some(old), Some(adv)) if self.is_grpo() => {
                let ent_for_loss = if s.actor.entropy_coeff != 0.0 {
                    ent
                } else {
                    ent.filter(|_| s.want_entropy)
                };
                grpo_micro_loss(
                    lp,
                    ent_for_loss,
                    old,
                    adv,
                    &self.mask,
                    self.reference.as_ref(),
                    &s.actor,
                    totals,
                    sums,
                )
            }
            _ => {
                // sft / sft_ce: token-mean negative log-likelihood of the response.
                let l = loss::aggregate(&lp.neg(), &self.mask, AggMode::TokenMean, totals);
                sums.add(Sum::Loss, &l);
                sums.add(Sum::Tokens, &self.mask.sum(Kind::Float));
                l
            }
        }
    }

    fn metrics(&self, sums: &LossSums, s: &CallSettings) -> Map<String, Value> {
        debug_assert!(sums.is_settled(), "loss sums read before settle()");
        let mut m = Map::new();
        let tokens = sums.tokens.max(1.0);
        if self.is_grpo() {
            m.insert(
                "actor/pg_loss".into(),
                rlharness::wire::pyjson::float(sums.pg_loss),
            );
            m.insert(
                "actor/ppo_kl".into(),
                rlharness::wire::pyjson::float(sums.ppo_kl_sum / tokens),
            );
            m.insert(
                "actor/pg_clipfrac".into(),
                rlharness::wire::pyjson::float(sums.clipfrac_sum / tokens),
            );
            m.insert(
                "actor/pg_clipfrac_lower".into(),
                rlharness::wire::pyjson::float(sums.clipfrac_lower_sum / tokens),
            );
            if s.want_entropy || s.actor.entropy_coeff != 0.0 {
                m.insert(
                    "actor/entropy_loss".into(),
                    rlharness::wire::pyjson::float(sums.entropy_loss),
                );
            }
            if s.actor.use_kl_loss && self.reference.is_some() {
                m.insert(
                    "kl_loss".into(),
                    rlharness::wire::pyjson::float(sums.kl_loss),
                );
                m.insert(
                    "kl_coef".into(),
                    rlharness::wire::pyjson::float(s.actor.kl_coef),
                );
            }
        }
        m.insert("loss".into(), rlharness::wire::pyjson::float(sums.loss));
        m
    }
}

impl Engine for TorchEngine {
    fn create_job(&self, job_id: u64, config: &JobConfig) -> Result<(), EngineError> {
        let worker = WorkerSettings::from_config(config.ds_worker_config.as_ref())?;
        let ds = match config.job_type {
            JobType::Training => config.ds_config.as_ref(),
            // A DeepSpeed log_prob job carries the training job's ds_config (it only selects
            // DeepSpeed); its own engine settings travel in log_prob_config.
            JobType::LogProb => config
                .log_prob_config
                .as_ref()
                .or(config.ds_config.as_ref()),
            JobType::Sampling => None,
        };
        let optim = OptimConfig::from_ds_config(ds).map_err(EngineError::bad_request)?;
        let device = self.layout.device_for(config.job_type);
        let mut model = {
            let base = lock(&self.base);
            if device == base.device {
                base.deep_copy()
            } else {
                base.copy_to(device)
            }
        };
        if config.job_type == JobType::Sampling {
            self.round_sampler(&mut model)?;
        }
        let trainer = if config.job_type == JobType::Training {
            model.set_requires_grad(true);
            Some(Trainer {
                opt: AdamW::new(optim.clone(), &model.params),
                global_step: 0,
            })
        } else {
            None
        };
        let job = Job {
            job_type: config.job_type,
            device,
            model,
            trainer,
            worker,
            micro_batch: optim.micro_batch,
            checkpoint_path: config.checkpoint_path.clone(),
            weights_version: 0,
            occurrences: HashMap::new(),
        };
        lock(&self.jobs).insert(job_id, Arc::new(Mutex::new(job)));
        let mut record = lock(&self.record);
        record.jobs.retain(|j| j.job_id != job_id);
        record.jobs.push(JobPlacement {
            job_id,
            job_type: config.job_type.as_str().to_string(),
            device: device_name(device),
        });
        if config.job_type == JobType::Training {
            // The sync strategy is the training job's (`cuda_ipc`); the layout decides
            // whether it takes effect.
            record.rules = rlharness::backend::torch_spec::layout::LayoutRules::new(
                self.layout.colocate,
                config.cuda_ipc,
            );
        }
        record.write(self.layout.record.as_ref());
        Ok(())
    }

    fn destroy_job(&self, job_id: u64) {
        lock(&self.jobs).remove(&job_id);
    }

    /// Log-probs (and entropy) of the response tokens. Works on any job, so a test can score
    /// the sampler's copy too; the server only routes training and log_prob jobs here.
    fn forward(
        &self,
        job_id: u64,
        batch: &ModelBatch,
    ) -> Result<Timed<ForwardOutput>, EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        guard("forward", || self.forward_impl(&job, batch)).map(Timed::untimed)
    }

    fn forward_backward(
        &self,
        job_id: u64,
        batch: &ModelBatch,
    ) -> Result<Timed<ForwardBackwardOutput>, EngineError> {
        let job = self.job(job_id)?;
        let mut job = lock(&job);
        let started = std::time::Instant::now();
        let out = guard("forward-backward", || {
            self.forward_backward_impl(&mut job, batch)
        })
        .map(Timed::untimed);
        if self.slowdown > 0.0 {
            // The planted slow kernel: the results are on the host already, so this is wall
            // time the call really took, stretched.
            std::thread::sleep(started.elapsed().mul_f64(self.slowdown));
        }
        out
    }

    fn step(
        &self,
        job_id: u64,
        learning_rate: Option<f64>,
    ) -> Result<Timed<StepOutput>, EngineError> {
        let job = self.job(job_id)?;
        let _writing = write_gate(&self.weight_gate);
        let mut job = lock(&job);
        let job = &mut *job;
        let trainer = job
            .trainer
            .as_mut()
            .ok_or_else(|| EngineError::bad_request("step needs a training job"))?;
        if let Some(lr) = learning_rate {
            if !(lr.is_finite() && lr >= 0.0) {
                return Err(EngineError::bad_request(format!(
                    "learning_rate must be a non-negative number, got {lr}"
                )));
            }
        }
        let (_, norm) = guard("step", || {
            Ok(trainer.opt.step(&job.model.params, learning_rate))
        })?;
        trainer.global_step += 1;
        let last_lr = trainer.opt.next_lr();
        job.weights_changed();
        Ok(Timed::untimed(StepOutput {
            last_lr,
            grad_norm: Some(norm),
            peak_memory_gb: (self.device == Device::Cpu)
                .then(peak_rss_gb_and_reset)
                .flatten(),
        }))
    }

    fn generate(
        &self,
        job_id: u64,
        request: &GenerateRequest,
    ) -> Result<Timed<Vec<Completion>>, EngineError> {
        let (params, prompts) = parse_generate(request)?;
        let sampled = self.generate_ids(job_id, &prompts, &params)?;
        Ok(Timed::untimed(completions(sampled, &prompts, params.n)))
    }

    fn generate_queued(
        &self,
        job_id: u64,
        request: &GenerateRequest,
    ) -> Option<Result<QueuedGenerate, EngineError>> {
        let parsed = parse_generate(request).and_then(|(params, prompts)| {
            self.check_prompts(&prompts)?;
            Ok((params, prompts))
        });
        let (params, prompts) = match parsed {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let queue = self.queue_for(&prompts, &params)?;
        let (answer, serve) = self.enqueue(queue, job_id, &prompts, &params);
        Some(Ok(QueuedGenerate {
            answer: Box::pin(async move {
                let sampled = answer.await.unwrap_or_else(|_| Err(lost_answer()))?;
                Ok(Timed::untimed(completions(sampled, &prompts, params.n)))
            }),
            serve: serve.then_some(queue),
        }))
    }

    fn serve_generate_queue(&self, queue: usize) {
        self.serve_queue(queue);
    }

    fn weight_sync(&self, source: u64, targets: &[u64]) -> Result<Timed<()>, EngineError> {
        let _writing = write_gate(&self.weight_gate);
        let started = std::time::Instant::now();
        let src = self.job(source)?;
        let (from, snapshot): (Device, Vec<Tensor>) = {
            let src = lock(&src);
            if src.job_type != JobType::Training {
                return Err(EngineError::bad_request(format!(
                    "weight-sync source {source} is not a training job"
                )));
            }
            let _g = tch::no_grad_guard();
            (
                src.device,
                src.model.params.iter().map(|p| p.detach().copy()).collect(),
            )
        };
        let snapshot_bytes: u64 = snapshot
            .iter()
            .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
            .sum();
        let mut to = Vec::with_capacity(targets.len());
        for &t in targets {
            if t == source {
                return Err(EngineError::bad_request(
                    "weight-sync target equals its source",
                ));
            }
            let job = self.job(t)?;
            let mut job = lock(&job);
            job.model
                .copy_from(&snapshot)
                .map_err(EngineError::internal)?;
            if job.job_type == JobType::Sampling {
                self.round_sampler(&mut job.model)?;
            }
            job.weights_changed();
            to.push(job.device);
        }
        if to.iter().any(|d| d.is_cuda()) {
            // The copies are queued on the devices: the seconds are the copies', not the
            // queueing's.
            for d in std::iter::once(from).chain(to.iter().copied()) {
                if let Device::Cuda(i) = d {
                    tch::Cuda::synchronize(i as i64);
                }
            }
        }
        let mut record = lock(&self.record);
        record.weight_syncs.push(SyncRecord {
            source,
            targets: targets.to_vec(),
            from: device_name(from),
            to: to.iter().map(|&d| device_name(d)).collect(),
            bytes: snapshot_bytes * targets.len() as u64,
            seconds: started.elapsed().as_secs_f64(),
        });
        record.write(self.layout.record.as_ref());
        Ok(Timed::untimed(()))
    }

    fn save(&self, job_id: u64, request: &Value) -> Result<Value, EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        guard("save", || self.save_impl(&job, request))
    }

    fn load_checkpoint(&self, job_id: u64, request: &Value) -> Result<Value, EngineError> {
        let _writing = write_gate(&self.weight_gate);
        let job = self.job(job_id)?;
        let mut job = lock(&job);
        let out = guard("load-checkpoint", || self.load_impl(&mut job, request))?;
        job.weights_changed();
        Ok(out)
    }

    fn sleep_changed(&self, job_id: u64, asleep: bool) {
        // The job's type from the record, not the job: a running call may hold the job's lock,
        // and the server calls this on its async threads.
        let mut record = lock(&self.record);
        let Some(job_type) = record
            .jobs
            .iter()
            .find(|j| j.job_id == job_id)
            .map(|j| j.job_type.clone())
        else {
            return;
        };
        let frees = if job_type == JobType::Sampling.as_str() {
            record.rules.sampler_sleep_frees.clone()
        } else {
            record.rules.trainer_sleep_frees.clone()
        };
        record.sleeps.push(SleepRecord {
            job_id,
            job_type,
            asleep,
            frees: if asleep { frees } else { Vec::new() },
        });
        record.write(self.layout.record.as_ref());
    }

    fn weight_norm(&self, job_id: u64) -> Result<(f64, u64), EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        let _g = tch::no_grad_guard();
        let sq: f64 = job
            .model
            .params
            .iter()
            .map(|p| {
                p.to_kind(Kind::Float)
                    .square()
                    .sum(Kind::Float)
                    .double_value(&[])
            })
            .sum();
        Ok((sq.sqrt(), job.model.num_parameters()))
    }
}

impl std::fmt::Debug for TorchEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchEngine")
            .field("info", &self.info)
            .field("kind", &self.kind)
            .finish()
    }
}

/// `x` with each value's mantissa rounded to `bits` bits (to nearest, ties to even), in the
/// tensor's own dtype: `x = m · 2^e` with `1 ≤ |m| < 2` keeps `m` to multiples of `2^-bits`.
/// Zeros stay zeros. (A value just under a power of two whose `log2` rounds up to it is
/// rounded one bit coarser: a plant's precision, not a format's.)
fn round_mantissa(x: &Tensor, bits: u32) -> Tensor {
    let a = x.abs();
    let step = (a.log2().floor() - f64::from(bits)).exp2();
    let rounded = (x / &step).round() * &step;
    rounded.where_self(&a.gt(0.0), x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seven mantissa bits are bf16's: the rounding agrees with libtorch's own bf16 round trip
    /// (ties to even included) on normal values of every magnitude a weight takes.
    #[test]
    fn seven_mantissa_bits_are_bf16() {
        tch::manual_seed(7);
        let x = Tensor::randn([4096], (Kind::Float, Device::Cpu))
            * Tensor::randn([4096], (Kind::Float, Device::Cpu)).exp2();
        let ours = round_mantissa(&x, 7);
        let bf16 = x.to_kind(Kind::BFloat16).to_kind(Kind::Float);
        let differ = ours.ne_tensor(&bf16).sum(Kind::Int64).int64_value(&[]);
        // log2 of a value just under a power of two may round up to it (see round_mantissa).
        assert!(differ <= 4, "{differ} of 4096 values differ from bf16");
        let zero = Tensor::zeros([3], (Kind::Float, Device::Cpu));
        assert_eq!(
            round_mantissa(&zero, 7)
                .abs()
                .sum(Kind::Float)
                .double_value(&[]),
            0.0
        );
        // More bits, closer to the input.
        let err = |b| (round_mantissa(&x, b) - &x).abs().max().double_value(&[]);
        assert!(err(9) < err(7) && err(12) < err(9));
    }
}
