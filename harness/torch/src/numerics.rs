//! The CPU kernels' instruction-set level, and the numeric fingerprint of this host.
//!
//! libtorch picks its CPU kernels when they are first used: ATen's vectorised kernels from
//! `ATEN_CPU_CAPABILITY`, MKL's BLAS from `MKL_CBWR`, oneDNN's from `ONEDNN_MAX_CPU_ISA`, each
//! by default the widest the CPU has. Kernels of different widths sum in different orders,
//! so the same seed on an AVX-512 host and on an AVX2 host gives two runs that part at the
//! first step. The harness pins the level (`backend.cpu_isa`, default `avx2`) by setting the
//! three variables before the first tensor op of the process, and records what it set.
//!
//! Pinning narrows the hosts' differences; it does not prove them gone (a kernel library may
//! still branch on the CPU model). So every CPU engine also computes a numeric fingerprint:
//! a hash of the exact bits of a small training step and a sampling pass of the scenario's
//! model, on this host, with these kernels and this thread count. Two hosts with the same
//! fingerprint computed those probes bit for bit alike; the golden records its fingerprint,
//! and the exact lane of the judge applies only where they match (`compare/exact.rs`).

use std::sync::OnceLock;

use sha2::{Digest, Sha256};
use tch::{Device, Kind, Tensor};

use super::model::{Decoder, DecoderConfig};
use super::sample::{sample, Draws, SamplingParams};
use super::warm_start;
use rlharness_arctic::engine::{CpuKernels, EngineError};
use rlharness_arctic::task::{CharTokenizer, EOS_ID, PAD_ID};
use rlharness_arctic::torch_spec::{CpuIsa, WarmStartSpec};

/// What the process's kernels were pinned to (the first engine's choice holds for the
/// process: libtorch reads the switches once).
static PINNED: OnceLock<CpuKernels> = OnceLock::new();

fn host_flags() -> Vec<String> {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("flags"))
                .map(|l| l.split_whitespace().skip(2).map(str::to_string).collect())
        })
        .unwrap_or_default()
}

/// The level this host can run: the asked one, or the widest narrower one it has, with why.
fn effective(asked: CpuIsa, flags: &[String]) -> (CpuIsa, Option<String>) {
    let has = |isa: CpuIsa| isa.needs().iter().all(|f| flags.iter().any(|g| g == f));
    // Without /proc/cpuinfo (not Linux) nothing can be checked; trust the ask.
    if flags.is_empty() || has(asked) {
        return (asked, None);
    }
    let fallback = [CpuIsa::Avx2, CpuIsa::Baseline]
        .into_iter()
        .find(|i| *i != asked && has(*i))
        .unwrap_or(CpuIsa::Baseline);
    let missing: Vec<&str> = asked
        .needs()
        .iter()
        .copied()
        .filter(|f| !flags.iter().any(|g| g == f))
        .collect();
    (
        fallback,
        Some(format!(
            "this CPU lacks {} for cpu_isa {}; its kernels run at {} instead",
            missing.join(", "),
            asked.as_str(),
            fallback.as_str()
        )),
    )
}

/// Pin the CPU kernels to `asked` for this process, before libtorch's first CPU op. A later
/// engine asking for another level gets an error: the switches are read once per process.
pub fn pin(asked: CpuIsa) -> Result<CpuKernels, EngineError> {
    let (isa, warning) = effective(asked, &host_flags());
    let pinned = PINNED.get_or_init(|| {
        for (var, value) in isa.env() {
            // Set before any tensor op: each library reads its switch at its first use.
            std::env::set_var(var, value);
        }
        let env = ["ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"]
            .iter()
            .filter_map(|v| std::env::var(v).ok().map(|x| format!("{v}={x}")))
            .collect();
        if let Some(w) = &warning {
            tracing::warn!("{w}");
        }
        CpuKernels {
            isa: isa.as_str().to_string(),
            env,
            note: warning.clone(),
        }
    });
    if pinned.isa != isa.as_str() {
        return Err(EngineError::bad_request(format!(
            "backend.cpu_isa {} asked for, but this process's CPU kernels are already pinned \
             to {} (libtorch reads the switch once per process): run the scenario on its own",
            isa.as_str(),
            pinned.isa
        )));
    }
    Ok(pinned.clone())
}

/// The largest model the probe trains in its own shape.
const PROBE_MAX_PARAMS: i64 = 5_000_000;

/// The probe's own seed.
const PROBE_SEED: u64 = 0xF1A9_0001;

/// Hash of the exact bits of a probe run on this host: two supervised AdamW steps of a
/// fresh `config` model (forward, backward, clipping, the optimizer's arithmetic) and one
/// sampling pass, and a prefill and a decode step through the KV cache. The caller holds torch's generator lock.
pub fn fingerprint(config: &DecoderConfig, threads: usize) -> String {
    // A real-size model (a Qwen3 preset on the CPU) would make the probe cost minutes; its
    // kernels are the tiny model's at other sizes, so the tiny shape probes them instead.
    let params: i64 = config
        .parameter_shapes()
        .iter()
        .map(|(_, shape)| shape.iter().product::<i64>())
        .sum();
    let config = if params <= PROBE_MAX_PARAMS {
        config.clone()
    } else {
        DecoderConfig::tiny()
    };
    tch::manual_seed(PROBE_SEED as i64);
    let mut model = Decoder::new_random(config, Device::Cpu, Kind::Float);
    let ws = WarmStartSpec {
        steps: 2,
        batch: 16,
        ..WarmStartSpec::default()
    };
    warm_start::train(&mut model, &ws, PROBE_SEED, false);
    let prompts: Vec<Vec<i64>> = ["Q:1+2=?\nA:", "Q:4+4=?\nA:"]
        .iter()
        .map(|p| CharTokenizer::encode(p).unwrap_or_default())
        .collect();
    let params = SamplingParams {
        n: 4,
        temperature: 1.0,
        top_p: 1.0,
        top_k: -1,
        max_tokens: 8,
        seed: None,
        ignore_eos: false,
        logprobs: false,
    };
    let drawn = sample(
        &model,
        &prompts,
        &params,
        EOS_ID,
        PAD_ID,
        &mut Draws::host(PROBE_SEED),
    );
    // The decode path's arithmetic (prefill, then one cached step), bit for bit.
    let decoded = {
        let _g = tch::no_grad_guard();
        let (b, s) = (prompts.len() as i64, prompts[0].len() as i64);
        let ids = Tensor::from_slice(&prompts.concat()).view([b, s]);
        let pos = Tensor::arange(s, (Kind::Int64, Device::Cpu))
            .unsqueeze(0)
            .repeat([b, 1]);
        let key_mask = Tensor::ones([b, s + 1], (Kind::Int64, Device::Cpu));
        let mut cache = model.new_cache(b, s + 1);
        let first = model.logits(&model.extend(&mut cache, &ids, &pos, &key_mask), true);
        let next = first.argmax(-1, true);
        let step = model.logits(
            &model.extend(&mut cache, &next, &(pos.narrow(1, s - 1, 1) + 1), &key_mask),
            true,
        );
        Tensor::cat(&[first, step], 0)
    };
    let mut h = Sha256::new();
    h.update(format!("torch {} threads {threads}", super::TORCH_VERSION).as_bytes());
    for p in &model.params {
        let flat = p.detach().to_kind(Kind::Float).reshape([-1]);
        for x in Vec::<f32>::try_from(&flat).unwrap_or_default() {
            h.update(x.to_bits().to_le_bytes());
        }
    }
    for s in &drawn {
        for t in &s.tokens {
            h.update(t.to_le_bytes());
        }
    }
    let flat = decoded.to_kind(Kind::Float).reshape([-1]);
    for x in Vec::<f32>::try_from(&flat).unwrap_or_default() {
        h.update(x.to_bits().to_le_bytes());
    }
    rlharness_arctic::engine::fingerprint_hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_host_without_the_asked_level_falls_back_and_says_so() {
        let avx2_only = flags("sse4_2 avx avx2 fma");
        assert_eq!(effective(CpuIsa::Avx2, &avx2_only), (CpuIsa::Avx2, None));
        let (isa, why) = effective(CpuIsa::Avx512, &avx2_only);
        assert_eq!(isa, CpuIsa::Avx2);
        assert!(why.unwrap().contains("avx512f"));
        let old = flags("sse4_2 avx");
        let (isa, why) = effective(CpuIsa::Avx2, &old);
        assert_eq!(isa, CpuIsa::Baseline);
        assert!(why.unwrap().contains("lacks avx2, fma"));
        assert_eq!(effective(CpuIsa::Native, &old), (CpuIsa::Native, None));
    }
}
