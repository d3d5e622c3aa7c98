//! Performance of the libtorch engine at the Qwen3-0.6B shape (random weights, CUDA, bf16):
//! forward+backward MFU with verl's FLOP formula and the H100/H200 peak (989 TFLOP/s), the
//! device's peak memory, and generate tokens/s. Prints one JSON line.
//!
//! Build here: `cargo build --release --features torch -p rlharness-torch --example torch_perf`; run on the GPU
//! machine with libtorch on LD_LIBRARY_PATH. `--smoke` runs tiny sizes on CPU.
//!
//! Options: `--smoke`, `--micro-batch N` (sequences per forward/backward, default 8),
//! `--prompts N` (16), `--n N` (5), `--prompt-len N` (512), `--response-len N` (1024),
//! `--gen-prompts N` (80), `--gen-prompt-len N` (512), `--gen-tokens N` (256),
//! `--iters N` (timed update iterations after one warm-up, default 2), `--autograd-head` (the
//! vocabulary head through autograd instead of by hand, to compare), `--no-generate`,
//! `--head-gib N` (`logits_optimization=compute` with this peak, which sizes the head's chunks),
//! `--gen-repeats N` (timed generate calls after a warm-up on the same shapes; the median is
//! reported, and each), `--graphs` (decode through a CUDA graph instead of eagerly).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rlharness_arctic::engine::{f32_tensor, Engine, ModelBatch};
use rlharness_arctic::torch_spec::{ModelKind, ModelSpec, TorchDType, TorchDevice, TorchSpec};
use rlharness_arctic::wire::api::JobType;
use rlharness_torch::grpo::{i64_tensor, job_config};
use rlharness_torch::sample::SamplingParams;
use rlharness_torch::TorchEngine;
use serde_json::json;

struct Args {
    smoke: bool,
    autograd_head: bool,
    no_generate: bool,
    graphs: bool,
    head_gib: Option<usize>,
    gen_repeats: usize,
    micro_batch: usize,
    prompts: usize,
    n: usize,
    prompt_len: usize,
    response_len: usize,
    gen_prompts: usize,
    gen_prompt_len: usize,
    gen_tokens: usize,
    iters: usize,
}

fn parse() -> anyhow::Result<Args> {
    let mut a = Args {
        smoke: false,
        autograd_head: false,
        no_generate: false,
        graphs: false,
        head_gib: None,
        gen_repeats: 1,
        micro_batch: 8,
        prompts: 16,
        n: 5,
        prompt_len: 512,
        response_len: 1024,
        gen_prompts: 80,
        gen_prompt_len: 512,
        gen_tokens: 256,
        iters: 2,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let flag = match args[i].as_str() {
            "--smoke" => Some(&mut a.smoke),
            "--autograd-head" => Some(&mut a.autograd_head),
            "--no-generate" => Some(&mut a.no_generate),
            "--graphs" => Some(&mut a.graphs),
            _ => None,
        };
        if let Some(f) = flag {
            *f = true;
            i += 1;
            continue;
        }
        let v: usize = args
            .get(i + 1)
            .ok_or_else(|| anyhow::anyhow!("{} needs a value", args[i]))?
            .parse()?;
        match args[i].as_str() {
            "--micro-batch" => a.micro_batch = v,
            "--prompts" => a.prompts = v,
            "--n" => a.n = v,
            "--prompt-len" => a.prompt_len = v,
            "--response-len" => a.response_len = v,
            "--gen-prompts" => a.gen_prompts = v,
            "--gen-prompt-len" => a.gen_prompt_len = v,
            "--gen-tokens" => a.gen_tokens = v,
            "--iters" => a.iters = v,
            "--head-gib" => a.head_gib = Some(v),
            "--gen-repeats" => a.gen_repeats = v,
            other => anyhow::bail!("unknown argument {other}"),
        }
        i += 2;
    }
    if a.smoke {
        a.prompts = 2;
        a.n = 2;
        a.prompt_len = 16;
        a.response_len = 32;
        a.gen_prompts = 4;
        a.gen_prompt_len = 16;
        a.gen_tokens = 8;
        a.micro_batch = 2;
        a.iters = 1;
    }
    Ok(a)
}

/// Device-wide memory in use, polled from the CUDA runtime (`cudaMemGetInfo`) on a side
/// thread: tch exposes no allocator statistics, and this bound includes the caching
/// allocator's reserve and the context, like nvidia-smi.
struct MemoryWatch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;

fn mem_get_info() -> Option<MemGetInfo> {
    for name in [c"libcudart.so.13", c"libcudart.so"] {
        // SAFETY: valid NUL-terminated names; handles live for the process.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            continue;
        }
        // SAFETY: symbol lookup in a loaded library.
        let f = unsafe { libc::dlsym(h, c"cudaMemGetInfo".as_ptr()) };
        if !f.is_null() {
            // SAFETY: cudaMemGetInfo(size_t* free, size_t* total) -> cudaError_t.
            return Some(unsafe { std::mem::transmute::<*mut libc::c_void, MemGetInfo>(f) });
        }
    }
    None
}

impl MemoryWatch {
    fn start(f: MemGetInfo) -> MemoryWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let (mut free, mut total) = (0usize, 0usize);
                // SAFETY: two valid out-pointers.
                if unsafe { f(&mut free, &mut total) } == 0 {
                    p.fetch_max((total - free) as u64, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        MemoryWatch {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed) as f64 / (1u64 << 30) as f64
    }
}

fn main() -> anyhow::Result<()> {
    let a = parse()?;
    let engine = TorchEngine::new(&engine_spec(&a), 0)?.with_hand_head(!a.autograd_head);
    let cfg = engine.model_config().clone();
    let watch = (!a.smoke)
        .then(mem_get_info)
        .flatten()
        .map(MemoryWatch::start);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let vocab = cfg.vocab_size as i64;

    let (b, s) = (a.prompts * a.n, a.prompt_len + a.response_len);
    let batch = update_batch(&a, vocab, &mut rng)?;
    let t = time_update(&engine, &a, &batch)?;
    let shape = cfg.shape();
    let flops = shape.training_flops(&vec![s as u64; b]);
    let peak_flops = 989e12;

    let gen_runs = if a.no_generate {
        Vec::new()
    } else {
        time_generate(&engine, &a, vocab, &mut rng)?
    };
    let gen_rates: Vec<f64> = gen_runs.iter().map(|&(t, s)| t as f64 / s).collect();
    let mut by_rate = gen_runs.clone();
    by_rate.sort_by(|a, b| (a.0 as f64 / a.1).total_cmp(&(b.0 as f64 / b.1)));
    // The median repeat.
    let (gen_tokens, gen_s) = by_rate
        .get(by_rate.len() / 2)
        .copied()
        .unwrap_or((0, f64::NAN));
    let peak_mem = watch.map(MemoryWatch::finish);

    let mfu = flops / t.update_s / peak_flops;
    let tps = gen_tokens as f64 / gen_s;
    let line = json!({
        "device": engine.info().device,
        "dtype": engine.info().dtype,
        "torch": engine.info().torch_version,
        "smoke": a.smoke,
        "params": engine.info().num_parameters,
        "sequences": b, "seq_len": s, "micro_batch": a.micro_batch,
        "update_flops": flops,
        "forward_backward_seconds": t.forward_backward_s,
        "update_seconds": t.update_s,
        "forward_only_seconds": t.forward_s,
        "mfu": mfu,
        "mfu_forward_backward_only": flops / t.forward_backward_s / peak_flops,
        "peak_device_memory_gib": peak_mem,
        "generate_prompts": a.gen_prompts, "generate_prompt_len": a.gen_prompt_len,
        "generated_tokens": gen_tokens,
        "generate_seconds": (!a.no_generate).then_some(gen_s),
        "generate_tokens_per_s": (!a.no_generate).then_some(tps),
        "generate_tokens_per_s_each": gen_rates,
        "cuda_graphs": a.graphs,
        "autograd_head": a.autograd_head,
        "head_gib": a.head_gib,
        "step_seconds": t.update_s - t.forward_backward_s,
        "targets": {"mfu": 0.35, "generate_tokens_per_s": 3.0 * 1158.0, "peak_memory_gib": 98.0},
        "pass": {
            "mfu": mfu >= 0.35,
            "generate": (!a.no_generate).then_some(tps >= 3.0 * 1158.0),
            "memory": peak_mem.map(|m| m <= 98.0),
        },
    });
    println!("{line}");
    Ok(())
}

/// The Qwen3-0.6B shape on CUDA in bf16, or (`--smoke`) a tiny one on the CPU.
fn engine_spec(a: &Args) -> TorchSpec {
    if a.smoke {
        return TorchSpec {
            model: Box::new(ModelSpec {
                kind: ModelKind::Qwen3,
                preset: Some("qwen3-0.6b".into()),
                layers: Some(2),
                d_model: Some(64),
                heads: Some(4),
                kv_heads: Some(2),
                head_dim: Some(16),
                ffn: Some(128),
                vocab_size: Some(512),
                ..ModelSpec::default()
            }),
            ..TorchSpec::default()
        };
    }
    TorchSpec {
        model: Box::new(ModelSpec {
            kind: ModelKind::Qwen3,
            preset: Some("qwen3-0.6b".into()),
            ..ModelSpec::default()
        }),
        device: TorchDevice::Cuda,
        dtype: TorchDType::Bf16,
        cuda_graphs: a.graphs,
        ..TorchSpec::default()
    }
}

/// One update's batch: B = prompts x n sequences of P + R random tokens, every response token
/// in the loss, advantages +1 and -1 alternating by row.
fn update_batch(a: &Args, vocab: i64, rng: &mut ChaCha8Rng) -> anyhow::Result<ModelBatch> {
    let (b, p, r) = (a.prompts * a.n, a.prompt_len, a.response_len);
    let s = p + r;
    let ids: Vec<i64> = (0..b * s).map(|_| rng.random_range(2..vocab)).collect();
    let prompts: Vec<i64> = (0..b)
        .flat_map(|i| ids[i * s..i * s + p].to_vec())
        .collect();
    let responses: Vec<i64> = (0..b)
        .flat_map(|i| ids[i * s + p..(i + 1) * s].to_vec())
        .collect();
    let mut resp_mask = vec![0f32; b * s];
    let mut adv = vec![0f32; b * s];
    for i in 0..b {
        for t in p..s {
            resp_mask[i * s + t] = 1.0;
            adv[i * s + t] = if i % 2 == 0 { 1.0 } else { -1.0 };
        }
    }
    Ok(ModelBatch {
        batch: vec![
            ("input_ids".into(), i64_tensor(vec![b, s], &ids)),
            (
                "attention_mask".into(),
                i64_tensor(vec![b, s], &vec![1; b * s]),
            ),
            ("prompts".into(), i64_tensor(vec![b, p], &prompts)),
            ("responses".into(), i64_tensor(vec![b, r], &responses)),
            ("response_mask".into(), f32_tensor(vec![b, s], &resp_mask)),
            (
                "old_log_probs".into(),
                f32_tensor(vec![b, s], &vec![-12.0; b * s]),
            ),
            ("advantages".into(), f32_tensor(vec![b, s], &adv)),
        ],
        meta: serde_json::from_value(
            json!({"pad_token_id": 0, "temperature": 1.0, "logits_compute_in_fp32": false,
            "actor_config": {"loss_agg_mode": "token-mean"}}),
        )?,
        post: vec![
            "apply_temperature".into(),
            "compute_entropy_and_logprobs".into(),
        ],
        loss_fn: Some("verl_grpo".into()),
    })
}

/// Mean seconds of the timed updates (after one warm-up), and of one old-log-prob pass.
struct UpdateTimes {
    forward_backward_s: f64,
    update_s: f64,
    forward_s: f64,
}

/// Creates the training job, runs `iters` timed updates after a warm-up (forward-backward,
/// then the optimizer step) and one timed forward-only pass, then destroys the job.
fn time_update(engine: &TorchEngine, a: &Args, batch: &ModelBatch) -> anyhow::Result<UpdateTimes> {
    let mut training = job_config(JobType::Training);
    training.ds_config = Some(json!({
        "train_micro_batch_size_per_gpu": a.micro_batch,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-6, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    }));
    if let Some(gib) = a.head_gib {
        training.ds_worker_config = Some(json!({
            "logits_optimization": "compute",
            "logits_optimization_peak_mem_size_in_gib": gib,
        }));
    }
    engine.create_job(1, &training)?;
    let mut fb_times = Vec::new();
    let mut update_times = Vec::new();
    for it in 0..=a.iters {
        let t0 = Instant::now();
        engine.forward_backward(1, batch)?;
        let fb = t0.elapsed().as_secs_f64();
        engine.step(1, None)?;
        let up = t0.elapsed().as_secs_f64();
        if it > 0 {
            fb_times.push(fb);
            update_times.push(up);
        }
    }
    // The old-log-prob pass over the same batch (no gradient): splits forward from backward.
    let fwd_batch = ModelBatch {
        loss_fn: None,
        ..batch.clone()
    };
    engine.forward(1, &fwd_batch)?;
    let t0 = Instant::now();
    engine.forward(1, &fwd_batch)?;
    let forward_s = t0.elapsed().as_secs_f64();
    engine.destroy_job(1);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    Ok(UpdateTimes {
        forward_backward_s: mean(&fb_times),
        update_s: mean(&update_times),
        forward_s,
    })
}

/// Generate: gen_prompts prompts of gen_prompt_len random tokens, gen_tokens each, after a
/// warm-up on the timed shapes (all prompts, a few tokens). (tokens, seconds) per repeat.
fn time_generate(
    engine: &TorchEngine,
    a: &Args,
    vocab: i64,
    rng: &mut ChaCha8Rng,
) -> anyhow::Result<Vec<(usize, f64)>> {
    engine.create_job(2, &job_config(JobType::Sampling))?;
    let gen_prompts: Vec<Vec<i64>> = (0..a.gen_prompts)
        .map(|_| {
            (0..a.gen_prompt_len)
                .map(|_| rng.random_range(2..vocab))
                .collect()
        })
        .collect();
    let params = SamplingParams {
        n: 1,
        temperature: 1.0,
        top_p: 1.0,
        top_k: -1,
        max_tokens: a.gen_tokens,
        seed: Some(0),
        ignore_eos: true,
        logprobs: false,
    };
    let warm = SamplingParams {
        max_tokens: 8,
        ..params.clone()
    };
    engine.generate_ids(2, &gen_prompts, &warm)?;
    let mut runs = Vec::new();
    for _ in 0..a.gen_repeats.max(1) {
        let t0 = Instant::now();
        let out = engine.generate_ids(2, &gen_prompts, &params)?;
        let secs = t0.elapsed().as_secs_f64();
        runs.push((out.iter().map(|o| o.tokens.len()).sum::<usize>(), secs));
    }
    Ok(runs)
}
