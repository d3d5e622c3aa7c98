//! verl's FLOP estimate for a dense decoder (Qwen2/Qwen3 formula) and promised peaks; the
//! declared model of a scenario's `metrics` block and of the mock's cost model.

use serde::{Deserialize, Serialize};

/// The declared model: a preset name (`qwen3-0.6b`) or an explicit shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ModelSpec {
    Preset(String),
    Shape(ModelShape),
}

impl ModelSpec {
    pub fn shape(&self) -> Option<ModelShape> {
        match self {
            ModelSpec::Preset(name) => ModelShape::preset(name),
            ModelSpec::Shape(s) => Some(*s),
        }
    }
}

/// The shape of a dense decoder, as a model's `config.json` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelShape {
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub num_layers: u64,
    pub num_heads: u64,
    pub num_kv_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
}

impl ModelShape {
    /// Qwen3-0.6B (`Qwen/Qwen3-0.6B` config.json).
    pub(crate) const QWEN3_0_6B: ModelShape = ModelShape {
        hidden_size: 1024,
        intermediate_size: 3072,
        num_layers: 28,
        num_heads: 16,
        num_kv_heads: 8,
        head_dim: 128,
        vocab_size: 151_936,
    };
    /// Qwen3-1.7B.
    pub(crate) const QWEN3_1_7B: ModelShape = ModelShape {
        hidden_size: 2048,
        intermediate_size: 6144,
        num_layers: 28,
        num_heads: 16,
        num_kv_heads: 8,
        head_dim: 128,
        vocab_size: 151_936,
    };

    /// The names [`ModelShape::preset`] knows.
    pub const PRESETS: &'static [&'static str] = &["qwen3-0.6b", "qwen3-1.7b"];

    pub fn preset(name: &str) -> Option<ModelShape> {
        match name {
            "qwen3-0.6b" => Some(Self::QWEN3_0_6B),
            "qwen3-1.7b" => Some(Self::QWEN3_1_7B),
            _ => None,
        }
    }

    /// N in verl's formula: `(3*h*i + h*(q+k+v+o)) * layers + 2 * vocab * h`.
    pub(crate) fn dense_params(&self) -> f64 {
        let h = self.hidden_size as f64;
        let q = (self.num_heads * self.head_dim) as f64;
        let kv = (self.num_kv_heads * self.head_dim) as f64;
        let attn = h * (q + kv + kv + q);
        (3.0 * h * self.intermediate_size as f64 + attn) * self.num_layers as f64
            + 2.0 * self.vocab_size as f64 * h
    }

    /// Training FLOPs (forward + backward) of a batch of sequences:
    /// `6 * N * tokens + 6 * sum(seqlen^2) * head_dim * heads * layers`.
    pub fn training_flops(&self, seqlens: &[u64]) -> f64 {
        let tokens: f64 = seqlens.iter().map(|&s| s as f64).sum();
        let sq: f64 = seqlens.iter().map(|&s| (s as f64) * (s as f64)).sum();
        6.0 * self.dense_params() * tokens
            + 6.0 * sq * (self.head_dim * self.num_heads * self.num_layers) as f64
    }
}

/// Promised dense bf16 peak of a device, by name, as verl's table gives it; unknown is `None`
/// (verl would use infinity and report MFU 0).
pub fn promised_peak_flops(device: &str) -> Option<f64> {
    let d = device.to_ascii_lowercase();
    if d.contains("h100") || d.contains("h200") || d.contains("h800") {
        Some(989e12)
    } else if d.contains("a100") || d.contains("a800") {
        Some(312e12)
    } else if d.contains("b200") {
        Some(2.25e15)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_0_6b_is_about_4_5_gflop_per_token() {
        let per_token = ModelShape::QWEN3_0_6B.training_flops(&[1]);
        assert!((per_token / 1e9 - 4.5).abs() < 0.2, "{per_token}");
        assert_eq!(promised_peak_flops("NVIDIA H200"), Some(989e12));
        assert_eq!(promised_peak_flops("cpu"), None);
    }
}
