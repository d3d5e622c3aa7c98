//! The scenario's `backend: {kind: torch, ...}` block. Defined without the `torch` feature so
//! every scenario validates on any build.
//!
//! ```yaml
//! backend:
//!   kind: torch
//!   model: {kind: tiny, d_model: 64, layers: 2, heads: 4, kv_heads: 2, ffn: 256}
//!   device: cpu          # cpu | cuda
//!   dtype: f32           # f32 | bf16
//!   threads: 2           # CPU intra-op threads, pinned and recorded
//!   cpu_isa: avx2        # CPU kernels' instruction set: avx2 | avx512 | baseline | native
//!   warm_start: {steps: 600, lr: 0.003, batch: 64, correct_fraction: 0.35}
//!   cache_dir: target/rlharness-cache
//!   cuda_graphs: true    # CUDA: decode through captured CUDA graphs (false: eager)
//! ```
//! The defaults are the CPU flagship's. `model: {kind: qwen3, preset: qwen3-0.6b}` builds the
//! real-size Qwen3 shape on random weights for performance scenarios (no warm start).

use serde::{Deserialize, Serialize};

pub mod decoder;
pub mod layout;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TorchSpec {
    /// Boxed: the model block is large and `BackendSpec` holds this inline.
    #[serde(default)]
    pub model: Box<ModelSpec>,
    #[serde(default)]
    pub device: TorchDevice,
    #[serde(default)]
    pub dtype: TorchDType,
    /// Intra-op threads on CPU. Pinned because results are only bit-identical for the same
    /// seed AND thread count (reduction order depends on it).
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// The instruction-set level the CPU kernels are pinned to (CPU device only). Kernels
    /// of another level round differently, so the same seed gives other numbers on another
    /// CPU model unless the level is pinned.
    #[serde(default)]
    pub cpu_isa: CpuIsa,
    #[serde(default)]
    pub warm_start: WarmStartSpec,
    /// Where warm-started weights are cached, keyed by a hash of everything that shapes them.
    /// Relative paths are taken from the working directory.
    #[serde(default = "default_cache_dir")]
    pub cache_dir: String,
    /// Fault injection for self-tests: every `/forward-backward` takes this fraction longer
    /// (the engine sleeps that fraction of the call's compute time after computing), as a
    /// slower kernel would; MFU and throughput drop by about `slowdown / (1 + slowdown)` of
    /// the update's share of the step. 0 (the default) is off.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slowdown: f64,
    /// Fault injection for self-tests: the sampler's copy of the weights is rounded to this
    /// dtype when it is made and at every weight sync (it still computes in `dtype`), as a
    /// sampler that loads the weights in bf16 beside an fp32 trainer holds them. The sampler
    /// and the trainer then disagree on the log-probabilities of the same tokens. Absent (the
    /// default): the sampler holds the trainer's weights exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_dtype: Option<TorchDType>,
    /// Fault injection for self-tests, finer than `sampler_dtype`: the sampler's copy of the
    /// weights keeps this many bits of each f32 mantissa (rounded to nearest, ties to even),
    /// when it is made and at every weight sync. bf16 keeps 7, f16 10, f32 23; 9 puts the
    /// sampler-vs-trainer mismatch just past its default stability floors on the flagship
    /// (the near-threshold twin of the bf16 self-test). Absent (the default): off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_mantissa_bits: Option<u32>,
    /// CUDA only: decode through captured CUDA graphs, one launch a token instead of a few
    /// hundred kernels (docs/performance.md, "Decoding through CUDA graphs"). On by default;
    /// `false` decodes eagerly. The CPU never uses graphs.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub cuda_graphs: bool,
}

fn yes() -> bool {
    true
}

fn is_true(v: &bool) -> bool {
    *v
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl Default for TorchSpec {
    fn default() -> Self {
        Self {
            model: Box::default(),
            device: TorchDevice::default(),
            dtype: TorchDType::default(),
            threads: default_threads(),
            cpu_isa: CpuIsa::default(),
            warm_start: WarmStartSpec::default(),
            cache_dir: default_cache_dir(),
            slowdown: 0.0,
            sampler_dtype: None,
            sampler_mantissa_bits: None,
            cuda_graphs: true,
        }
    }
}

impl TorchSpec {
    /// The spec with its file paths (the warm-start checkpoint) resolved beside
    /// `scenario_file`, as the scenario wrote them relative to itself.
    pub fn beside(&self, scenario_file: &std::path::Path) -> TorchSpec {
        let mut spec = self.clone();
        if let Some(c) = &self.warm_start.checkpoint {
            let p = std::path::Path::new(c);
            if p.is_relative() {
                let dir = scenario_file.parent().unwrap_or(std::path::Path::new("."));
                spec.warm_start.checkpoint = Some(dir.join(p).display().to_string());
            }
        }
        spec
    }
}

fn default_threads() -> usize {
    2
}
fn default_cache_dir() -> String {
    DEFAULT_CACHE_DIR.into()
}

/// A scenario's `cache_dir` when it sets none (under the project's build folder, where a run
/// from the project's root puts it).
pub const DEFAULT_CACHE_DIR: &str = "target/rlharness-cache";

/// The user's cache folder for a server started on its own (`serve torch`), never the working
/// directory: `$XDG_CACHE_HOME/rlharness` (an absolute path), else `$HOME/.cache/rlharness`,
/// else the system's temporary folder.
pub fn user_cache_dir() -> String {
    let abs = |v: &str| {
        std::env::var_os(v)
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let dir = abs("XDG_CACHE_HOME")
        .or_else(|| abs("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("rlharness");
    dir.display().to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TorchDevice {
    #[default]
    Cpu,
    Cuda,
}

/// The dtype of the model weights and activations. With `bf16` the trainer keeps fp32 master
/// weights and optimizer state, as DeepSpeed's bf16 mode does.
/// The instruction-set level of libtorch's CPU kernels, set through the three switches that
/// choose them: ATen's vectorised kernels (`ATEN_CPU_CAPABILITY`), MKL's BLAS (`MKL_CBWR`,
/// conditional numerical reproducibility) and oneDNN (`ONEDNN_MAX_CPU_ISA`). Left alone
/// (`native`), each picks the widest the CPU has, so an AVX-512 host and an AVX2 host compute
/// the same run with other roundings. `avx2` (the default) is the widest level every x86-64
/// server of the last decade has. MKL runs in its `STRICT` mode: without it, a product's last
/// bit may depend on how its operands happen to be aligned in memory (measured: the sampler's
/// and the trainer's copies of the same weights gave log-probs one ulp apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuIsa {
    #[default]
    Avx2,
    Avx512,
    /// No vector extensions beyond the x86-64 baseline (ATen's `default` kernels, SSE4.1 in
    /// oneDNN, MKL's compatible code path): the slowest and the most portable.
    Baseline,
    /// Whatever the host has (and whatever the process environment already says).
    Native,
}

impl CpuIsa {
    pub fn as_str(self) -> &'static str {
        match self {
            CpuIsa::Avx2 => "avx2",
            CpuIsa::Avx512 => "avx512",
            CpuIsa::Baseline => "baseline",
            CpuIsa::Native => "native",
        }
    }

    /// The environment that selects this level, as `(variable, value)`; empty for `native`.
    pub fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            CpuIsa::Avx2 => &[
                ("ATEN_CPU_CAPABILITY", "avx2"),
                ("MKL_CBWR", "AVX2,STRICT"),
                ("ONEDNN_MAX_CPU_ISA", "AVX2"),
            ],
            CpuIsa::Avx512 => &[
                ("ATEN_CPU_CAPABILITY", "avx512"),
                ("MKL_CBWR", "AVX512,STRICT"),
                ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE"),
            ],
            CpuIsa::Baseline => &[
                ("ATEN_CPU_CAPABILITY", "default"),
                ("MKL_CBWR", "COMPATIBLE,STRICT"),
                ("ONEDNN_MAX_CPU_ISA", "SSE41"),
            ],
            CpuIsa::Native => &[],
        }
    }

    /// The CPU flags (as `/proc/cpuinfo` names them) this level needs.
    pub fn needs(self) -> &'static [&'static str] {
        match self {
            CpuIsa::Avx2 => &["avx2", "fma"],
            CpuIsa::Avx512 => &["avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"],
            CpuIsa::Baseline | CpuIsa::Native => &[],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TorchDType {
    #[default]
    F32,
    Bf16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// A small Qwen3-style decoder over the arith task's character vocabulary.
    #[default]
    Tiny,
    /// The Qwen3 architecture at a named preset's size, on random weights.
    Qwen3,
}

/// The model. Every size field is optional: `tiny` fills the flagship's sizes, `qwen3` the
/// preset's; a field given here overrides (e.g. fewer `layers` for a smoke run).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    #[serde(default)]
    pub kind: ModelKind,
    /// `qwen3-0.6b` or `qwen3-1.7b`; required for `qwen3`, refused for `tiny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_model: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// SwiGLU inner width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
}

/// The supervised warm start that stands in for pretraining (tiny model only). It teaches the
/// answer FORMAT on targets that are right only `correct_fraction` of the time (else a random
/// number of the same range), so RL starts from a model with the format right and low reward.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WarmStartSpec {
    /// Optimizer steps; 0 leaves the random initialisation.
    #[serde(default = "default_ws_steps")]
    pub steps: usize,
    #[serde(default = "default_ws_lr")]
    pub lr: f64,
    /// Sequences per step.
    #[serde(default = "default_ws_batch")]
    pub batch: usize,
    #[serde(default = "default_ws_correct")]
    pub correct_fraction: f64,
    /// Largest operand of the `a+b` problems it trains on.
    #[serde(default = "default_ws_max_operand")]
    pub max_operand: i64,
    /// Start from these weights (a safetensors file, relative to the scenario file) instead
    /// of training: a "pretrained checkpoint" that ships with the scenario, so every host
    /// starts RL from the same bits. Training it again on another CPU model gives another
    /// model (its kernels round differently over hundreds of steps), and with it another
    /// learning curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

impl Default for WarmStartSpec {
    fn default() -> Self {
        Self {
            steps: default_ws_steps(),
            lr: default_ws_lr(),
            batch: default_ws_batch(),
            correct_fraction: default_ws_correct(),
            max_operand: default_ws_max_operand(),
            checkpoint: None,
        }
    }
}

fn default_ws_steps() -> usize {
    600
}
fn default_ws_lr() -> f64 {
    3e-3
}
fn default_ws_batch() -> usize {
    64
}
fn default_ws_correct() -> f64 {
    0.35
}
fn default_ws_max_operand() -> i64 {
    9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_block_takes_flagship_defaults() {
        let spec: TorchSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec, TorchSpec::default());
        assert_eq!(spec.threads, 2);
        assert_eq!(spec.model.kind, ModelKind::Tiny);
        assert_eq!(spec.device, TorchDevice::Cpu);
    }

    #[test]
    fn qwen3_block_parses_and_unknown_keys_are_refused() {
        let spec: TorchSpec = serde_json::from_str(
            r#"{"model": {"kind": "qwen3", "preset": "qwen3-0.6b"}, "device": "cuda", "dtype": "bf16"}"#,
        )
        .unwrap();
        assert_eq!(spec.model.kind, ModelKind::Qwen3);
        assert_eq!(spec.dtype, TorchDType::Bf16);
        let err = serde_json::from_str::<TorchSpec>(r#"{"model": {"kind": "tiny", "width": 3}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("width"), "{err}");
        assert!(serde_json::from_str::<TorchSpec>(r#"{"device": "tpu"}"#).is_err());
    }
}
