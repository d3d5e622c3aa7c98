//! The "pretrained" tiny model: a short, deterministic supervised warm start on the arith
//! task's answer format, cached on disk by a hash of everything that shapes the weights. RL
//! then starts, as it does in practice, from a model that already writes `#### <number>` and
//! stops, but is right only about as often as its noisy targets were.

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use tch::{Device, Kind, Tensor};

use super::loss::{aggregate, AggMode, AggTotals};
use super::model::{CopyError, Decoder, DecoderConfig};
use super::optim::{AdamW, OptimConfig, Scheduler};
use rlharness_arctic::fsx::FsError;
use rlharness_arctic::task::{CharTokenizer, EOS_ID, PAD_ID};
use rlharness_arctic::torch_spec::WarmStartSpec;

/// The shipped warm start of the default tiny model (`scenarios/models/`): what `serve torch`
/// serves without a scenario, so it starts in seconds instead of training for minutes.
pub const SHIPPED: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/models/tiny-arith-warm-v1.safetensors"
));
/// Its name, and the largest operand it was trained on.
pub const SHIPPED_NAME: &str = "tiny-arith-warm-v1.safetensors";
pub const SHIPPED_MAX_OPERAND: i64 = 4;

/// The shipped warm start as a file under `cache_dir` (written once, atomically), for a
/// spec's `warm_start.checkpoint`.
pub fn shipped_file(cache_dir: &Path) -> Result<PathBuf, FsError> {
    let path = cache_dir.join(SHIPPED_NAME);
    if std::fs::read(&path).is_ok_and(|b| b == SHIPPED) {
        return Ok(path);
    }
    rlharness_arctic::fsx::create_dir_all(cache_dir)?;
    rlharness_arctic::fsx::write_atomic(&path, SHIPPED)?;
    Ok(path)
}

/// Why the warm start could be neither loaded nor trained and cached.
#[derive(Debug, thiserror::Error)]
pub enum WarmStartError {
    #[error("backend.warm_start.checkpoint {} is not a file", .0.display())]
    NotAFile(PathBuf),
    #[error("cannot read warm start {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: tch::TchError,
    },
    #[error("warm start {} lacks {name}", path.display())]
    Lacks { path: PathBuf, name: String },
    #[error("warm start {}: {source}", path.display())]
    Copy { path: PathBuf, source: CopyError },
    #[error("cannot write warm-start cache {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: tch::TchError,
    },
    #[error(transparent)]
    Fs(#[from] FsError),
}

/// Bumped whenever the warm-start procedure changes, so stale caches are not reused.
const PROCEDURE_VERSION: u32 = 1;
/// The warm start's own seed: the "pretrained checkpoint" is the same for every run seed.
const WARM_SEED: u64 = 0x5EED_0A17;

/// The cache key: procedure, model sizes, warm-start settings, thread count (reductions and
/// so the weights depend on it) and the host's numeric fingerprint (a cache trained with
/// other kernels holds other weights).
pub fn cache_key(
    config: &DecoderConfig,
    ws: &WarmStartSpec,
    threads: usize,
    fingerprint: Option<&str>,
) -> String {
    let fp = fingerprint.unwrap_or("-");
    let text = format!(
        "v{PROCEDURE_VERSION} {config:?} {ws:?} threads={threads} seed={WARM_SEED} numerics={fp}"
    );
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

pub fn cache_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("tiny-warm-{key}.safetensors"))
}

/// Load the cached warm start, or train and cache it. Returns the model and whether it came
/// from the cache.
pub fn pretrained(
    config: &DecoderConfig,
    ws: &WarmStartSpec,
    threads: usize,
    fingerprint: Option<&str>,
    cache_dir: &Path,
    device: Device,
    kind: Kind,
) -> Result<(Decoder, bool), WarmStartError> {
    // On CUDA the warm start trains on the device (seconds, where the host's CPU would take
    // minutes for a bigger model), and its cache is the device's own.
    let on_cuda = device != Device::Cpu;
    let key = if on_cuda {
        cache_key(config, ws, 0, Some(&format!("{device:?}")))
    } else {
        cache_key(config, ws, threads, fingerprint)
    };
    let shipped = ws.checkpoint.as_ref().map(PathBuf::from);
    let cached = shipped.is_none();
    let path = shipped.unwrap_or_else(|| cache_path(cache_dir, &key));
    tch::manual_seed(WARM_SEED as i64);
    let mut model = Decoder::new_random(config.clone(), Device::Cpu, Kind::Float);
    if !cached && !path.is_file() {
        return Err(WarmStartError::NotAFile(path));
    }
    if path.is_file() {
        let tensors = match Tensor::read_safetensors(&path) {
            Ok(t) => t,
            Err(source) => return Err(WarmStartError::Read { path, source }),
        };
        let by_name: std::collections::HashMap<String, Tensor> = tensors.into_iter().collect();
        let ordered: Result<Vec<Tensor>, WarmStartError> = model
            .names
            .iter()
            .map(|n| {
                by_name
                    .get(n)
                    .map(|t| t.shallow_clone())
                    .ok_or_else(|| WarmStartError::Lacks {
                        path: path.clone(),
                        name: n.clone(),
                    })
            })
            .collect();
        if let Err(source) = model.copy_from(&ordered?) {
            return Err(WarmStartError::Copy { path, source });
        }
        return Ok((to_target(model, device, kind), true));
    }
    if on_cuda {
        model = to_target(model, device, Kind::Float);
    }
    train(&mut model, ws, WARM_SEED, true);
    rlharness_arctic::fsx::create_dir_all(cache_dir)?;
    let named: Vec<(String, Tensor)> = model
        .names
        .iter()
        .cloned()
        .zip(
            model
                .params
                .iter()
                .map(|p| p.detach().to_device(Device::Cpu)),
        )
        .collect();
    // Write then rename, so a concurrent reader never sees half a file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if let Err(source) = Tensor::write_safetensors(&named, &tmp) {
        return Err(WarmStartError::Write { path: tmp, source });
    }
    rlharness_arctic::fsx::rename(&tmp, &path)?;
    Ok((to_target(model, device, kind), false))
}

fn to_target(model: Decoder, device: Device, kind: Kind) -> Decoder {
    if device == Device::Cpu && kind == Kind::Float {
        return model;
    }
    let _g = tch::no_grad_guard();
    Decoder {
        params: model
            .params
            .iter()
            .map(|p| p.to_device(device).to_kind(kind))
            .collect(),
        device,
        kind,
        fused: device != Device::Cpu,
        ..model
    }
}

/// One supervised example: `Q:a+b=?\nA:` then `#### <target>` and end-of-sequence, where the
/// target is the sum with probability `correct_fraction`, else a uniform draw of the same range.
pub fn example(rng: &mut ChaCha8Rng, ws: &WarmStartSpec) -> (Vec<i64>, Vec<i64>) {
    let a = rng.random_range(0..=ws.max_operand);
    let b = rng.random_range(0..=ws.max_operand);
    let target = if rng.random_bool(ws.correct_fraction.clamp(0.0, 1.0)) {
        a + b
    } else {
        rng.random_range(0..=2 * ws.max_operand)
    };
    let prompt = CharTokenizer::encode(&format!("Q:{a}+{b}=?\nA:")).unwrap_or_default();
    let mut response = CharTokenizer::encode(&format!("#### {target}")).unwrap_or_default();
    response.push(EOS_ID);
    (prompt, response)
}

/// `ws.steps` supervised AdamW steps on examples drawn from a stream of `seed`; with
/// `progress`, a line on stderr every 50 steps.
pub(crate) fn train(model: &mut Decoder, ws: &WarmStartSpec, seed: u64, progress: bool) {
    if ws.steps == 0 {
        return;
    }
    model.set_requires_grad(true);
    let config = OptimConfig {
        lr: ws.lr,
        betas: (0.9, 0.999),
        eps: 1e-8,
        weight_decay: 0.0,
        clip: 1.0,
        scheduler: Scheduler::Constant,
        micro_batch: ws.batch,
    };
    let mut opt = AdamW::new(config, &model.params);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let started = std::time::Instant::now();
    // Minutes on a small CPU: a line every 50 steps says how far it is.
    let every = 50.min(ws.steps).max(1);
    for step in 1..=ws.steps {
        let rows: Vec<(Vec<i64>, Vec<i64>)> = (0..ws.batch.max(1))
            .map(|_| example(&mut rng, ws))
            .collect();
        let p = rows.iter().map(|r| r.0.len()).max().unwrap_or(1);
        let r = rows.iter().map(|r| r.1.len()).max().unwrap_or(1);
        let mut ids = Vec::new();
        let mut mask = Vec::new();
        let mut loss_mask = Vec::new();
        for (pr, re) in &rows {
            let lp = p - pr.len();
            ids.extend(std::iter::repeat_n(PAD_ID, lp));
            ids.extend(pr);
            ids.extend(re);
            ids.extend(std::iter::repeat_n(PAD_ID, r - re.len()));
            mask.extend(std::iter::repeat_n(0i64, lp));
            mask.extend(std::iter::repeat_n(1i64, pr.len() + re.len()));
            mask.extend(std::iter::repeat_n(0i64, r - re.len()));
            loss_mask.extend((0..r).map(|t| if t < re.len() { 1.0f32 } else { 0.0 }));
        }
        let b = rows.len() as i64;
        let s = (p + r) as i64;
        let dev = model.device;
        let ids = Tensor::from_slice(&ids).view([b, s]).to_device(dev);
        let mask = Tensor::from_slice(&mask).view([b, s]).to_device(dev);
        let loss_mask = Tensor::from_slice(&loss_mask)
            .view([b, r as i64])
            .to_device(dev);
        let pos = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        let hidden = model.hidden_states(&ids, &pos, Some(&mask));
        let h = hidden.narrow(1, p as i64 - 1, r as i64);
        let logits = model.logits(&h, true);
        let targets = ids.narrow(1, p as i64, r as i64);
        let lp = logits
            .log_softmax(-1, Kind::Float)
            .gather(-1, &targets.unsqueeze(-1), false)
            .squeeze_dim(-1);
        let loss = aggregate(
            &lp.neg(),
            &loss_mask,
            AggMode::TokenMean,
            AggTotals::of(&loss_mask),
        );
        loss.backward();
        opt.step(&model.params, None);
        if progress && (step % every == 0 || step == ws.steps) {
            let secs = started.elapsed().as_secs_f64();
            let eta = secs / step as f64 * (ws.steps - step) as f64;
            eprintln!(
                "warm start: step {step}/{}, loss {:.4} ({secs:.0} s, ETA {eta:.0} s)",
                ws.steps,
                loss.double_value(&[])
            );
        }
    }
    model.set_requires_grad(false);
}
