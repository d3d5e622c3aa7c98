//! The mock's simulated clock: how long each operation would take on the modelled device.
//! Compute-bound work divides verl's FLOP estimate by the device peak times an efficiency that
//! grows with the batch's token count; memory-bound work (optimizer step, weight copy) divides
//! bytes by bandwidth. Nothing sleeps: durations are reported, not waited for.

use crate::flops::ModelShape;

/// HBM bandwidth in bytes/s of the devices the peak table knows; the mock's own table since
/// verl's MFU needs only the FLOP peak.
pub(crate) fn hbm_bandwidth(device: &str) -> Option<f64> {
    let d = device.to_ascii_lowercase();
    if d.contains("h200") {
        Some(4.8e12)
    } else if d.contains("h100") || d.contains("h800") {
        Some(3.35e12)
    } else if d.contains("a100") || d.contains("a800") {
        Some(2.0e12)
    } else if d.contains("b200") {
        Some(8.0e12)
    } else {
        None
    }
}

/// Host-path weight-sync bandwidth (NCCL broadcast through the sampler's loader), bytes/s.
const HOST_SYNC_BANDWIDTH: f64 = 25e9;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CostModel {
    pub(crate) shape: ModelShape,
    pub(crate) peak_flops: f64,
    pub(crate) bandwidth: f64,
    /// Efficiency of compute-bound work with `tokens` tokens: `eff_start` for a tiny batch,
    /// approaching `eff_end` past `ramp_tokens`, times `scale`.
    pub(crate) eff_start: f64,
    pub(crate) eff_end: f64,
    pub(crate) ramp_tokens: f64,
    pub(crate) scale: f64,
    /// Efficiency of autoregressive decoding (memory-bound, so far below prefill).
    pub(crate) decode_eff: f64,
}

impl CostModel {
    pub(crate) fn efficiency(&self, tokens: f64) -> f64 {
        let ramp = 1.0 - (-tokens / self.ramp_tokens).exp();
        ((self.eff_start + (self.eff_end - self.eff_start) * ramp) * self.scale).clamp(1e-6, 1.0)
    }

    fn compute_seconds(&self, flops: f64, tokens: f64) -> f64 {
        flops / (self.peak_flops * self.efficiency(tokens))
    }

    /// Forward and backward over sequences of these lengths.
    pub(crate) fn forward_backward(&self, seqlens: &[u64]) -> f64 {
        let tokens: u64 = seqlens.iter().sum();
        self.compute_seconds(self.shape.training_flops(seqlens), tokens as f64)
    }

    /// A forward pass only: a third of the training FLOPs.
    pub(crate) fn forward(&self, seqlens: &[u64]) -> f64 {
        let tokens: u64 = seqlens.iter().sum();
        self.compute_seconds(self.shape.training_flops(seqlens) / 3.0, tokens as f64)
    }

    /// AdamW reads and writes weights, gradients and two moments: about 16 bytes a parameter.
    pub(crate) fn optimizer_step(&self) -> f64 {
        self.shape.dense_params() * 16.0 / self.bandwidth
    }

    /// Prefill of the prompts, then decoding the generated tokens.
    pub(crate) fn generate(&self, prompt_tokens: u64, generated_tokens: u64) -> f64 {
        let per_token = 2.0 * self.shape.dense_params();
        self.compute_seconds(per_token * prompt_tokens as f64, prompt_tokens as f64)
            + per_token * generated_tokens as f64 / (self.peak_flops * self.decode_eff * self.scale)
    }

    /// Copy bf16 weights to the sampler: device-local with CUDA IPC, else through the host.
    pub(crate) fn weight_sync(&self, cuda_ipc: bool) -> f64 {
        let bytes = self.shape.dense_params() * 2.0;
        bytes
            / if cuda_ipc {
                self.bandwidth / 2.0
            } else {
                HOST_SYNC_BANDWIDTH
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CostModel {
        CostModel {
            shape: ModelShape::QWEN3_0_6B,
            peak_flops: 989e12,
            bandwidth: 4.8e12,
            eff_start: 0.3,
            eff_end: 0.45,
            ramp_tokens: 4096.0,
            scale: 1.0,
            decode_eff: 0.05,
        }
    }

    #[test]
    fn forward_backward_mfu_is_the_efficiency() {
        let m = model();
        let seqlens = vec![512u64; 64];
        let secs = m.forward_backward(&seqlens);
        let mfu = m.shape.training_flops(&seqlens) / secs / m.peak_flops;
        assert!((0.3..=0.45).contains(&mfu), "{mfu}");
        assert!((m.forward(&seqlens) * 3.0 - secs).abs() < 1e-9);
        assert!(m.weight_sync(true) < m.weight_sync(false));
    }

    #[test]
    fn efficiency_grows_with_tokens_and_scales() {
        let mut m = model();
        assert!(m.efficiency(100.0) < m.efficiency(100_000.0));
        let full = m.efficiency(10_000.0);
        m.scale = 0.9;
        assert!((m.efficiency(10_000.0) - 0.9 * full).abs() < 1e-12);
    }
}
