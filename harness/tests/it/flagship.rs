//! The torch flagship and its collapse self-test, end to end through `rlharness run`
//! (feature `torch`): the first passes against its accepted CPU golden and its convergence
//! rules; the second is caught, and its verdict names the failed convergence rules.
#![cfg(feature = "torch")]

use crate::common;

use common::{opts, repo, run_expecting};

use rlharness::judge::RuleStatus;
use rlharness::model::error::ExitStatus;
use rlharness::report::Report;

/// Run `scenarios/NAME` (into a directory of its own); it must exit 0. Then the one-judge
/// check: `rlharness compare RUN` writes exactly the verdict.json `rlharness run` wrote, with
/// the same exit status (done on the same run rather than a second one: a torch run is the
/// suite's most expensive step).
async fn run_passing(name: &str) -> Report {
    let tmp = tempfile::tempdir().unwrap();
    let report = run_expecting(
        &repo().join("scenarios").join(name),
        &opts(tmp.path(), &[]),
        ExitStatus::Passed,
    )
    .await;
    let dir = tmp.path().join("run");
    let ran = std::fs::read_to_string(dir.join("verdict.json")).unwrap();
    let status = rlharness::app::compare_command(&dir, None, &repo().join("golden"))
        .unwrap()
        .0
        .exit_status();
    let again = std::fs::read_to_string(dir.join("compare/golden/verdict.json")).unwrap();
    assert_eq!(ran, again, "{name}: compare's verdict differs from run's");
    assert_eq!(status, report.exit_status(), "{name}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flagship_learns_and_passes() {
    let report = run_passing("tiny-gsm8k-grpo.yaml").await;
    let v = report.verdict.unwrap();
    assert!(v.rule("expect:reward-converges").is_some());
    assert_eq!(report.run.device, "cpu");
    assert!(report
        .run
        .torch_version
        .as_deref()
        .unwrap_or("")
        .starts_with("2.11"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collapse_is_caught_by_the_convergence_rules() {
    // The scenario declares the failure it expects: exit 0 means the harness caught it.
    let report = run_passing("tiny-gsm8k-grpo-collapse.yaml").await;
    let v = report.verdict.unwrap();
    let failing: Vec<&str> = v.failing().map(|r| r.rule.as_str()).collect();
    assert!(
        failing.contains(&"expect:reward-converges"),
        "the verdict names the failed convergence rule: {failing:?}"
    );
}

/// A 3-step flagship cannot converge: its convergence rules are off, and hand-set bands judge
/// (its calibrated ones need the shipped golden's calibration).
fn short() -> Vec<String> {
    vec![
        "checks.expect=[]".to_string(),
        "checks.golden={critic/rewards/mean: {abs: 0.15}, actor/entropy: {abs: 0.1}}".to_string(),
    ]
}

/// Bless a short flagship run into a store of the test's own, on this host: whatever CPU
/// runs the test, the golden then carries this host's numeric fingerprint.
async fn bless_here(tmp: &std::path::Path, steps: u64) -> std::path::PathBuf {
    let golden = tmp.join("golden");
    let mut o = common::run_options(tmp, golden.clone(), tmp.join("bless"), short());
    o.steps = Some(steps);
    o.ci = false;
    let scenario = repo().join("scenarios/tiny-gsm8k-grpo.yaml");
    run_expecting(&scenario, &o, ExitStatus::NoGolden).await;
    rlharness::model::golden::GoldenStore::with_ci(&golden, false)
        .accept(&[])
        .unwrap();
    golden
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exact_lane_holds_a_rerun_and_catches_a_weight_decay_of_a_thousandth() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = bless_here(tmp.path(), 3).await;
    let scenario = repo().join("scenarios/tiny-gsm8k-grpo.yaml");
    let rerun = |name: &str, plant: &[&str]| {
        let mut set = short();
        set.extend(plant.iter().map(|s| s.to_string()));
        let mut o = common::run_options(tmp.path(), golden.clone(), tmp.path().join(name), set);
        o.steps = Some(3);
        o
    };
    // The same run again: bit for bit, and the verdict says the exact lane judged it.
    let same = run_expecting(&scenario, &rerun("same", &[]), ExitStatus::Passed).await;
    let v = same.verdict.unwrap();
    assert!(v.exact_lane.as_ref().unwrap().applied, "{:?}", v.exact_lane);
    let exact = v.rule(rlharness::judge::exact::EXACT_RULE).unwrap();
    assert!(
        exact.evidence.message.contains("identical"),
        "{}",
        exact.evidence.message
    );
    // A drift no band can see: AdamW's weight decay from 0 to 0.001.
    let drift = run_expecting(
        &scenario,
        &rerun(
            "drift",
            &["config.actor_rollout_ref.actor.optim.weight_decay=0.001"],
        ),
        ExitStatus::CheckFailed,
    )
    .await;
    let v = drift.verdict.unwrap();
    let failing: Vec<&str> = v.failing().map(|r| r.rule.as_str()).collect();
    assert_eq!(
        failing,
        [rlharness::judge::exact::EXACT_RULE],
        "only the exact lane sees it"
    );
    let exact = v.rule(rlharness::judge::exact::EXACT_RULE).unwrap();
    assert!(
        exact
            .evidence
            .message
            .starts_with("first difference at step 2"),
        "the first update uses the old weights; step 2's numbers are the first to move: {}",
        exact.evidence.message
    );
}

/// The torch self-tests (`scenarios/selftest/flagship-*.yaml`), one test each so that the
/// suite's two test threads share them: each planted regression (and its near-threshold twin)
/// is caught by the rules its scenario declares, and each control passes every rule, against a
/// reference made on this host (or, for the multi-seed ones, against the golden's
/// calibration); `compare` re-judges each alike. (`selftests.rs` checks that the set is
/// complete.)
const SELFTESTS: [&str; 19] = [
    "flagship-control",
    "flagship-control-20",
    "flagship-entropy-collapse",
    "flagship-entropy-collapse-near",
    "flagship-grad-norm",
    "flagship-grad-norm-near",
    "flagship-lr-x2",
    "flagship-lr-x2-near",
    "flagship-reward-drop",
    "flagship-reward-drop-near",
    "flagship-sampler-10-bits",
    "flagship-sampler-10-bits-near",
    "flagship-sampler-bf16",
    "flagship-sampler-bf16-near",
    "flagship-seeds-control",
    "flagship-skip-weight-sync",
    "flagship-skip-weight-sync-near",
    "flagship-weight-decay",
    "flagship-weight-decay-near",
];

/// Every `flagship-*` self-test on disk has its test here.
#[test]
fn every_torch_selftest_has_its_test() {
    let mut found: Vec<String> = std::fs::read_dir(repo().join("scenarios/selftest"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("flagship-"))
        .collect();
    found.sort();
    let mut named: Vec<String> = SELFTESTS.iter().map(|n| format!("{n}.yaml")).collect();
    named.sort();
    assert_eq!(found, named);
}

/// Run the self-test `name` and check its verdict. A single-run self-test is judged against
/// the reference it shares with the self-tests of the same scenario (`common::shared`): each
/// trains its planted run only (a control's planted run is a second run of the scenario, so the
/// exact lane still holds two runs to each other).
async fn selftest_is_caught(name: &str) {
    let scenario = repo()
        .join("scenarios/selftest")
        .join(format!("{name}.yaml"));
    let tmp = tempfile::tempdir().unwrap();
    let mut o = opts(tmp.path(), &[]);
    // A multi-seed self-test makes no reference: its seeds are judged against the calibration.
    let multi_seed = std::fs::read_to_string(&scenario)
        .unwrap()
        .contains("\n  seeds: ");
    if !multi_seed {
        let reference = common::shared::shared_reference(&scenario, &o).await;
        o.reference_run = Some(reference.dir.clone());
    }
    let report = run_expecting(&scenario, &o, ExitStatus::Passed).await;
    assert_eq!(report.is_multi_seed(), multi_seed, "{name}");
    let v = report.verdict.as_ref().unwrap();
    if report.is_multi_seed() {
        let rule = v.rule("seeds:critic/rewards/mean").unwrap();
        assert!(rule.evidence.message.contains("Student's t"), "{rule:?}");
    } else {
        assert!(v.exact_lane.as_ref().unwrap().applied, "{name}");
    }
    let dir = tmp.path().join("run");
    if let Some(&(_, step)) = WEIGHT_SYNC_PLANTS.iter().find(|(n, _)| *n == name) {
        weight_sync_caught_at(name, v, &dir, step);
    } else if !report.metrics.series(WEIGHT_SYNC_METRIC).is_empty() {
        // Unplanted as far as the weights go: every sync matched, and where the rule is on it
        // passed.
        let series = report.metrics.series(WEIGHT_SYNC_METRIC);
        assert!(series.iter().all(|(_, m)| *m == 1.0), "{name}: {series:?}");
        if let Some(r) = v.rule(WEIGHT_SYNC_RULE) {
            assert_eq!(r.status, RuleStatus::Pass, "{name}: {}", r.evidence.message);
        }
    }
    let ran = std::fs::read_to_string(dir.join("verdict.json")).unwrap();
    rlharness::app::compare_command(&dir, None, &repo().join("golden"))
        .unwrap()
        .0
        .exit_status();
    let again = std::fs::read_to_string(dir.join("compare/golden/verdict.json")).unwrap();
    assert_eq!(ran, again, "{name}");
}

const WEIGHT_SYNC_RULE: &str = "weight_sync:match";
const WEIGHT_SYNC_METRIC: &str = "weight_sync/match";

/// The self-tests whose plant leaves the sampler without the trainer's weights, and the first
/// step whose sync the exact check must find apart: a skipped sync from the first, a rounded
/// sampler at every sync; the sync skipped from the one before step 3's rollout is step 2's.
const WEIGHT_SYNC_PLANTS: [(&str, u64); 6] = [
    ("flagship-skip-weight-sync", 1),
    ("flagship-skip-weight-sync-near", 2),
    ("flagship-sampler-bf16", 1),
    ("flagship-sampler-bf16-near", 1),
    ("flagship-sampler-10-bits", 1),
    ("flagship-sampler-10-bits-near", 1),
];

/// `weight_sync:match` failed first at `step`, its evidence naming the first tensor that
/// differs with both sides' dtype, shape and hash; `run.json` holds the same tensor, and the
/// series is 0 from that step on (a rounded sampler or a skipped sync never catches up).
fn weight_sync_caught_at(
    name: &str,
    v: &rlharness::judge::Verdict,
    dir: &std::path::Path,
    step: u64,
) {
    let r = v
        .rule(WEIGHT_SYNC_RULE)
        .unwrap_or_else(|| panic!("{name}: no {WEIGHT_SYNC_RULE}"));
    assert_eq!(r.status, RuleStatus::Regressed, "{name}");
    assert!(
        r.evidence
            .message
            .starts_with(&format!("after the weight sync of step {step} ")),
        "{name}: {}",
        r.evidence.message
    );
    assert_eq!(r.failing_steps, (step..=5).collect::<Vec<_>>(), "{name}");
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let first = &run["weight_sync"]["mismatches"][0];
    assert_eq!(first["step"], step, "{name}: {}", run["weight_sync"]);
    let tensor = first["first"]["name"].as_str().unwrap();
    let (t, s) = (&first["first"]["training"], &first["first"]["sampling"]);
    // The engine's first tensor; the sampler holds it in fp32 too, other bytes.
    assert!(tensor.starts_with("model."), "{name}: {tensor}");
    assert_eq!(
        (&t["dtype"], &s["dtype"], &t["shape"]),
        (&s["dtype"], &t["dtype"], &s["shape"]),
        "{name}"
    );
    assert_eq!(t["dtype"], "F32", "{name}");
    assert_ne!(t["sha256"], s["sha256"], "{name}");
    let m = &r.evidence.message;
    let named = format!(
        "the first `{tensor}`: training F32 {} sha256 {}",
        t["shape"].to_string().replace(',', ", "),
        &t["sha256"].as_str().unwrap()[..12]
    );
    assert!(m.contains(&named), "{name}: {m} (wanted {named})");
    assert!(
        m.contains(&format!(
            "sampling F32 {}",
            s["shape"].to_string().replace(',', ", ")
        )),
        "{name}: {m}"
    );
}

macro_rules! selftests {
    ($($test:ident => $index:expr),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            selftest_is_caught(SELFTESTS[$index]).await;
        }
    )*};
}

selftests! {
    selftest_control_is_judged_as_declared => 0,
    selftest_control_20_is_judged_as_declared => 1,
    selftest_entropy_collapse_is_judged_as_declared => 2,
    selftest_entropy_collapse_near_is_judged_as_declared => 3,
    selftest_grad_norm_is_judged_as_declared => 4,
    selftest_grad_norm_near_is_judged_as_declared => 5,
    selftest_lr_x2_is_judged_as_declared => 6,
    selftest_lr_x2_near_is_judged_as_declared => 7,
    selftest_reward_drop_is_judged_as_declared => 8,
    selftest_reward_drop_near_is_judged_as_declared => 9,
    selftest_sampler_10_bits_is_judged_as_declared => 10,
    selftest_sampler_10_bits_near_is_judged_as_declared => 11,
    selftest_sampler_bf16_is_judged_as_declared => 12,
    selftest_sampler_bf16_near_is_judged_as_declared => 13,
    selftest_seeds_control_is_judged_as_declared => 14,
    selftest_skip_weight_sync_is_judged_as_declared => 15,
    selftest_skip_weight_sync_near_is_judged_as_declared => 16,
    selftest_weight_decay_is_judged_as_declared => 17,
    selftest_weight_decay_near_is_judged_as_declared => 18,
}

/// The sampler-vs-trainer mismatch rules (`stability:training/rollout_probs_diff_mean`,
/// `stability:rollout_corr/k3_kl`) and the exact check of each weight sync
/// (`weight_sync:match`) raise no false alarm: 20 unplanted seeds of the flagship (5 steps
/// each, judged against the shipped golden) pass all three, every sync matching bit for bit,
/// on whatever CPU runs the test. Their plants are caught by `flagship-skip-weight-sync`,
/// `flagship-sampler-bf16` and `flagship-sampler-10-bits` (the last by the exact check alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mismatch_rules_pass_twenty_unplanted_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/tiny-gsm8k-grpo.yaml");
    let mut worst: f64 = 0.0;
    for seed in 1..=20u64 {
        let dir = tmp.path().join(format!("seed-{seed}"));
        let mut o = common::run_options(tmp.path(), repo().join("golden"), dir, Vec::new());
        o.seed = Some(seed);
        o.steps = Some(5);
        let report = rlharness::app::run_one(&scenario, &o).await.unwrap();
        let v = report.verdict.as_ref().unwrap();
        for rule in [
            "stability:training/rollout_probs_diff_mean",
            "stability:rollout_corr/k3_kl",
            WEIGHT_SYNC_RULE,
        ] {
            let r = v
                .rule(rule)
                .unwrap_or_else(|| panic!("seed {seed}: no {rule}"));
            assert_eq!(
                r.status,
                RuleStatus::Pass,
                "seed {seed}: {rule}: {}",
                r.evidence.message
            );
        }
        assert_eq!(
            report.metrics.series(WEIGHT_SYNC_METRIC),
            (1..=5).map(|s| (s, 1.0)).collect::<Vec<_>>(),
            "seed {seed}"
        );
        let diffs = report.metrics.series("training/rollout_probs_diff_mean");
        assert_eq!(diffs.len(), 5, "seed {seed}");
        worst = diffs.iter().map(|(_, v)| *v).fold(worst, f64::max);
    }
    println!("largest training/rollout_probs_diff_mean over 20 seeds x 5 steps: {worst:e}");
}
