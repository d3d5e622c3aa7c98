//! `rlharness run` end to end on the scripted mock: the smoke scenario against its accepted
//! golden, the regressions the golden must catch, and the failures the harness must survive.

use crate::common;

use common::{opts, repo, run_expecting, wire};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rlharness::app::run_one;
use rlharness::model::error::ExitStatus;
use rlharness::model::metrics::MetricTable;
use serde_json::{json, Value};

mod audit;
mod calibrate;
mod reproduce;
mod seeds;

fn smoke() -> PathBuf {
    repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")
}

fn mean(xs: &[(u64, f64)]) -> f64 {
    xs.iter().map(|(_, v)| v).sum::<f64>() / xs.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_scenario_passes_against_its_golden_with_a_complete_run_directory() {
    // The smoke's run as `reproduce` re-judges it (`common::shared`).
    let run = crate::common::shared::shared_run(&smoke(), &opts(Path::new(""), &[])).await;
    let report = run.report();
    assert_eq!(
        report.exit_status(),
        ExitStatus::Passed,
        "{}",
        report.summary()
    );
    let dir = run.dir.clone();
    for f in [
        "run.json",
        "metrics.csv",
        "wire.jsonl",
        "server_config.json",
        "verdict.json",
        "report.md",
        "report.html",
        "junit.xml",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }

    // run.json names the code: the binary's commit, when it was built from a checkout.
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(head) = head {
        // `-dirty` when the binary was built from uncommitted changes (a developer's tree).
        let built = manifest["build_commit"].as_str().unwrap_or_default();
        assert_eq!(built.trim_end_matches("-dirty"), head, "{built}");
    }

    // Every metric the driver promises, at every one of the 20 steps.
    let table = MetricTable::read_csv(&dir.join("metrics.csv")).unwrap();
    assert_eq!(table.steps(), (1..=20).collect::<Vec<_>>());
    for m in [
        "critic/score/mean",
        "critic/score/max",
        "critic/score/min",
        "critic/rewards/mean",
        "critic/advantages/mean",
        "response_length/mean",
        "prompt_length/mean",
        "actor/pg_loss",
        "actor/ppo_kl",
        "actor/pg_clipfrac",
        "actor/grad_norm",
        "actor/lr",
        "actor/entropy",
        "perf/mfu/actor",
        "perf/throughput",
        "perf/total_num_tokens",
        "timing_s/gen",
        "timing_s/old_log_prob",
        "timing_s/update_actor",
        "timing_s/update_weights",
        "timing_s/step",
        "training/global_step",
        "training/epoch",
    ] {
        assert_eq!(table.series(m).len(), 20, "{m} is not at every step");
    }
    let reward = table.series("critic/rewards/mean");
    assert!(
        mean(&reward[15..]) > mean(&reward[..5]) + 0.3,
        "the mock's reward must rise with weight syncs: {reward:?}"
    );
    for (_, mfu) in table.series("perf/mfu/actor") {
        assert!(mfu > 0.0 && mfu <= 1.0);
    }

    // The real route order of a step (consecutive repeats folded: one generate a prompt).
    let routes: Vec<String> = wire(&dir)
        .iter()
        .map(|l| l["route"].as_str().unwrap().to_string())
        .collect();
    let mut folded: Vec<&str> = Vec::new();
    for r in &routes {
        if folded.last() != Some(&r.as_str()) {
            folded.push(r);
        }
    }
    // Colocated, as verl's hybrid mode drives the adapter: each job read back, the sampler
    // put to sleep, then the weight sync (wake ["weights"], weight-sync, wake ["kv_cache"],
    // one reset-prefix-cache) before the first rollout and after every step, each sync after a
    // step checked bit for bit (`/weight-digest`).
    let sync = [
        "/wake-inference",
        "/operation",
        "/wake-inference",
        "/operation",
    ];
    let first_step: Vec<&str> = [
        "/health",
        "/initialize",
        // The client polls the jobs in its order: training (2), sampling (1).
        "/job/2",
        "/job/1",
        "/sleep-inference",
    ]
    .into_iter()
    .chain(sync)
    .chain([
        "/generate",
        "/sleep-inference",
        "/forward",
        "/forward-backward",
        "/step",
    ])
    .chain(sync)
    // The exact check of that sync (an rlharness extension the real client never sends).
    .chain(["/weight-digest", "/generate"])
    .collect();
    assert_eq!(&folded[..first_step.len()], &first_step[..], "{folded:?}");
    let last = ["/step"]
        .into_iter()
        .chain(sync)
        .chain(["/weight-digest", "/destroy"])
        .collect::<Vec<_>>();
    assert_eq!(
        &folded[folded.len() - last.len()..],
        &last[..],
        "the last step ends with the weight sync: {folded:?}"
    );
    let lines = wire(&dir);
    let step_one: Vec<Value> = lines
        .iter()
        .skip_while(|l| l["route"] != "/wake-inference")
        .take(4)
        .map(|l| l["request"]["json"].clone())
        .collect();
    assert_eq!(
        step_one,
        [
            json!(["weights"]),
            json!({"operation_type": "weight-sync", "sub_job_id": 2, "sub_job_type": "training",
                   "payload": {"source_sub_job_id": 2, "target_sub_job_ids": [1]}}),
            json!(["kv_cache"]),
            json!({"operation_type": "reset-prefix-cache", "sub_job_type": "sampling",
                   "payload": {"drain": true, "timeout_s": 60.0, "retry_interval_s": 0.1}}),
        ],
        "the colocated weight sync"
    );
    let sleep = lines
        .iter()
        .find(|l| l["route"] == "/sleep-inference")
        .unwrap();
    assert_eq!(sleep["request"]["json"], json!({"level": 1}));
    // One prompt and one sample a request: 16 prompts x n = 5, each a request, every step;
    // every body exactly the adapter's (no `n`, no `seed`, explicit nulls).
    let generates: Vec<&Value> = lines.iter().filter(|l| l["route"] == "/generate").collect();
    assert_eq!(generates.len(), 16 * 5 * 20);
    for g in &generates {
        let body = &g["request"]["dssst1"];
        let keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["prompts", "sampling_params", "routing_key", "strict"],
            "{body}"
        );
        assert_eq!(body["prompts"].as_array().unwrap().len(), 1, "{body}");
        assert!(body["routing_key"].is_null());
        assert_eq!(body["strict"], json!(false), "{body}");
        assert_eq!(
            body["sampling_params"],
            json!({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 16,
                   "logprobs": null, "repetition_penalty": 1.0})
        );
    }
    assert_eq!(routes.iter().filter(|r| *r == "/destroy").count(), 2);

    // The adapter's `meta` per route: 14 keys on /forward; on /forward-backward those plus
    // actor_config, policy_loss_config, global_batch_size, batch_num_tokens (a 0-d I64
    // tensor) and an explicit null rollout_is_weights.
    let meta_of = |route: &str| {
        lines
            .iter()
            .find(|l| l["route"] == route)
            .map(|l| l["request"]["dssst1"]["meta"].clone())
            .unwrap_or_else(|| panic!("no {route} in wire.jsonl"))
    };
    let fwd = meta_of("/forward");
    assert_eq!(fwd.as_object().unwrap().len(), 14, "{fwd}");
    let fb = meta_of("/forward-backward");
    let extra: Vec<&str> = fb
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .filter(|k| fwd.get(*k).is_none())
        .collect();
    assert_eq!(
        extra,
        [
            "actor_config",
            "policy_loss_config",
            "global_batch_size",
            "batch_num_tokens",
            "rollout_is_weights"
        ]
    );
    assert_eq!(fb["batch_num_tokens"], json!({"dtype": "I64", "shape": []}));
    assert_eq!(fb["rollout_is_weights"], Value::Null);

    // What reached the server: ZoRRo and logits keys in the training job's ds_worker_config.
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("server_config.json")).unwrap())
            .unwrap();
    let dwc = &cfg["training"]["ds_worker_config"];
    assert_eq!(dwc["zorro_train_enable"], true);
    assert_eq!(dwc["rollout_n"], 5);
    assert_eq!(dwc["logits_optimization"], "compute");
    for k in [
        "logits_optimization_peak_mem_size_in_gib",
        "logits_compute_in_fp32",
        "logits_compute_from_fp32_inputs",
        "response_len",
        "max_token_len",
        "temperature",
        "use_unpad",
    ] {
        assert!(dwc.get(k).is_some(), "ds_worker_config lacks {k}: {dwc}");
    }
    assert_eq!(cfg["training"]["ds_config"]["train_batch_size"], 80);
    assert!(
        cfg.get("log_prob").is_none(),
        "log_prob_gpus = 0 creates no log_prob job"
    );

    // What reaches the server is a reviewable snapshot beside the numeric goldens.
    insta::with_settings!({
        snapshot_path => repo().join("harness/tests/snapshots"),
        prepend_module_to_snapshot => false,
    }, {
        insta::assert_json_snapshot!("mock-gsm8k-grpo.server_config", cfg, {
            ".training.checkpoint_path" => "[path]",
        });
    });
}

/// `run --direct`: the builtin driver talks to the backend itself, so the run is the same run
/// (the mock is deterministic: the same metrics, the same verdict) with no wire recorded, and
/// the report says so. A command trainer has no direct path: exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_run_is_the_same_run_without_the_wire() {
    let tmp = tempfile::tempdir().unwrap();
    let mut direct = opts(&tmp.path().join("direct"), &[]);
    direct.direct = true;
    let report = run_expecting(&smoke(), &direct, ExitStatus::Passed).await;
    let dir = tmp.path().join("direct/run");
    assert!(!dir.join("wire.jsonl").exists() && !dir.join("server_config.json").exists());
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert!(
        manifest["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("direct: ")),
        "{manifest}"
    );
    assert!(std::fs::read_to_string(dir.join("report.md"))
        .unwrap()
        .contains("without the recording proxy"));
    run_expecting(
        &smoke(),
        &opts(&tmp.path().join("proxied"), &[]),
        ExitStatus::Passed,
    )
    .await;
    let a = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    let b = std::fs::read_to_string(tmp.path().join("proxied/run/metrics.csv")).unwrap();
    assert_eq!(a, b);
    assert!(report.verdict.is_some());

    let mut command = opts(&tmp.path().join("command"), &[]);
    command.direct = true;
    let trainer = repo().join("harness/tests/fixtures/verl/scenarios/verl-jsonl.yaml");
    let e = rlharness::app::run_one(&trainer, &command)
        .await
        .unwrap_err();
    assert_eq!(e.status, ExitStatus::InvalidInput);
    assert!(e.to_string().contains("--direct"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_reward_curve_fails_on_the_reward_window_with_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    run_expecting(
        &smoke(),
        &opts(tmp.path(), &["backend.reward.offset=-0.1"]),
        ExitStatus::CheckFailed,
    )
    .await;
    let md = std::fs::read_to_string(tmp.path().join("run/report.md")).unwrap();
    let line = md
        .lines()
        .find(|l| l.starts_with("| `golden:critic/rewards/mean`") && l.contains("regressed"))
        .unwrap_or_else(|| panic!("no failing reward rule in:\n{md}"));
    // The window, the value, the golden and the band are all on the rule's line.
    assert!(line.contains("steps "), "{line}");
    assert!(line.matches('[').count() >= 1, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_percent_less_efficient_backend_fails_on_mfu() {
    let tmp = tempfile::tempdir().unwrap();
    let report = run_expecting(
        &smoke(),
        &opts(tmp.path(), &["backend.efficiency.scale=0.9"]),
        ExitStatus::CheckFailed,
    )
    .await;
    let v = report.verdict.unwrap();
    let failing: Vec<&str> = v.failing().map(|r| r.rule.as_str()).collect();
    // The mock simulates time: the exact lane holds MFU bit for bit too.
    assert_eq!(
        failing,
        vec!["golden:perf/mfu/actor", "exact:every series bit for bit"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_skips_weight_sync_sees_a_flat_reward() {
    let tmp = tempfile::tempdir().unwrap();
    run_expecting(
        &smoke(),
        &opts(tmp.path(), &["driver.plant=[skip_weight_sync]"]),
        ExitStatus::CheckFailed,
    )
    .await;
    let table = MetricTable::read_csv(&tmp.path().join("run/metrics.csv")).unwrap();
    let reward = table.series("critic/rewards/mean");
    assert_eq!(reward.len(), 20);
    assert!(
        (mean(&reward[15..]) - mean(&reward[..5])).abs() < 0.1,
        "without weight sync the reward must stay flat: {reward:?}"
    );
    let routes: Vec<Value> = wire(&tmp.path().join("run"));
    assert!(!routes
        .iter()
        .any(|l| l["request"].to_string().contains("weight-sync")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reruns_with_the_same_seed_never_fail() {
    for i in 0..20 {
        let tmp = tempfile::tempdir().unwrap();
        let report = run_one(&smoke(), &opts(tmp.path(), &[])).await.unwrap();
        assert_eq!(
            report.exit_status(),
            ExitStatus::Passed,
            "rerun {i}: {}",
            report.summary()
        );
    }
}

/// A mock Arctic server on its own runtime, so the test can kill it outright (connections
/// included), as a crashed server dies.
struct DoomedServer {
    url: String,
    kill: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

fn doomed_server() -> DoomedServer {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (kill, kill_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let engine = rlharness_arctic::mock::MockEngine::new(Default::default(), 1).unwrap();
            let (router, _) = rlharness_arctic::server::router(
                Arc::new(engine),
                rlharness_arctic::server::ServerOptions::default(),
            );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(l.local_addr().unwrap()).unwrap();
            tokio::spawn(rlharness_arctic::server::serve(
                l,
                router,
                std::future::pending(),
            ));
        });
        let _ = kill_rx.recv();
        rt.shutdown_background();
    });
    let addr = addr_rx.recv().unwrap();
    DoomedServer {
        url: format!("http://{addr}"),
        kill,
        thread,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_dies_mid_run_is_exit_3_with_the_metrics_so_far() {
    let server = doomed_server();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let csv = dir.join("metrics.csv");
    let run_over = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let csv = csv.clone();
        let kill = server.kill.clone();
        let run_over = run_over.clone();
        std::thread::spawn(move || {
            // Kill the server once three steps are on disk, however long the run takes to get
            // there (it used to give up after 12 s, and a slow run then passed unkilled).
            while !run_over.load(std::sync::atomic::Ordering::SeqCst) {
                let rows = std::fs::read_to_string(&csv)
                    .map(|t| t.lines().count())
                    .unwrap_or(0);
                if rows > 3 {
                    let _ = kill.send(());
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let url = format!("backend.url={}", server.url);
    let report = run_one(
        &smoke(),
        &opts(
            tmp.path(),
            &["backend.kind=remote", &url, "timeouts.request=5s"],
        ),
    )
    .await
    .unwrap();
    run_over.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.join().unwrap();
    let _ = server.kill.send(());
    server.thread.join().unwrap();
    assert_eq!(
        report.exit_status(),
        ExitStatus::RunFailed,
        "{}",
        report.summary()
    );
    let table = MetricTable::read_csv(&csv).unwrap();
    assert!(
        table.len() >= 3 && table.len() < 20,
        "the steps before the death are kept: {:?}",
        table.steps()
    );
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(manifest["status"], "failed");
    let reason = manifest["reason"].as_str().unwrap();
    assert!(reason.contains("step "), "{reason}");
    assert!(dir.join("report.md").is_file());
}
