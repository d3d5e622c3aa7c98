//! The mock's script ([`MockScript`], the scenario's `backend: {kind: mock}` block): the reward
//! curve, the efficiency curve, response lengths, device, model and faults.

use serde::{Deserialize, Serialize};

use super::cost::{self, CostModel};
use super::faults;
use crate::flops::{promised_peak_flops, ModelSpec};

/// How the sampler's accuracy moves from `start` to `end` over the syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CurveShape {
    /// Straight line, flat after `syncs_to_plateau`.
    #[default]
    Linear,
    /// Fast early gains: `1 - exp(-3 x)` of the way at `x = syncs / syncs_to_plateau`.
    Exp,
}

/// The probability that the sampler answers an arith prompt correctly, as a function of the
/// number of weight syncs that brought it new weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RewardCurve {
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) syncs_to_plateau: u64,
    pub(crate) shape: CurveShape,
    /// Added to the whole curve (a scenario lowers it with `backend.reward.offset=-0.1`).
    pub offset: f64,
}

impl Default for RewardCurve {
    fn default() -> Self {
        Self {
            start: 0.1,
            end: 0.9,
            syncs_to_plateau: 20,
            shape: CurveShape::Linear,
            offset: 0.0,
        }
    }
}

impl RewardCurve {
    /// Accuracy after `syncs` effective syncs, clamped to `[0, 1]`.
    pub(crate) fn accuracy(&self, syncs: u64) -> f64 {
        let x = syncs as f64 / self.syncs_to_plateau.max(1) as f64;
        let progress = match self.shape {
            CurveShape::Linear => x.min(1.0),
            CurveShape::Exp => 1.0 - (-3.0 * x).exp(),
        };
        (self.start + (self.end - self.start) * progress + self.offset).clamp(0.0, 1.0)
    }
}

/// The fraction of the device peak that compute-bound work reaches, by batch tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EfficiencyCurve {
    /// Efficiency of a tiny batch.
    pub(crate) start: f64,
    /// Efficiency approached by large batches.
    pub(crate) end: f64,
    /// Tokens at which about 63% of the way from `start` to `end` is covered.
    pub(crate) ramp_tokens: f64,
    /// Multiplies everything (a scenario lowers the MFU 10% with `backend.efficiency.scale=0.9`).
    pub scale: f64,
    /// Efficiency of autoregressive decoding in `/generate`.
    pub(crate) decode: f64,
}

impl Default for EfficiencyCurve {
    fn default() -> Self {
        // Dense bf16 training of sub-2B models on one H200 lands at 0.3-0.5 MFU (the
        // Arctic verl README reports 0.26 for 1.7B and 0.49 for 0.6B).
        Self {
            start: 0.3,
            end: 0.45,
            ramp_tokens: 4096.0,
            scale: 1.0,
            decode: 0.05,
        }
    }
}

/// Lengths of wrong answers and noise responses, in characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponseShape {
    pub(crate) min_len: usize,
    pub(crate) max_len: usize,
}

impl Default for ResponseShape {
    fn default() -> Self {
        Self {
            min_len: 2,
            max_len: 12,
        }
    }
}

fn default_device() -> String {
    "h200".into()
}
fn default_model() -> ModelSpec {
    ModelSpec::Preset("qwen3-0.6b".into())
}

/// The mock's script, from the scenario's `backend: {kind: mock, ...}` block. Every field has
/// a default, so `backend: {kind: mock}` is a complete script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockScript {
    /// Overrides the scenario seed for the mock's randomness.
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub reward: RewardCurve,
    #[serde(default)]
    pub efficiency: EfficiencyCurve,
    /// The simulated device (its promised peak and bandwidth time every operation).
    #[serde(default = "default_device")]
    pub device: String,
    /// The simulated model (its FLOPs per token time every operation).
    #[serde(default = "default_model")]
    pub model: ModelSpec,
    #[serde(default)]
    pub response: ResponseShape,
    /// Scripted faults (see `faults`): none by default, and then absent from the plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<faults::FaultSpec>,
}

impl Default for MockScript {
    fn default() -> Self {
        Self {
            seed: None,
            reward: RewardCurve::default(),
            efficiency: EfficiencyCurve::default(),
            device: default_device(),
            model: default_model(),
            response: ResponseShape::default(),
            faults: Vec::new(),
        }
    }
}

/// A script the mock cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid mock script: {0}")]
pub struct MockScriptError(pub(crate) String);

impl MockScript {
    /// The cost model the script describes, or what is wrong with it.
    pub(crate) fn cost_model(&self) -> Result<CostModel, MockScriptError> {
        let err = |m: String| Err(MockScriptError(m));
        let Some(shape) = self.model.shape() else {
            return err(format!(
                "model: unknown preset {:?} (known: qwen3-0.6b, qwen3-1.7b)",
                self.model
            ));
        };
        let (Some(peak), Some(bw)) = (
            promised_peak_flops(&self.device),
            cost::hbm_bandwidth(&self.device),
        ) else {
            return err(format!(
                "device: {:?} has no known peak (h100, h200, h800, a100, b200)",
                self.device
            ));
        };
        let e = &self.efficiency;
        for (k, v) in [
            ("efficiency.start", e.start),
            ("efficiency.end", e.end),
            ("efficiency.scale", e.scale),
            ("efficiency.decode", e.decode),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return err(format!("{k} must be in (0, 1], got {v}"));
            }
        }
        if !(e.ramp_tokens.is_finite() && e.ramp_tokens > 0.0) {
            return err(format!(
                "efficiency.ramp_tokens must be positive, got {}",
                e.ramp_tokens
            ));
        }
        let r = &self.reward;
        for (k, v) in [
            ("reward.start", r.start),
            ("reward.end", r.end),
            ("reward.offset", r.offset),
        ] {
            if !v.is_finite() {
                return err(format!("{k} must be finite, got {v}"));
            }
        }
        if r.syncs_to_plateau == 0 {
            return err("reward.syncs_to_plateau must be at least 1".into());
        }
        faults::validate(&self.faults).map_err(|e| MockScriptError(e.0))?;
        if self.response.min_len == 0 || self.response.min_len > self.response.max_len {
            return err(format!(
                "response: need 1 <= min_len <= max_len, got {}..{}",
                self.response.min_len, self.response.max_len
            ));
        }
        Ok(CostModel {
            shape,
            peak_flops: peak,
            bandwidth: bw,
            eff_start: e.start,
            eff_end: e.end,
            ramp_tokens: e.ramp_tokens,
            scale: e.scale,
            decode_eff: e.decode,
        })
    }
}
