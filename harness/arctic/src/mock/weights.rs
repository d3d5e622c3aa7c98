//! The mock's simulated weights, as `/weight-digest` reports them: the tensors of a dense
//! Qwen3-style decoder of the script's model shape (Hugging Face names and shapes, held in
//! bf16), each digested from the engine's seed, the tensor's name and the policy version the
//! job holds. The mock keeps no weights, so the digests are not of bytes; they are equal
//! exactly where two jobs hold the same version (every optimizer step changes every tensor), so
//! a skipped weight sync shows as a sampler whose every tensor differs from the trainer's.

use sha2::{Digest, Sha256};

use crate::flops::ModelShape;
use crate::wire::digest::TensorDigest;

/// Name and shape of each weight tensor of a decoder of `shape`, in the model's order.
pub(super) fn tensors(shape: &ModelShape) -> Vec<(String, Vec<u64>)> {
    let h = shape.hidden_size;
    let (q, kv) = (
        shape.num_heads * shape.head_dim,
        shape.num_kv_heads * shape.head_dim,
    );
    let i = shape.intermediate_size;
    let mut out = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![shape.vocab_size, h],
    )];
    for l in 0..shape.num_layers {
        let p = format!("model.layers.{l}");
        for (name, dims) in [
            ("input_layernorm.weight", vec![h]),
            ("self_attn.q_proj.weight", vec![q, h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.o_proj.weight", vec![h, q]),
            ("self_attn.q_norm.weight", vec![shape.head_dim]),
            ("self_attn.k_norm.weight", vec![shape.head_dim]),
            ("post_attention_layernorm.weight", vec![h]),
            ("mlp.gate_proj.weight", vec![i, h]),
            ("mlp.up_proj.weight", vec![i, h]),
            ("mlp.down_proj.weight", vec![h, i]),
        ] {
            out.push((format!("{p}.{name}"), dims));
        }
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    out.push(("lm_head.weight".to_string(), vec![shape.vocab_size, h]));
    out
}

/// The digest manifest of the weights of policy `version` (seed `seed`).
pub(super) fn manifest(shape: &ModelShape, seed: u64, version: u64) -> Vec<TensorDigest> {
    tensors(shape)
        .into_iter()
        .map(|(name, dims)| {
            let mut h = Sha256::new();
            h.update(b"rlharness mock weights v1");
            h.update(seed.to_le_bytes());
            h.update(version.to_le_bytes());
            h.update(name.as_bytes());
            TensorDigest {
                numel: dims.iter().product(),
                name,
                dtype: "BF16".into(),
                shape: dims,
                sha256: crate::util::hex(&h.finalize()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulated_tensors_add_up_to_the_models_parameters() {
        let shape = ModelShape::QWEN3_0_6B;
        let t = tensors(&shape);
        assert_eq!(t.len(), 3 + 11 * 28);
        assert_eq!(t[0].0, "model.embed_tokens.weight");
        assert_eq!(
            t[1],
            ("model.layers.0.input_layernorm.weight".into(), vec![1024])
        );
        // verl's dense count leaves out the norms (a few hundred thousand parameters).
        let numel: u64 = t.iter().map(|(_, d)| d.iter().product::<u64>()).sum();
        let norms: u64 = t
            .iter()
            .filter(|(n, _)| n.contains("norm"))
            .map(|(_, d)| d.iter().product::<u64>())
            .sum();
        assert_eq!((numel - norms) as f64, shape.dense_params());
    }

    #[test]
    fn a_manifest_follows_the_version_and_the_seed_only() {
        let shape = ModelShape::QWEN3_0_6B;
        let v3 = manifest(&shape, 7, 3);
        assert_eq!(v3, manifest(&shape, 7, 3));
        let v4 = manifest(&shape, 7, 4);
        assert!(v3
            .iter()
            .zip(&v4)
            .all(|(a, b)| a.sha256 != b.sha256 && a.name == b.name));
        assert_ne!(v3, manifest(&shape, 8, 3));
        assert!(v3.iter().all(|t| t.dtype == "BF16" && t.sha256.len() == 64));
        // Tensors of one manifest differ from each other.
        assert_ne!(v3[1].sha256, v3[2].sha256);
    }
}
