//! GRPO advantages as verl computes them (`grpo-math.md`).

/// Group-relative advantages for `scores` laid out group by group (`n` rollouts a prompt):
/// `(s - mean) / (std + 1e-6)` with the n-1 denominator, or `s - mean` without std
/// normalisation. A group of one has mean 0 and std 1.
pub fn group_advantages(scores: &[f64], n: usize, norm_by_std: bool) -> Vec<f64> {
    let n = n.max(1);
    let mut out = Vec::with_capacity(scores.len());
    for group in scores.chunks(n) {
        let (mean, std) = if group.len() == 1 {
            (0.0, 1.0)
        } else {
            let mean = group.iter().sum::<f64>() / group.len() as f64;
            let var =
                group.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (group.len() as f64 - 1.0);
            (mean, var.sqrt())
        };
        for s in group {
            out.push(if norm_by_std {
                (s - mean) / (std + 1e-6)
            } else {
                s - mean
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_match_hand_computation() {
        let a = group_advantages(&[1.0, 0.0, 0.0, 1.0], 2, true);
        let s = (0.5f64).sqrt(); // std of [1, 0] with n-1
        assert!((a[0] - 0.5 / (s + 1e-6)).abs() < 1e-12);
        assert!((a[1] + 0.5 / (s + 1e-6)).abs() < 1e-12);
        assert_eq!(group_advantages(&[1.0, 1.0, 1.0], 3, true), vec![0.0; 3]);
        assert_eq!(group_advantages(&[3.0, 1.0], 2, false), vec![1.0, -1.0]);
        // A group of one: mean 0, std 1.
        let one = group_advantages(&[1.0], 1, true);
        assert!((one[0] - 1.0 / (1.0 + 1e-6)).abs() < 1e-12);
    }
}
