//! `/weight-digest` on the libtorch engine: the manifest is the SHA-256 of each tensor's bytes
//! as the job holds them (checked against the weights read back and hashed here), equal across
//! jobs exactly when their weights are, and a rounded sampler differs right after its sync.

use super::*;
use rlharness_arctic::wire::digest::{TensorDigest, WeightDigest};
use sha2::{Digest, Sha256};

/// The engine's trainer (job 2) after one update, beside its sampler (job 1).
fn trained(spec: TorchSpec) -> TorchEngine {
    let engine = TorchEngine::new(&spec, 13).unwrap();
    engine
        .create_job(1, &job_config(JobType::Sampling))
        .unwrap();
    let mut training = job_config(JobType::Training);
    training.ds_config =
        Some(json!({"optimizer": {"params": {"lr": 1e-2}}, "train_micro_batch_size_per_gpu": 2}));
    engine.create_job(2, &training).unwrap();
    let (prompts, responses) = sample_rows();
    let (tensors, p, r) = padded_batch(&prompts, &responses);
    let old = forward_logprobs(&engine, 2, &tensors, json!({}));
    engine
        .forward_backward(2, &grpo_update(&tensors, 3, p + r, p, &old, 1.0))
        .unwrap();
    engine.step(2, None).unwrap();
    engine
}

fn digests(engine: &TorchEngine) -> WeightDigest {
    WeightDigest {
        training: engine.weight_digest(2).unwrap(),
        sampling: engine.weight_digest(1).unwrap(),
    }
}

#[test]
fn the_manifest_is_the_hash_of_the_weights_as_held() {
    let engine = trained(warm_spec(0));
    let manifest = engine.weight_digest(2).unwrap();
    let weights = engine.job_weights(2).unwrap();
    assert_eq!(manifest.len(), weights.len());
    assert!(manifest.len() > 3, "{manifest:?}");
    for (d, (name, t)) in manifest.iter().zip(&weights) {
        // Hashed here from the fp32 values read back, independently of the engine's bytes.
        let values = Vec::<f32>::try_from(t.reshape([-1])).unwrap();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let shape: Vec<u64> = t.size().iter().map(|&d| d as u64).collect();
        assert_eq!(d, &TensorDigest::of_bytes(name, "F32", &shape, &bytes));
        let sha = rlharness_arctic::util::hex(&Sha256::digest(&bytes));
        assert_eq!(
            (d.sha256.as_str(), d.numel),
            (sha.as_str(), values.len() as u64)
        );
    }
    // The count is the model's.
    let numel: u64 = manifest.iter().map(|d| d.numel).sum();
    assert_eq!(numel, engine.info().num_parameters);
}

#[test]
fn a_sync_makes_the_manifests_equal_and_an_update_parts_them() {
    let engine = trained(warm_spec(0));
    let c = digests(&engine).compare();
    assert!(!c.matched(), "the update moved the trainer: {c:?}");
    // Every tensor of this model takes gradient, and AdamW moves each.
    assert_eq!(c.differing, c.tensors, "{c:?}");
    engine.weight_sync(2, &[1]).unwrap();
    let c = digests(&engine).compare();
    assert!(c.matched(), "{c:?}");
    assert_eq!(c.first, None);
}

#[test]
fn a_rounded_sampler_differs_right_after_its_sync() {
    for (spec, what) in [
        (
            TorchSpec {
                sampler_mantissa_bits: Some(10),
                ..warm_spec(0)
            },
            "10 mantissa bits",
        ),
        (
            TorchSpec {
                sampler_mantissa_bits: Some(22),
                ..warm_spec(0)
            },
            "22 mantissa bits",
        ),
        (
            TorchSpec {
                sampler_dtype: Some(TorchDType::Bf16),
                ..warm_spec(0)
            },
            "bf16",
        ),
    ] {
        let engine = trained(spec);
        engine.weight_sync(2, &[1]).unwrap();
        let d = digests(&engine);
        let c = d.compare();
        assert!(!c.matched(), "{what}: {c:?}");
        let first = c.first.unwrap();
        // The first tensor in the trainer's order, held as F32 on both sides, bytes apart.
        assert_eq!(first.name, d.training[0].name, "{what}");
        let (t, s) = (first.training.unwrap(), first.sampling.unwrap());
        assert_eq!(
            (t.dtype.as_str(), s.dtype.as_str()),
            ("F32", "F32"),
            "{what}"
        );
        assert_eq!(t.shape, s.shape, "{what}");
        assert_ne!(t.sha256, s.sha256, "{what}");
    }
}

#[test]
fn a_bf16_engine_reports_bf16_bytes() {
    let engine = engine_with_job(TorchDType::Bf16, 5, JobType::Training);
    let manifest = engine.weight_digest(1).unwrap();
    assert!(manifest.iter().all(|d| d.dtype == "BF16"), "{manifest:?}");
    assert_eq!(engine.weight_digest(9).unwrap_err().status, 404);
}
