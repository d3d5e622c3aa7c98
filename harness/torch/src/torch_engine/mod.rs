//! The engine's state: [`TorchEngine`], its jobs (each with its own weights, behind its own
//! mutex), the locks and gates they are taken under, its construction and its layout.
//!
//! By part: `generate.rs` sampling and the generate queues, `train.rs` the forward and
//! forward-backward passes with their loss, `checkpoint.rs` save and load, `calls.rs` the
//! Arctic routes (the `Engine` implementation).

mod calls;
mod checkpoint;
mod generate;
mod train;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tch::{Device, Kind, Tensor};

use self::generate::GenQueue;
use crate::layout::{device_name, EngineLayout, LayoutRecord};
use crate::model::{Decoder, DecoderConfig};
use crate::optim::AdamW;
use crate::settings::WorkerSettings;
use crate::TORCH_VERSION;
use crate::{numerics, warm_start};
use rlharness_arctic::engine::EngineError;
use rlharness_arctic::mock::policy::hash_words;
use rlharness_arctic::torch_spec::{ModelKind, TorchDType, TorchDevice, TorchSpec};
use rlharness_arctic::wire::api::JobType;

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
    pub numerics: Option<rlharness_arctic::engine::Numerics>,
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
        let config = DecoderConfig::from_spec(&spec.model)
            .map_err(|e| EngineError::bad_request(e.to_string()))?;
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
        let numerics = kernels.map(|k| rlharness_arctic::engine::Numerics {
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
    pub fn runtime(&self) -> rlharness_arctic::engine::Runtime {
        rlharness_arctic::engine::Runtime {
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
