//! Wald's sequential probability ratio test (A. Wald, "Sequential Tests of Statistical
//! Hypotheses", Annals of Mathematical Statistics 16(2), 1945) for one commit: each seed gives
//! one value of the judged window, taken as normal with the calibration's σ. H0 (good): its
//! mean is the calibrated mean μ0; H1 (bad): μ1 = μ0 shifted by the effect in the metric's bad
//! direction. After n values the log-likelihood ratio is
//! `Λ = Σ (μ1 − μ0)/σ² · (x − (μ0 + μ1)/2)`; the test says bad once `Λ ≥ ln((1 − β)/α)`, good
//! once `Λ ≤ ln(β/(1 − α))`, and asks for another seed in between. α bounds the chance of
//! calling a good commit bad, β of calling a bad one good (Wald's bounds, up to the overshoot).

/// The outcome after the values so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Decision {
    Good,
    Bad,
    /// Neither bound crossed yet: one more seed.
    Continue,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sprt {
    pub(crate) good_mean: f64,
    pub(crate) bad_mean: f64,
    pub(crate) sigma: f64,
    /// ln((1 − β)/α): at or above, bad.
    pub(crate) upper: f64,
    /// ln(β/(1 − α)): at or below, good.
    pub(crate) lower: f64,
}

impl Sprt {
    /// `higher_is_better`: the bad mean lies below the good one (a reward), else above (a
    /// step time). A σ of 0 (a deterministic trainer) is taken as 0.1 % of the effect, so
    /// each value still decides by which mean it is nearer.
    pub(crate) fn new(
        good_mean: f64,
        effect: f64,
        sigma: f64,
        higher_is_better: bool,
        alpha: f64,
        beta: f64,
    ) -> Sprt {
        let effect = effect.abs();
        let bad_mean = if higher_is_better {
            good_mean - effect
        } else {
            good_mean + effect
        };
        Sprt {
            good_mean,
            bad_mean,
            sigma: sigma.max(effect * 1e-3).max(f64::MIN_POSITIVE),
            upper: ((1.0 - beta) / alpha).ln(),
            lower: (beta / (1.0 - alpha)).ln(),
        }
    }

    /// The log-likelihood ratio of H1 against H0 after `xs`.
    pub(crate) fn llr(&self, xs: &[f64]) -> f64 {
        let (m0, m1, s2) = (self.good_mean, self.bad_mean, self.sigma * self.sigma);
        xs.iter()
            .map(|x| (m1 - m0) / s2 * (x - (m0 + m1) / 2.0))
            .sum()
    }

    pub(crate) fn decide(&self, xs: &[f64]) -> Decision {
        let l = self.llr(xs);
        if l >= self.upper {
            Decision::Bad
        } else if l <= self.lower {
            Decision::Good
        } else {
            Decision::Continue
        }
    }

    /// Seeds the test takes on average when the commit is good and when it is bad (Wald's
    /// approximations of the expected sample numbers), for the report's arithmetic.
    pub(crate) fn expected_seeds(&self, alpha: f64, beta: f64) -> (f64, f64) {
        let d = (self.bad_mean - self.good_mean) / self.sigma;
        let info = d * d / 2.0;
        let (a, b) = (self.upper, self.lower);
        let good = ((1.0 - alpha) * b + alpha * a) / -info;
        let bad = ((1.0 - beta) * a + beta * b) / info;
        (good.max(1.0), bad.max(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_walds() {
        let t = Sprt::new(0.8, 0.1, 0.05, true, 0.05, 0.05);
        assert!((t.upper - 19f64.ln()).abs() < 1e-12);
        assert!((t.lower + 19f64.ln()).abs() < 1e-12);
        assert!((t.bad_mean - 0.7).abs() < 1e-12);
    }

    #[test]
    fn a_clear_value_decides_at_once_and_a_middling_one_asks_for_more() {
        let t = Sprt::new(0.8, 0.1, 0.03, true, 0.05, 0.05);
        assert_eq!(t.decide(&[0.80]), Decision::Good);
        assert_eq!(t.decide(&[0.70]), Decision::Bad);
        // Halfway between the two means: no evidence either way.
        assert_eq!(t.decide(&[0.75]), Decision::Continue);
        assert_eq!(t.decide(&[0.75, 0.75, 0.75]), Decision::Continue);
        // Slightly on the bad side, seed after seed: bad in the end.
        let xs = [0.74; 3];
        assert_eq!(t.decide(&xs[..1]), Decision::Continue);
        assert_eq!(t.decide(&xs), Decision::Bad);
    }

    #[test]
    fn lower_is_better_shifts_the_bad_mean_up() {
        let t = Sprt::new(10.0, 2.0, 0.5, false, 0.05, 0.05);
        assert_eq!(t.bad_mean, 12.0);
        assert_eq!(t.decide(&[12.1]), Decision::Bad);
        assert_eq!(t.decide(&[9.9]), Decision::Good);
    }

    #[test]
    fn a_deterministic_calibration_still_decides() {
        let t = Sprt::new(1.0, 0.2, 0.0, true, 0.05, 0.05);
        assert_eq!(t.decide(&[1.0]), Decision::Good);
        assert_eq!(t.decide(&[0.85]), Decision::Bad);
        let (good, bad) = t.expected_seeds(0.05, 0.05);
        assert_eq!((good, bad), (1.0, 1.0));
    }
}
