//! The mock's pseudo-policy: log-probs and entropies as deterministic functions of
//! (seed, token id, position, policy version). Two engines holding the same version agree bit
//! for bit, so trainer/sampler mismatches (a missed weight sync) are visible; later versions
//! grow more confident, so the entropy and the log-probs trend like a learning policy.

/// SplitMix64 finaliser: a cheap, well-mixed 64-bit hash step.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash a sequence of words into one.
pub fn hash_words(words: &[u64]) -> u64 {
    words.iter().fold(0x5151_5EED_u64, |h, &w| mix(h ^ w))
}

/// A stable hash of text (FNV-1a, then mixed), independent of the platform.
pub(crate) fn hash_text(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix(h)
}

/// A uniform number in `[0, 1)` from a hash.
pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

const BASE: u64 = 0xBA5E;
const DRIFT: u64 = 0xD81F;
const ENTROPY: u64 = 0xE27;

/// How much less uncertain the policy is after `version` updates (1 at version 0).
fn confidence_decay(version: u64) -> f64 {
    0.3 + 0.7 * (-(version as f64) / 50.0).exp()
}

/// log p(token at position) under the policy of `version`; always in about (-2.7, -0.03).
pub(crate) fn token_logprob(seed: u64, token: i64, position: usize, version: u64) -> f32 {
    let t = token as u64;
    let p = position as u64;
    let base = unit(hash_words(&[seed, BASE, t, p]));
    let drift = unit(hash_words(&[seed, DRIFT, t, p, version])) - 0.5;
    (-(0.1 + 2.5 * base * confidence_decay(version)) + 0.12 * drift) as f32
}

/// The entropy of the policy's next-token distribution at a position.
pub(crate) fn token_entropy(seed: u64, position: usize, version: u64) -> f32 {
    let u = unit(hash_words(&[seed, ENTROPY, position as u64, version]));
    ((0.2 + 1.2 * u) * confidence_decay(version)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probs_are_negative_and_depend_on_the_version() {
        let mut changed = 0;
        for tok in 2..20 {
            for pos in 0..30 {
                let a = token_logprob(7, tok, pos, 0);
                let b = token_logprob(7, tok, pos, 1);
                assert!(a < 0.0 && b < 0.0);
                assert_eq!(a, token_logprob(7, tok, pos, 0));
                if a != b {
                    changed += 1;
                }
            }
        }
        assert!(changed > 500, "{changed}");
    }

    #[test]
    fn later_versions_are_more_confident() {
        let mean = |v: u64| {
            (0..1000)
                .map(|i| token_entropy(3, i, v) as f64)
                .sum::<f64>()
                / 1000.0
        };
        assert!(mean(100) < mean(0) * 0.6);
    }
}
