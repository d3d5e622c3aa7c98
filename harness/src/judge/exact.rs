//! The exact lane: a deterministic backend on a host of the golden's numeric fingerprint must
//! reproduce the golden bit for bit.
//!
//! Bands are for what varies between runs (wall time, another host's rounding, a GPU's
//! nondeterministic kernels). Where nothing varies (the mock; torch on the CPU with its pinned
//! kernels and thread count, same seed), any difference at all is a change of the code or the
//! config, however small: `weight_decay` 0 → 0.001 moves no band but changes every loss from
//! step 2 on. So when the run's numeric fingerprint equals the golden's and the seeds match,
//! every series the golden holds (timing and utilisation series excepted: they follow the
//! clock, except on a backend that simulates time, the mock) is compared exactly, and the
//! first differing step and metric are named. A run on a
//! host of another fingerprint is judged by the bands alone, and the verdict says why.

pub use super::verdict::ExactLane;
use super::verdict::{Evidence, RuleStatus, RuleVerdict};
use crate::model::checks::expr::fmt_num;
use crate::model::golden::Golden;
use crate::model::metrics::MetricTable;
use rlharness_arctic::wire::runtime::Numerics;

/// The exact lane's rule id.
pub const EXACT_RULE: &str = "exact:every series bit for bit";

/// Series that follow the clock or the machine's load, not the arithmetic: never exact.
pub(crate) fn is_timing(metric: &str) -> bool {
    metric.starts_with("timing_")
        || metric.starts_with("time/")
        || metric.starts_with("perf/mfu")
        || metric.starts_with("perf/throughput")
        || metric.starts_with("perf/time_per_step")
        || metric.starts_with("perf/max_memory")
        || metric.starts_with("perf/cpu_memory")
}

/// The sampler-vs-trainer mismatch series of a real engine: the rounding gap between two
/// computations of the same log-probabilities, about 1e-7, whose last bits vary from run to
/// run on some CPUs (on an AMD EPYC host, two runs of one seed gave every other series bit
/// for bit and these 1e-4 apart, relatively: MKL's strict mode does not pin them there). Their
/// stability floors (1e-5, 1e-8) judge them; a skipped weight sync or a sampler of fewer bits
/// moves other series too, which the lane still holds exactly. The mock computes them, so
/// they stay in its lane.
pub(crate) fn is_rounding_gap(metric: &str) -> bool {
    metric.starts_with("training/rollout_probs_diff") || metric.starts_with("rollout_corr/")
}

/// Series another rule judges exactly already, which a backend without the route it comes
/// from does not log: `weight_sync/match` (`judge::weight_sync`). A golden blessed where the
/// backend had `/weight-digest` holds it; a replay of an older cassette or a real server does
/// not, and that is no change of the arithmetic.
pub(crate) fn is_judged_apart(metric: &str) -> bool {
    metric == super::weight_sync::METRIC
}

/// Decide the lane for a run of `seed` with `numerics` against `golden`.
pub(crate) fn lane(numerics: Option<&Numerics>, seed: u64, golden: &Golden) -> ExactLane {
    let off = |message: String| ExactLane {
        applied: false,
        message,
    };
    let Some(n) = numerics else {
        return off("the backend is not deterministic for a seed: judged by the bands".into());
    };
    let Some(gfp) = golden.provenance.numeric_fingerprint.as_deref() else {
        return off(format!(
            "the golden records no numeric fingerprint (this host's is {}): judged by the bands",
            n.fingerprint
        ));
    };
    if gfp != n.fingerprint {
        return off(format!(
            "this host's numeric fingerprint {} differs from the golden's {gfp} (another CPU \
             model or kernel level{}): judged by the bands",
            n.fingerprint,
            golden
                .provenance
                .cpu_isa
                .as_deref()
                .map(|i| format!("; the golden's kernels ran at {i}"))
                .unwrap_or_default()
        ));
    }
    if let Some(gseed) = golden.provenance.seed.filter(|s| *s != seed) {
        return off(format!(
            "the run's seed {seed} differs from the golden's {gseed}: judged by the bands"
        ));
    }
    ExactLane {
        applied: true,
        message: format!(
            "numeric fingerprint {} and seed {seed} match the golden's: every {}series is \
             compared bit for bit",
            n.fingerprint,
            if n.simulated_time {
                "(the backend simulates time: timing, MFU and throughput included) "
            } else {
                "non-timing (the sampler-vs-trainer rounding gap aside) "
            }
        ),
    }
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Compare every series of the golden with the run's at the steps both have: the timing ones
/// too when `simulated_time`.
pub(crate) fn judge_exact(
    run: &MetricTable,
    golden: &MetricTable,
    simulated_time: bool,
) -> RuleVerdict {
    let metrics: Vec<String> = golden
        .columns()
        .into_iter()
        .filter(|m| simulated_time || !(is_timing(m) || is_rounding_gap(m)))
        .filter(|m| !is_judged_apart(m))
        .collect();
    let mut differing: Vec<(u64, String, Option<f64>, f64)> = Vec::new();
    let mut compared = 0usize;
    for grow in golden.rows() {
        let Some(rrow) = run.row(grow.step) else {
            continue;
        };
        for m in &metrics {
            let Some(g) = grow.get(m) else { continue };
            compared += 1;
            match rrow.get(m) {
                Some(r) if same(r, g) => {}
                other => differing.push((grow.step, m.clone(), other, g)),
            }
        }
    }
    let mut v = RuleVerdict {
        rule: EXACT_RULE.into(),
        status: RuleStatus::Pass,
        evidence: Evidence::default(),
        metrics: Vec::new(),
        failing_steps: Vec::new(),
        points: Vec::new(),
        fail_fast: None,
    };
    if compared == 0 {
        v.status = RuleStatus::Missing;
        v.evidence.message = "the run and the golden share no step of any non-timing series".into();
        return v;
    }
    let Some((step, metric, value, gold)) = differing.first().cloned() else {
        v.evidence.message = format!(
            "{compared} values of {} series identical to the golden's",
            metrics.len()
        );
        return v;
    };
    let mut steps: Vec<u64> = differing.iter().map(|d| d.0).collect();
    steps.dedup();
    let mut names: Vec<&str> = differing.iter().map(|d| d.1.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    v.status = RuleStatus::Regressed;
    v.metrics = vec![metric.clone()];
    v.failing_steps = steps;
    v.evidence = Evidence {
        step_or_window: Some(format!("step {step}")),
        value,
        golden: Some(gold),
        band: None,
        margin: None,
        message: format!(
            "first difference at step {step}, `{metric}`: {} against golden {}; {} of {compared} \
             values differ, in {} series",
            value.map(fmt_num).unwrap_or_else(|| "missing".into()),
            fmt_num(gold),
            differing.len(),
            names.len()
        ),
        ..Evidence::default()
    };
    v
}

/// The lane for a run against `golden`, and the exact rule when the lane applies.
pub(crate) fn judge_lane(
    run: &MetricTable,
    golden: &Golden,
    numerics: Option<&Numerics>,
    seed: u64,
) -> (ExactLane, Option<RuleVerdict>) {
    let lane = lane(numerics, seed, golden);
    let simulated = numerics.is_some_and(|n| n.simulated_time);
    let rule = lane
        .applied
        .then(|| judge_exact(run, &golden.table, simulated));
    (lane, rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::golden::Provenance;
    use crate::model::metrics::StepMetrics;

    fn table(rows: &[(u64, &[(&str, f64)])]) -> MetricTable {
        let mut t = MetricTable::new();
        for (step, vals) in rows {
            let mut m = StepMetrics::new(*step);
            for (k, v) in *vals {
                m.insert(*k, *v);
            }
            t.push(m);
        }
        t
    }

    fn golden(fp: Option<&str>, seed: u64) -> Golden {
        Golden {
            scenario: "s".into(),
            hardware: "cpu".into(),
            table: table(&[
                (1, &[("actor/entropy", 0.25), ("timing_s/step", 1.0)]),
                (2, &[("actor/entropy", 0.5), ("timing_s/step", 1.0)]),
            ]),
            provenance: Provenance {
                seed: Some(seed),
                numeric_fingerprint: fp.map(str::to_string),
                cpu_isa: Some("avx2".into()),
                ..Provenance::default()
            },
            rules: None,
            bands: None,
            dir: "golden/s/cpu".into(),
            calibration: None,
            digest: Default::default(),
            audit: None,
        }
    }

    fn numerics(fp: &str) -> Numerics {
        Numerics {
            fingerprint: fp.into(),
            cpu_kernels: None,
            simulated_time: false,
        }
    }

    #[test]
    fn the_lane_needs_the_same_fingerprint_and_seed() {
        let g = golden(Some("abc"), 1);
        assert!(lane(Some(&numerics("abc")), 1, &g).applied);
        let other = lane(Some(&numerics("def")), 1, &g);
        assert!(!other.applied);
        assert!(other.message.contains("def differs from the golden's abc"));
        assert!(other.message.contains("avx2"));
        assert!(!lane(Some(&numerics("abc")), 2, &g).applied);
        assert!(!lane(None, 1, &g).applied);
        assert!(!lane(Some(&numerics("abc")), 1, &golden(None, 1)).applied);
    }

    #[test]
    fn one_ulp_anywhere_fails_and_names_the_first_step_and_metric() {
        let g = golden(Some("abc"), 1);
        let same_run = table(&[
            (1, &[("actor/entropy", 0.25), ("timing_s/step", 9.0)]),
            (2, &[("actor/entropy", 0.5), ("timing_s/step", 7.0)]),
        ]);
        let v = judge_exact(&same_run, &g.table, false);
        assert_eq!(v.status, RuleStatus::Pass, "{}", v.evidence.message);
        let nudged = f64::from_bits(0.5f64.to_bits() + 1);
        let drift = table(&[
            (1, &[("actor/entropy", 0.25)]),
            (2, &[("actor/entropy", nudged)]),
        ]);
        let v = judge_exact(&drift, &g.table, false);
        assert_eq!(v.status, RuleStatus::Regressed);
        assert!(
            v.evidence
                .message
                .starts_with("first difference at step 2, `actor/entropy`"),
            "{}",
            v.evidence.message
        );
        assert_eq!(v.failing_steps, vec![2]);
        let gone = table(&[(1, &[("actor/entropy", 0.25)]), (2, &[("other", 1.0)])]);
        let v = judge_exact(&gone, &g.table, false);
        assert_eq!(v.status, RuleStatus::Regressed);
        assert!(
            v.evidence.message.contains("missing"),
            "{}",
            v.evidence.message
        );
    }

    #[test]
    fn a_backend_that_simulates_time_keeps_timing_in_the_lane() {
        let g = golden(Some("abc"), 1);
        let slower: Vec<(u64, Vec<(&str, f64)>)> = g
            .table
            .rows()
            .iter()
            .map(|r| {
                let mut v: Vec<(&str, f64)> = Vec::new();
                for c in ["actor/entropy", "timing_s/step"] {
                    if let Some(x) = r.get(c) {
                        v.push((c, if c == "timing_s/step" { x * 1.04 } else { x }));
                    }
                }
                (r.step, v)
            })
            .collect();
        let rows: Vec<(u64, &[(&str, f64)])> =
            slower.iter().map(|(s, v)| (*s, v.as_slice())).collect();
        let run = table(&rows);
        assert_eq!(judge_exact(&run, &g.table, false).status, RuleStatus::Pass);
        let v = judge_exact(&run, &g.table, true);
        assert_eq!(v.status, RuleStatus::Regressed, "{}", v.evidence.message);
        assert!(
            v.evidence.message.contains("`timing_s/step`"),
            "{}",
            v.evidence.message
        );
        let mut mock = numerics("abc");
        mock.simulated_time = true;
        let (lane, rule) = judge_lane(&run, &g, Some(&mock), 1);
        assert!(lane.message.contains("timing, MFU and throughput included"));
        assert_eq!(rule.unwrap().status, RuleStatus::Regressed);
    }

    #[test]
    fn the_rule_comes_only_with_the_lane() {
        let g = golden(Some("abc"), 1);
        let drift = table(&[
            (1, &[("actor/entropy", 0.26)]),
            (2, &[("actor/entropy", 0.5)]),
        ]);
        let (lane, rule) = judge_lane(&drift, &g, Some(&numerics("abc")), 1);
        assert!(lane.applied);
        assert_eq!(rule.unwrap().status, RuleStatus::Regressed);
        let (lane, rule) = judge_lane(&drift, &g, Some(&numerics("zzz")), 1);
        assert!(!lane.applied);
        assert!(rule.is_none());
    }
}
