//! The fault scenarios of `scenarios/faults/`: each scripts a fault on the mock and declares
//! the verdict the harness must reach. The harness is under test: every scenario must match
//! its `expected_verdict` (exit 0), keep the steps before the fault, and (where it retries)
//! show the retries on the wire.

use crate::common;

use common::shared::shared_run;
use common::{opts, repo, wire};
use std::path::{Path, PathBuf};

use rlharness::model::error::ExitStatus;
use rlharness::model::metrics::MetricTable;
use rlharness::scenario::load_scenario;
use serde_json::Value;

/// (route prefix, status) of every request on the wire, in order.
fn calls(dir: &Path) -> Vec<(String, u64)> {
    wire(dir)
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap_or_default().to_string(),
                r["status"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The run of the fault scenario `name` (shared with `run::reproduce`, which re-judges every
/// CPU scenario), checked against what it declares: its run directory.
async fn run_fault(name: &str) -> PathBuf {
    let path = repo().join(format!("scenarios/faults/{name}.yaml"));
    let run = shared_run(&path, &opts(Path::new(""), &[])).await;
    let report = run.report();
    assert_eq!(
        report.exit_status(),
        ExitStatus::Passed,
        "{name}: the harness did not react as declared: {}",
        report.summary()
    );
    let dir = run.dir.clone();
    let scenario = load_scenario(&path, &[]).unwrap();
    let expected = scenario.expected_verdict.unwrap();
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let table = MetricTable::read_csv(&dir.join("metrics.csv")).unwrap();
    match expected.step {
        // Every step before the fault is kept, none after it.
        Some(step) => {
            assert_eq!(
                table.steps(),
                (1..step).collect::<Vec<_>>(),
                "{name}: the steps before the fault"
            );
            assert!(
                matches!(manifest["status"].as_str(), Some("failed" | "timed_out")),
                "{name}: {}",
                manifest["status"]
            );
            assert_eq!(manifest["failed_step"], step, "{name}");
        }
        None => {
            assert_eq!(table.steps(), vec![1, 2, 3, 4], "{name}");
            assert_eq!(manifest["status"], "completed", "{name}");
        }
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_5xx_is_retried_on_generate_but_never_on_step() {
    let dir = run_fault("http-5xx").await;
    let calls = calls(&dir);
    let gen_503 = calls
        .iter()
        .filter(|(r, s)| r == "/generate" && *s == 503)
        .count();
    assert_eq!(gen_503, 2, "two 503 answers on /generate, each sent again");
    let steps: Vec<u64> = calls
        .iter()
        .filter(|(r, _)| r == "/step")
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(steps.last(), Some(&503), "the run ends on the 503 of /step");
    assert_eq!(
        steps.iter().filter(|&&s| s == 503).count(),
        1,
        "/step is never sent twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_stops_the_run_without_a_retry() {
    let dir = run_fault("http-4xx").await;
    let fb: Vec<u64> = calls(&dir)
        .into_iter()
        .filter(|(r, _)| r == "/forward-backward")
        .map(|(_, s)| s)
        .collect();
    assert_eq!(fb, vec![200, 422]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_retried_where_idempotent_only() {
    let dir = run_fault("drop").await;
    let calls = calls(&dir);
    let forwards = calls.iter().filter(|(r, _)| r == "/forward").count();
    // One /forward a step for steps 1-3, and the one sent again at step 2.
    assert_eq!(forwards, 4, "{calls:?}");
    let fb = calls
        .iter()
        .filter(|(r, _)| r == "/forward-backward")
        .count();
    assert_eq!(
        fb, 3,
        "the cut /forward-backward of step 3 is not sent again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_within_the_time_out_is_waited_out() {
    run_fault("latency").await;
}

/// The real client never retries: without `driver.retry` the first 503 ends the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_opt_in_policy_a_503_is_never_sent_again() {
    let dir = run_fault("http-5xx-no-retry").await;
    let gen_503 = calls(&dir)
        .iter()
        .filter(|(r, s)| r == "/generate" && *s == 503)
        .count();
    assert_eq!(gen_503, 1, "one 503 answer on /generate, never sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_ends_as_a_hang_at_its_step() {
    run_fault("stall").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_finite_and_misshapen_replies_stop_the_driver() {
    for name in ["nan-grad-norm", "nan-logprobs", "wrong-shape"] {
        run_fault(name).await;
    }
}

/// A sampler asleep unasked answers /generate with the real server's plain-text 500; the
/// driver, like the real client, neither recognises it nor retries: the run fails there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_sampler_fails_the_run_with_a_500_on_generate() {
    let dir = run_fault("sampler-sleep").await;
    let calls = calls(&dir);
    let refused = calls
        .iter()
        .position(|(r, s)| r == "/generate" && *s == 500)
        .expect("a /generate refused while asleep");
    assert!(
        !calls[refused..].iter().any(|(r, _)| r == "/wake-inference"),
        "the driver does not wake the sampler to try again: {:?}",
        &calls[refused..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_a_404_on_the_lost_job() {
    run_fault("restart").await;
}

#[test]
fn every_fault_scenario_declares_its_verdict_and_is_tested() {
    let dir = repo().join("scenarios/faults");
    let tested = [
        "drop",
        "http-4xx",
        "http-5xx",
        "http-5xx-no-retry",
        "latency",
        "nan-grad-norm",
        "nan-logprobs",
        "restart",
        "sampler-sleep",
        "stall",
        "wrong-shape",
    ];
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let s = load_scenario(&p, &[]).unwrap();
            assert!(s.expected_verdict.is_some(), "{}", p.display());
            p.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    found.sort();
    assert_eq!(found, tested);
}
