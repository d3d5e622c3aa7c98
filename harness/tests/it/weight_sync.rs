//! The exact check of each weight sync end to end on the mock (any host, no torch): the
//! builtin driver asks `/weight-digest` right after every step's sync, logs `weight_sync/match`,
//! and keeps what differed in `run.json`; in a learning scenario the rule `weight_sync:match`
//! passes an unplanted run and fails a skipped sync at its step, naming the first tensor. The
//! torch plants (a skipped sync, rounded samplers) are `flagship.rs`'s.

use crate::common;

use common::{repo, wire};
use serde_json::Value;

use rlharness::app::run_one;
use rlharness::judge::RuleStatus;

/// Four steps of the mock smoke scenario with the learning scenarios' default rules on and
/// `plant` planted; its report and `run.json`.
async fn smoke(tmp: &std::path::Path, plant: Option<&str>) -> (rlharness::report::Report, Value) {
    let mut set = vec!["checks.stability=true".to_string()];
    set.extend(plant.map(|p| format!("driver.plant=[{p}]")));
    let dir = tmp.join("run");
    let mut o = common::run_options(tmp, repo().join("golden"), dir.clone(), set);
    o.steps = Some(4);
    let scenario = repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml");
    let report = run_one(&scenario, &o).await.unwrap();
    let run =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    (report, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sync_is_checked_right_after_it_and_an_unplanted_run_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let (report, run) = smoke(tmp.path(), None).await;
    let series = report.metrics.series("weight_sync/match");
    assert_eq!(series, [(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)]);
    let rule = report
        .verdict
        .as_ref()
        .unwrap()
        .rule("weight_sync:match")
        .unwrap();
    assert_eq!(rule.status, RuleStatus::Pass, "{}", rule.evidence.message);
    assert_eq!(run["weight_sync"], serde_json::json!({"checked": 4}));

    // On the wire: one digest a step, right after the sync's reset of the prefix cache, for the
    // training and the sampling job; the mock's simulated Qwen3-0.6B, in bf16.
    let lines = wire(&tmp.path().join("run"));
    let routes: Vec<&str> = lines.iter().map(|l| l["route"].as_str().unwrap()).collect();
    let at: Vec<usize> = (0..routes.len())
        .filter(|&i| routes[i] == "/weight-digest")
        .collect();
    assert_eq!(at.len(), 4, "{routes:?}");
    for &i in &at {
        assert_eq!(routes[i - 1], "/operation", "{routes:?}");
        assert_eq!(
            lines[i - 1]["request"]["json"]["operation_type"],
            "reset-prefix-cache"
        );
        assert_eq!(
            lines[i]["request"]["json"],
            serde_json::json!({"training_job_id": 2, "sampling_job_id": 1})
        );
        assert_eq!(lines[i]["status"], 200);
    }
    let digest = &lines[at[0]]["response"]["json"];
    let training = digest["training"].as_array().unwrap();
    assert_eq!(training.len(), 3 + 11 * 28, "{}", training[0]);
    assert_eq!(training[0]["name"], "model.embed_tokens.weight");
    assert_eq!(training[0]["dtype"], "BF16");
    assert_eq!(training[0]["shape"], serde_json::json!([151936, 1024]));
    assert_eq!(digest["training"], digest["sampling"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_sync_fails_the_rule_at_its_step_naming_the_tensor() {
    for (plant, first, failing) in [
        ("skip_weight_sync", 1, vec![1, 2, 3, 4]),
        // Skipped from the sync before step 3's rollout on: the one after step 2's update.
        ("{skip_weight_sync_from: 3}", 2, vec![2, 3, 4]),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (report, run) = smoke(tmp.path(), Some(plant)).await;
        let v = report.verdict.as_ref().unwrap();
        let rule = v.rule("weight_sync:match").unwrap();
        assert_eq!(rule.status, RuleStatus::Regressed, "{plant}");
        assert_eq!(rule.failing_steps, failing, "{plant}");
        let m = &rule.evidence.message;
        assert!(
            m.starts_with(&format!("after the weight sync of step {first} the sampler does not hold the trainer's weights")),
            "{plant}: {m}"
        );
        // Every tensor of the simulated model moves with each update.
        assert!(
            m.contains("311 of 311 tensors differ, the first `model.embed_tokens.weight`: training BF16 [151936, 1024] sha256 "),
            "{plant}: {m}"
        );
        let record = &run["weight_sync"];
        assert_eq!(record["checked"], 4, "{plant}");
        let steps: Vec<u64> = record["mismatches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["step"].as_u64().unwrap())
            .collect();
        assert_eq!(steps, failing, "{plant}");
        let diff = &record["mismatches"][0]["first"];
        assert_eq!(diff["name"], "model.embed_tokens.weight");
        assert_ne!(diff["training"]["sha256"], diff["sampling"]["sha256"]);
        assert_eq!(diff["training"]["numel"], 151936u64 * 1024);
    }
}

/// The rule is a learning scenario's: the smoke scenario as written (no `convergence` tag, no
/// `checks.stability`) logs the metric but is not judged by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_without_the_default_rules_only_logs_the_metric() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut o = common::run_options(
        tmp.path(),
        repo().join("golden"),
        dir,
        vec!["driver.plant=[skip_weight_sync]".into()],
    );
    o.steps = Some(2);
    let scenario = repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml");
    let report = run_one(&scenario, &o).await.unwrap();
    assert_eq!(
        report.metrics.series("weight_sync/match"),
        [(1, 0.0), (2, 0.0)]
    );
    assert!(report
        .verdict
        .as_ref()
        .unwrap()
        .rule("weight_sync:match")
        .is_none());
}
