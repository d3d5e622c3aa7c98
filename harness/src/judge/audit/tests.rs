//! The audit on a small synthetic scenario.

use super::*;
use crate::judge::budget::standard_normal;
use crate::model::golden::calibration::Calibration;
use crate::model::golden::Provenance;
use crate::model::metrics::MetricTable;

/// A golden of 6 steps of `r` (calibrated windows of 3) and `u` (a hand-set band whose
/// budget is as large as its windows: it cannot fail), calibrated from `n` seeds whose
/// reward level varies with the seed.
fn scenario(n: usize) -> (ChecksSpec, Golden) {
    let checks: ChecksSpec = serde_json::from_str(
        r#"{"golden": {"r": {"window": 3, "calibrated": {"floor": 0.001}},
                       "u": {"window": 3, "abs": 0.01, "budget": 2}}}"#,
    )
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let runs: Vec<MetricTable> = (0..n)
        .map(|_| {
            let level = 0.05 * standard_normal(&mut rng);
            let r: Vec<f64> = (0..6)
                .map(|s| 0.3 + 0.05 * s as f64 + level + 0.02 * standard_normal(&mut rng))
                .collect();
            let u: Vec<f64> = (0..6)
                .map(|_| 1.0 + 0.01 * standard_normal(&mut rng))
                .collect();
            MetricTable::from_columns(&[("r", &r), ("u", &u)])
        })
        .collect();
    let golden = Golden {
        scenario: "s".into(),
        hardware: "cpu".into(),
        table: runs[0].clone(),
        provenance: Provenance::default(),
        rules: None,
        bands: None,
        dir: "golden/s/cpu".into(),
        calibration: Some(Calibration::of_test_runs(&runs, &checks)),
        digest: Default::default(),
        audit: None,
    };
    (checks, golden)
}

#[test]
fn the_audit_measures_the_verdicts_rate_and_finds_a_rule_that_cannot_fail() {
    let (checks, golden) = scenario(30);
    let opts = AuditOptions {
        draws: 400,
        power_draws: 40,
        seeds: 1,
        rng_seed: 1,
    };
    let a = audit("s", &checks, &golden, opts).unwrap();
    assert!(a.calibration_values);
    assert_eq!(a.budget_tests, 2);
    // Both windows of `r` at their share: within the budget (the interval's lower end
    // at or below it), and not a judge that never fires at all when moved.
    assert!(a.false_alarm_ci[0] <= checks.alpha(), "{a:#?}");
    let r = a.rules.iter().find(|r| r.rule == "golden:r").unwrap();
    assert!(r.share.is_some_and(|s| (s - 0.005).abs() < 1e-12), "{r:?}");
    assert!(!r.cannot_fail && r.smallest_shift.is_some(), "{r:?}");
    let u = a.rules.iter().find(|r| r.rule == "golden:u").unwrap();
    assert!(u.cannot_fail, "{u:?}");
    assert!(a
        .problems
        .iter()
        .any(|p| p.contains("`golden:u` cannot fail")));
    // The JSON keys scripts read.
    let json = serde_json::to_value(&a).unwrap();
    for key in ["false_alarm_rate", "false_alarm_ci", "rules", "schema"] {
        assert!(json.get(key).is_some(), "{key}");
    }
}

#[test]
fn a_multi_seed_audit_judges_the_seeds_family() {
    let (checks, golden) = scenario(30);
    let opts = AuditOptions {
        draws: 60,
        power_draws: 0,
        seeds: 3,
        rng_seed: 2,
    };
    let a = audit("s", &checks, &golden, opts).unwrap();
    assert_eq!(a.seeds, 3);
    assert!(a.rules.iter().any(|r| r.rule == "seeds:r"), "{a:#?}");
}

#[test]
fn clopper_pearson_matches_known_intervals() {
    // 0 of 300: [0, 1.22 %]; 11 of 300: [1.85 %, 6.46 %].
    let [lo, hi] = clopper_pearson(0, 300);
    assert_eq!(lo, 0.0);
    assert!((hi - 0.01222).abs() < 2e-4, "{hi}");
    let [lo, hi] = clopper_pearson(11, 300);
    assert!((lo - 0.0185).abs() < 5e-4, "{lo}");
    assert!((hi - 0.0646).abs() < 5e-4, "{hi}");
}
