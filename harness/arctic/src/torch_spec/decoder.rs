//! The torch engine's model sizes, resolved from a scenario's `backend.model` block, as plain
//! numbers (no libtorch): `rlharness-torch` builds its decoder from them, and `rlharness assets
//! verl` writes them as a HuggingFace `config.json`, so both read one definition.

use super::{ModelKind, ModelSpec};
use crate::flops::ModelShape;
use crate::task::CharTokenizer;

/// Resolved sizes of a decoder.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub rope_theta: f64,
    pub rms_eps: f64,
    /// The longest sequence (prompt and response) the model is declared for: HF's
    /// `max_position_embeddings`, which verl's rollout checks its prompt and response lengths
    /// against. The engine's rotary tables have no cap of their own.
    pub max_positions: usize,
}

/// A model block that does not describe a model: the key and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ModelError(pub String);

impl DecoderConfig {
    /// The output head is the input embedding (`model.embed_tokens.weight`); there is no
    /// separate `lm_head` parameter.
    pub const TIED_EMBEDDINGS: bool = true;

    /// The model's shape as verl's FLOP model reads it.
    pub fn shape(&self) -> ModelShape {
        ModelShape {
            hidden_size: self.hidden as u64,
            intermediate_size: self.intermediate as u64,
            num_layers: self.layers as u64,
            num_heads: self.heads as u64,
            num_kv_heads: self.kv_heads as u64,
            head_dim: self.head_dim as u64,
            vocab_size: self.vocab_size as u64,
        }
    }

    /// Qwen3-0.6B's `config.json`.
    pub fn qwen3_0_6b() -> Self {
        Self {
            vocab_size: 151_936,
            hidden: 1024,
            layers: 28,
            heads: 16,
            kv_heads: 8,
            head_dim: 128,
            intermediate: 3072,
            rope_theta: 1_000_000.0,
            rms_eps: 1e-6,
            max_positions: 40_960,
        }
    }

    /// Qwen3-1.7B's `config.json`.
    pub fn qwen3_1_7b() -> Self {
        Self {
            hidden: 2048,
            intermediate: 6144,
            ..Self::qwen3_0_6b()
        }
    }

    /// The flagship tiny model: about 100k parameters over the arith characters.
    pub fn tiny() -> Self {
        Self {
            vocab_size: CharTokenizer::vocab_size(),
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            intermediate: 192,
            rope_theta: 10_000.0,
            rms_eps: 1e-6,
            max_positions: 64,
        }
    }

    /// Resolve a scenario's model block: the kind's base sizes, then the given overrides.
    pub fn from_spec(spec: &ModelSpec) -> Result<Self, ModelError> {
        let mut c = match spec.kind {
            ModelKind::Tiny => {
                if let Some(p) = &spec.preset {
                    return Err(ModelError(format!(
                        "model.preset {p:?} is only for kind qwen3; a tiny model is sized by d_model, layers, heads"
                    )));
                }
                Self::tiny()
            }
            ModelKind::Qwen3 => match spec.preset.as_deref() {
                Some("qwen3-0.6b") => Self::qwen3_0_6b(),
                Some("qwen3-1.7b") => Self::qwen3_1_7b(),
                Some(other) => {
                    return Err(ModelError(format!(
                        "unknown model.preset {other:?}; known: qwen3-0.6b, qwen3-1.7b"
                    )))
                }
                None => {
                    return Err(ModelError(
                        "model.kind qwen3 needs model.preset (qwen3-0.6b or qwen3-1.7b)".into(),
                    ))
                }
            },
        };
        if let Some(v) = spec.d_model {
            c.hidden = v;
            if spec.head_dim.is_none() && spec.kind == ModelKind::Tiny {
                c.head_dim = v / spec.heads.unwrap_or(c.heads).max(1);
            }
        }
        if let Some(v) = spec.layers {
            c.layers = v;
        }
        if let Some(v) = spec.heads {
            c.heads = v;
            if spec.head_dim.is_none() && spec.kind == ModelKind::Tiny {
                c.head_dim = c.hidden / v.max(1);
            }
        }
        if let Some(v) = spec.kv_heads {
            c.kv_heads = v;
        } else if spec.kind == ModelKind::Tiny && c.heads % c.kv_heads != 0 {
            c.kv_heads = c.heads;
        }
        if let Some(v) = spec.head_dim {
            c.head_dim = v;
        }
        if let Some(v) = spec.ffn {
            c.intermediate = v;
        }
        if let Some(v) = spec.vocab_size {
            c.vocab_size = v;
        }
        if let Some(v) = spec.rope_theta {
            c.rope_theta = v;
        }
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ModelError> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("d_model", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("ffn", self.intermediate),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ModelError(format!("model.{name} must be at least 1")));
            }
        }
        if self.heads % self.kv_heads != 0 {
            return Err(ModelError(format!(
                "model.heads ({}) must be a multiple of model.kv_heads ({})",
                self.heads, self.kv_heads
            )));
        }
        if self.head_dim % 2 != 0 {
            return Err(ModelError(format!(
                "model head_dim ({}) must be even for rotary embeddings",
                self.head_dim
            )));
        }
        if self.vocab_size < CharTokenizer::vocab_size() {
            return Err(ModelError(format!(
                "model.vocab_size ({}) is smaller than the arith tokenizer's {}",
                self.vocab_size,
                CharTokenizer::vocab_size()
            )));
        }
        Ok(())
    }

    /// Parameter names and shapes in the canonical order.
    pub fn parameter_shapes(&self) -> Vec<(String, Vec<i64>)> {
        let h = self.hidden as i64;
        let q = (self.heads * self.head_dim) as i64;
        let kv = (self.kv_heads * self.head_dim) as i64;
        let i = self.intermediate as i64;
        let hd = self.head_dim as i64;
        let mut out = vec![(
            "model.embed_tokens.weight".to_string(),
            vec![self.vocab_size as i64, h],
        )];
        for l in 0..self.layers {
            let p = format!("model.layers.{l}");
            out.push((format!("{p}.input_layernorm.weight"), vec![h]));
            out.push((format!("{p}.self_attn.q_proj.weight"), vec![q, h]));
            out.push((format!("{p}.self_attn.k_proj.weight"), vec![kv, h]));
            out.push((format!("{p}.self_attn.v_proj.weight"), vec![kv, h]));
            out.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
            out.push((format!("{p}.self_attn.q_norm.weight"), vec![hd]));
            out.push((format!("{p}.self_attn.k_norm.weight"), vec![hd]));
            out.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
            out.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
            out.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
            out.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
        }
        out.push(("model.norm.weight".to_string(), vec![h]));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_resolution_applies_overrides_and_rejects_bad_shapes() {
        let tiny = DecoderConfig::from_spec(&ModelSpec::default()).unwrap();
        assert_eq!(tiny, DecoderConfig::tiny());
        let spec = ModelSpec {
            kind: ModelKind::Qwen3,
            preset: Some("qwen3-0.6b".into()),
            layers: Some(2),
            ..ModelSpec::default()
        };
        let q = DecoderConfig::from_spec(&spec).unwrap();
        assert_eq!((q.layers, q.hidden, q.vocab_size), (2, 1024, 151_936));
        let missing = ModelSpec {
            kind: ModelKind::Qwen3,
            ..ModelSpec::default()
        };
        assert!(DecoderConfig::from_spec(&missing)
            .unwrap_err()
            .0
            .contains("preset"));
        let bad = ModelSpec {
            heads: Some(3),
            kv_heads: Some(2),
            ..ModelSpec::default()
        };
        assert!(DecoderConfig::from_spec(&bad)
            .unwrap_err()
            .0
            .contains("multiple"));
    }
}
