//! Weight digests: `POST /weight-digest`, an rlharness extension of the Arctic API (a real
//! Arctic server has no such route and answers 404). Beside `/weight-norm`, with the same body
//! `{training_job_id, sampling_job_id}`, it answers the digest manifest of both jobs' weights:
//! per tensor its name, dtype, shape, element count and the SHA-256 of its bytes as the job
//! holds them (on the host, contiguous, little-endian, in the dtype it is held in). Two jobs
//! hold the same weights bit for bit exactly when their manifests are equal, so the builtin
//! driver checks each weight sync with it (`weight_sync/match`), where the sampler-vs-trainer
//! mismatch metrics only see what moves the log-probabilities past a floor.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The route's path.
pub const WEIGHT_DIGEST_ROUTE: &str = "/weight-digest";

/// One tensor of a digest manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorDigest {
    pub name: String,
    /// The dtype it is held in, as safetensors names it (`F32`, `BF16`).
    pub dtype: String,
    pub shape: Vec<u64>,
    pub numel: u64,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

impl TensorDigest {
    /// The digest of a tensor whose bytes (host, contiguous, little-endian) are `bytes`.
    pub fn of_bytes(name: &str, dtype: &str, shape: &[u64], bytes: &[u8]) -> TensorDigest {
        TensorDigest {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
            numel: shape.iter().product(),
            sha256: crate::util::hex(&Sha256::digest(bytes)),
        }
    }

    /// `F32 [64, 32] sha256 0123abcd4567` (the first 12 hex digits).
    pub fn summary(&self) -> String {
        let short: String = self.sha256.chars().take(12).collect();
        format!("{} {:?} sha256 {short}", self.dtype, self.shape)
    }
}

/// The answer of `/weight-digest`: each job's manifest, tensors in the engine's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightDigest {
    pub training: Vec<TensorDigest>,
    pub sampling: Vec<TensorDigest>,
}

/// A tensor the two manifests disagree on: its digest on each side (`None`: that side has no
/// tensor of this name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorDifference {
    pub name: String,
    pub training: Option<TensorDigest>,
    pub sampling: Option<TensorDigest>,
}

impl TensorDifference {
    /// `model.norm.weight: training F32 [64] sha256 …, sampling F32 [64] sha256 …`.
    pub fn describe(&self) -> String {
        let side = |d: &Option<TensorDigest>| {
            d.as_ref()
                .map_or_else(|| "absent".to_string(), TensorDigest::summary)
        };
        format!(
            "`{}`: training {}, sampling {}",
            self.name,
            side(&self.training),
            side(&self.sampling)
        )
    }
}

/// What comparing the two manifests found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncComparison {
    /// Tensors named on either side.
    pub tensors: usize,
    /// Tensors that differ (in dtype, shape, bytes, or present on one side only).
    pub differing: usize,
    /// The first of them: in the training manifest's order, then the sampler's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<TensorDifference>,
}

impl SyncComparison {
    /// Whether the sampler holds the trainer's weights bit for bit.
    pub fn matched(&self) -> bool {
        self.differing == 0
    }
}

impl WeightDigest {
    /// Compare the manifests by tensor name. A name listed twice on one side is compared by
    /// its first entry, and the manifests differ (a second tensor of one name is no copy).
    pub fn compare(&self) -> SyncComparison {
        let find =
            |side: &[TensorDigest], name: &str| side.iter().find(|t| t.name == name).cloned();
        let count =
            |side: &[TensorDigest], name: &str| side.iter().filter(|t| t.name == name).count();
        let mut names: Vec<&str> = Vec::new();
        for t in self.training.iter().chain(&self.sampling) {
            if !names.contains(&t.name.as_str()) {
                names.push(&t.name);
            }
        }
        let mut differing = 0;
        let mut first = None;
        for name in &names {
            let (a, b) = (find(&self.training, name), find(&self.sampling, name));
            let repeated = count(&self.training, name) > 1 || count(&self.sampling, name) > 1;
            if a != b || repeated {
                differing += 1;
                if first.is_none() {
                    first = Some(TensorDifference {
                        name: name.to_string(),
                        training: a,
                        sampling: b,
                    });
                }
            }
        }
        SyncComparison {
            tensors: names.len(),
            differing,
            first,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(name: &str, values: &[f32]) -> TensorDigest {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorDigest::of_bytes(name, "F32", &[values.len() as u64], &bytes)
    }

    #[test]
    fn a_digest_is_the_sha256_of_the_bytes() {
        let d = TensorDigest::of_bytes("w", "U8", &[3], b"abc");
        // SHA-256("abc"), FIPS 180-2's example.
        assert_eq!(
            d.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!((d.numel, d.shape.as_slice()), (3, &[3u64][..]));
        assert_eq!(d.summary(), "U8 [3] sha256 ba7816bf8f01");
        let m = TensorDigest::of_bytes("m", "F32", &[2, 3], &[0; 24]);
        assert_eq!(m.numel, 6);
    }

    #[test]
    fn equal_manifests_match_and_one_bit_does_not() {
        let w = [0.5f32, -1.25, 3.0];
        let same = WeightDigest {
            training: vec![f32s("a", &w), f32s("b", &[1.0])],
            sampling: vec![f32s("a", &w), f32s("b", &[1.0])],
        };
        let c = same.compare();
        assert!(c.matched(), "{c:?}");
        assert_eq!((c.tensors, c.differing, c.first), (2, 0, None));

        // One mantissa bit of one value of the second tensor.
        let nudged = f32::from_bits(1.0f32.to_bits() + 1);
        let off = WeightDigest {
            sampling: vec![f32s("a", &w), f32s("b", &[nudged])],
            ..same.clone()
        };
        let c = off.compare();
        assert!(!c.matched());
        assert_eq!((c.tensors, c.differing), (2, 1));
        let first = c.first.unwrap();
        assert_eq!(first.name, "b");
        assert_eq!(first.training, Some(f32s("b", &[1.0])));
        assert_eq!(first.sampling, Some(f32s("b", &[nudged])));
        assert!(first
            .describe()
            .starts_with("`b`: training F32 [1] sha256 "));
    }

    #[test]
    fn the_first_difference_follows_the_trainers_order() {
        let t = vec![f32s("z", &[1.0]), f32s("a", &[2.0]), f32s("m", &[3.0])];
        // Same bytes, another dtype name: a difference too.
        let mut held_as = f32s("a", &[2.0]);
        held_as.dtype = "BF16".into();
        let d = WeightDigest {
            training: t.clone(),
            sampling: vec![f32s("m", &[4.0]), held_as, f32s("z", &[1.0])],
        };
        let c = d.compare();
        assert_eq!(c.differing, 2);
        assert_eq!(c.first.unwrap().name, "a");
    }

    #[test]
    fn a_tensor_on_one_side_only_or_twice_differs() {
        let d = WeightDigest {
            training: vec![f32s("a", &[1.0]), f32s("extra", &[0.0])],
            sampling: vec![f32s("a", &[1.0])],
        };
        let c = d.compare();
        assert_eq!((c.tensors, c.differing), (2, 1));
        let first = c.first.unwrap();
        assert_eq!((first.name.as_str(), &first.sampling), ("extra", &None));
        assert!(
            first.describe().ends_with("sampling absent"),
            "{}",
            first.describe()
        );
        let twice = WeightDigest {
            training: vec![f32s("a", &[1.0])],
            sampling: vec![f32s("a", &[1.0]), f32s("a", &[1.0])],
        };
        assert!(!twice.compare().matched());
        // An empty pair of manifests has nothing to disagree on.
        let none = WeightDigest {
            training: vec![],
            sampling: vec![],
        };
        assert!(none.compare().matched());
    }

    #[test]
    fn the_answer_round_trips_as_json() {
        let d = WeightDigest {
            training: vec![f32s("a", &[1.0])],
            sampling: vec![f32s("a", &[1.0])],
        };
        let text = serde_json::to_string(&d).unwrap();
        assert!(text.starts_with(
            r#"{"training":[{"name":"a","dtype":"F32","shape":[1],"numel":1,"sha256":""#
        ));
        assert_eq!(serde_json::from_str::<WeightDigest>(&text).unwrap(), d);
        let c = d.compare();
        let json = serde_json::to_value(&c).unwrap();
        assert!(json.get("first").is_none(), "{json}");
    }
}
