//! `rlharness run` end to end on the scripted mock: the smoke scenario against its accepted
//! golden, the regressions the golden must catch, and the failures the harness must survive.

use crate::common;

use common::{opts, repo, run_expecting, wire};
use std::path::PathBuf;
use std::sync::Arc;

use rlharness::app::run_one;
use rlharness::error::ExitStatus;
use rlharness::metrics::MetricTable;
use serde_json::{json, Value};

fn smoke() -> PathBuf {
    repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")
}

fn mean(xs: &[(u64, f64)]) -> f64 {
    xs.iter().map(|(_, v)| v).sum::<f64>() / xs.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_scenario_passes_against_its_golden_with_a_complete_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    run_expecting(&smoke(), &opts(tmp.path(), &[]), ExitStatus::Passed).await;
    let dir = tmp.path().join("run");
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
    // one reset-prefix-cache) before the first rollout and after every step.
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
    .chain(["/generate"])
    .collect();
    assert_eq!(&folded[..first_step.len()], &first_step[..], "{folded:?}");
    let last = ["/step"]
        .into_iter()
        .chain(sync)
        .chain(["/destroy"])
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
            let engine = rlharness::backend::mock::MockEngine::new(Default::default(), 1).unwrap();
            let (router, _) = rlharness::backend::server::router(
                Arc::new(engine),
                rlharness::backend::server::ServerOptions::default(),
            );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(l.local_addr().unwrap()).unwrap();
            tokio::spawn(rlharness::backend::server::serve(
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
    let watcher = {
        let csv = csv.clone();
        let kill = server.kill.clone();
        std::thread::spawn(move || {
            // Kill the server once three steps are on disk.
            for _ in 0..6000 {
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

/// The shipped scenarios that run without libtorch: the mock smoke, every fault self-test and
/// every replay of a recorded cassette.
fn cpu_scenarios() -> Vec<PathBuf> {
    let mut out = vec![smoke()];
    for dir in ["scenarios/faults", "scenarios/replay"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        found.sort();
        assert!(!found.is_empty(), "no scenario in {dir}");
        out.extend(found);
    }
    out.extend(selftests("mock-"));
    out
}

/// The shipped self-tests whose file name starts with `prefix` (`mock-`: no libtorch needed).
pub fn selftests(prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(repo().join("scenarios/selftest"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no self-test {prefix}*.yaml");
    found
}

/// A self-test's planted run is judged against the reference run made just before it on this
/// host, and names it: `reference_run` in run.json, the reference's directory beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selftest_judges_its_planted_run_against_a_reference_made_here() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/selftest/mock-mfu-drop.yaml");
    let report = run_expecting(&scenario, &opts(tmp.path(), &[]), ExitStatus::Passed).await;
    let v = report.verdict.as_ref().unwrap();
    assert_eq!(v.outcome, rlharness::compare::Outcome::Regressed);
    let mfu = v.rule("golden:perf/mfu/actor").unwrap();
    assert!(
        mfu.evidence.message.contains("regressed"),
        "{}",
        mfu.evidence.message
    );
    assert_eq!(report.reference.as_ref().unwrap().label, "reference run");
    let manifest = rlharness::rundir::RunManifest::read(&tmp.path().join("run")).unwrap();
    let reference = manifest
        .reference_run
        .expect("the planted run names its reference");
    assert!(reference.ends_with("reference"), "{reference}");
    // The reference ran as written: the planted run's MFU is the reference's times 0.95.
    let ref_table = rlharness::metrics::MetricTable::read_csv(
        &std::path::Path::new(&reference).join("metrics.csv"),
    )
    .unwrap();
    let (planted, original) = (
        report.metrics.series("perf/mfu/actor"),
        ref_table.series("perf/mfu/actor"),
    );
    assert_eq!(planted.len(), original.len());
    for ((_, p), (_, o)) in planted.iter().zip(&original) {
        assert!((p / o - 0.95).abs() < 0.01, "{p} against {o}");
    }
}

/// `rlharness compare RUN` on a run directory writes exactly the verdict.json `run` wrote there,
/// and exits as `run` did.
fn assert_compare_reproduces(
    dir: &std::path::Path,
    report: &rlharness::report::Report,
    what: &dyn std::fmt::Display,
) {
    let ran = std::fs::read_to_string(dir.join("verdict.json")).unwrap();
    let status = rlharness::app::compare_command(dir, None, &repo().join("golden"))
        .unwrap()
        .0
        .exit_status();
    let again = std::fs::read_to_string(dir.join("compare/golden/verdict.json")).unwrap();
    assert_eq!(ran, again, "{what}: compare's verdict differs from run's");
    assert_eq!(status, report.exit_status(), "{what}");
}

/// A run the watchdog stopped (a fail-fast rule settled at step 5 of 20) is judged alike by
/// `run` and `compare`, the stop being a rule of its own (`watchdog:aborted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_reproduces_a_watchdog_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(
        tmp.path(),
        &[
            "backend.reward.offset=-0.1",
            "checks.golden.critic/rewards/mean.fail_fast=true",
        ],
    );
    let report = run_expecting(&smoke(), &o, ExitStatus::CheckFailed).await;
    let v = report.verdict.as_ref().unwrap();
    let w = v.rule("watchdog:aborted").unwrap();
    assert_eq!(w.failing_steps, vec![5]);
    assert!(w.evidence.message.contains("fail fast"), "{w:?}");
    assert_compare_reproduces(&tmp.path().join("run"), &report, &"fail-fast abort");
}

/// One judge: `rlharness compare RUN` re-judges a stored run from its directory alone and
/// writes exactly the verdict.json that `rlharness run` wrote, whatever decided it (golden
/// bands, expectations, the replay rule, watchdog stops, run failures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_reproduces_the_run_verdict_of_every_cpu_scenario() {
    let scenarios = cpu_scenarios();
    let runs = futures_util::future::join_all(scenarios.iter().map(|s| async move {
        let tmp = tempfile::tempdir().unwrap();
        let o = opts(tmp.path(), &[]);
        let report = run_one(s, &o).await.unwrap();
        (s, tmp, report)
    }))
    .await;
    for (scenario, tmp, report) in runs {
        assert_compare_reproduces(&tmp.path().join("run"), &report, &scenario.display());
        // Every shipped CPU scenario gets what it expects here.
        assert_eq!(
            report.exit_status(),
            ExitStatus::Passed,
            "{}: {}",
            scenario.display(),
            report.summary()
        );
    }
}

/// An `expect:` rule on MFU can fail: the runner keeps an MFU outside (0, 1] out of the series
/// (and out of the plots) but stores it in run.json, and the judge puts it back for the
/// expectations. Planted: the mock simulates a B200 while the driver computes MFU against an
/// A100's peak, scaled so that 2 of the 20 steps come out just above 1 (steps 10 and 18);
/// before, `max(perf/mfu/actor) <= 1` held on the 18 steps left. `compare` judges it alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mfu_expectation_fails_on_an_mfu_above_one() {
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(
        tmp.path(),
        &[
            "backend.device=b200",
            "metrics.device=a100",
            "backend.efficiency.scale=0.4238",
        ],
    );
    let report = run_expecting(&smoke(), &o, ExitStatus::CheckFailed).await;
    let v = report.verdict.as_ref().unwrap();
    let kept = report.metrics.series("perf/mfu/actor");
    assert_eq!(kept.len(), 18, "{kept:?}");
    assert!(kept.iter().all(|(_, x)| *x <= 1.0));
    let e = v.rule("expect:max(perf/mfu/actor) <= 1").unwrap();
    assert_eq!(e.status, rlharness::compare::RuleStatus::Regressed, "{e:?}");
    assert!(e.evidence.value.unwrap() > 1.0, "{e:?}");
    let sanity: Vec<u64> = v
        .rules
        .iter()
        .filter(|r| r.rule == "sanity:0 < perf/mfu/actor <= 1")
        .flat_map(|r| r.failing_steps.clone())
        .collect();
    assert_eq!(sanity, vec![10, 18]);
    let dir = tmp.path().join("run");
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["dropped"].as_array().unwrap().len(), 2);
    assert_compare_reproduces(&dir, &report, &"MFU above one");
}

/// `rlharness golden calibrate` runs the scenario N times and writes `calibration.json` beside
/// the golden; the mock is deterministic, so every standard deviation is 0 (a calibrated band
/// then falls back to its floor). CI never calibrates.
#[test]
fn golden_calibrate_writes_the_measured_noise_beside_the_golden() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let calibrate = |ci: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
        c.args(["golden", "--golden"])
            .arg(&golden)
            // `--allow-dirty`: a working tree under development has uncommitted changes.
            .args([
                "calibrate",
                "--allow-dirty",
                "--runs",
                "2",
                "--jobs",
                "2",
                "--out",
            ])
            .arg(tmp.path().join("reports"))
            .arg(smoke())
            .current_dir(repo());
        match ci {
            Some(v) => c.env("CI", v),
            None => c.env_remove("CI"),
        };
        c.output().unwrap()
    };
    let refused = calibrate(Some("true"));
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("CI never writes goldens"));
    let out = calibrate(None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cal: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(golden.join("mock-gsm8k-grpo/cpu/calibration.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cal["runs"], 2);
    assert_eq!(cal["seeds"], serde_json::json!([1, 1]));
    // The terminal gets a line a rule, not a Markdown row a window (calibration.json has those).
    let printed = String::from_utf8_lossy(&out.stdout);
    let rules = cal["windows"].as_object().unwrap().len();
    assert!(!printed.contains('|'), "{printed}");
    assert_eq!(printed.lines().count(), rules + 3, "{printed}");
    let reward = cal["windows"]["critic/rewards/mean"].as_array().unwrap();
    assert_eq!(reward.len(), 4, "4 windows of 5 steps");
    assert!(
        reward.iter().all(|w| w["n"] == 2 && w["std"] == 0.0),
        "{reward:?}"
    );
    assert_eq!(cal["steps"]["actor/lr"].as_array().unwrap().len(), 20);
}

/// `golden calibrate --detect 5%` reads the shipped calibration (nothing runs) and prints the
/// seeds a multi-seed verdict needs per window: for the flagship, a 5% reward drop over steps
/// 11..20 takes 15 seeds, and over steps 1..10 no number of seeds suffices with a 10-run
/// calibration.
#[test]
fn golden_calibrate_detect_prints_the_seeds_needed() {
    let cli = |detect: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args([
                "golden",
                "calibrate",
                "scenarios/tiny-gsm8k-grpo.yaml",
                "--detect",
                detect,
            ])
            .current_dir(repo())
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let o = cli("5%");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A plain table for a terminal, one row a window.
    let row = |cells: &[&str]| {
        out.lines().any(|l| {
            l.split_whitespace()
                .take(cells.len())
                .eq(cells.iter().copied())
        })
    };
    assert!(
        row(&[
            "critic/rewards/mean",
            "11..20",
            "0.68918",
            "0.024161",
            "0.034459",
            "15"
        ]),
        "{out}"
    );
    assert!(
        row(&[
            "critic/rewards/mean",
            "1..10",
            "0.450488",
            "0.023235",
            "0.022524",
            "more",
            "than",
            "1000"
        ]),
        "{out}"
    );
    assert!(!out.contains('|'), "no Markdown on the terminal: {out}");
    let bad = cli("5x");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--detect: `5x` is not a fraction"));
}

/// `--detect` reads the scenario's calibration whatever its hardware key (a GPU run's is known
/// only once its backend runs): it used to look under `cpu` alone, find nothing for an H200
/// scenario, and calibrate all over again. With calibrations for two keys it asks which.
#[test]
fn golden_calibrate_detect_finds_the_calibration_of_any_hardware() {
    let tmp = tempfile::tempdir().unwrap();
    let cal = repo().join("golden/tiny-gsm8k-grpo/cpu/calibration.json");
    let detect = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(["golden", "--golden"])
            .arg(tmp.path())
            .args([
                "calibrate",
                "scenarios/tiny-gsm8k-grpo.yaml",
                "--detect",
                "5%",
            ])
            .args(extra)
            .current_dir(repo())
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let h200 = tmp.path().join("tiny-gsm8k-grpo/h200");
    std::fs::create_dir_all(&h200).unwrap();
    std::fs::copy(&cal, h200.join("calibration.json")).unwrap();
    let o = detect(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("seeds a multi-seed verdict needs"));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("calibrating first"));
    let a100 = tmp.path().join("tiny-gsm8k-grpo/a100");
    std::fs::create_dir_all(&a100).unwrap();
    std::fs::copy(&cal, a100.join("calibration.json")).unwrap();
    let o = detect(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a100, h200"));
    assert!(detect(&["--hardware", "h200"]).status.success());
}

/// A calibration measures healthy runs only: a seed whose run fails a rule that does not depend
/// on the calibration (here the smoke's fixed reward band, made for its one seed) stops it,
/// naming the seed, the run and the rule, and nothing is written.
#[test]
fn golden_calibrate_refuses_a_run_that_fails_a_fixed_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let dst = golden.join("mock-gsm8k-grpo/cpu");
    std::fs::create_dir_all(&dst).unwrap();
    for f in ["metrics.csv", "golden.yaml"] {
        std::fs::copy(
            repo().join("golden/mock-gsm8k-grpo/cpu").join(f),
            dst.join(f),
        )
        .unwrap();
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(["golden", "--golden"])
        .arg(&golden)
        // Seeds 4 and 5 miss the band by 0.015 and 0.0175 (seed 2 sits on its edge).
        .args(["calibrate", "--allow-dirty", "--seeds", "4..5", "--out"])
        .arg(tmp.path().join("reports"))
        .arg(smoke())
        .current_dir(repo())
        .env_remove("CI")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("failed rules that do not depend on the calibration")
            && err.contains("golden:critic/rewards/mean"),
        "{err}"
    );
    assert!(!dst.join("calibration.json").exists());
}

/// A calibration names the commit it measured: `golden calibrate` refuses a git tree with
/// uncommitted changes to tracked files (before running anything), unless `--allow-dirty`.
#[test]
fn golden_calibrate_refuses_a_dirty_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    git(&["init", "-q"]);
    std::fs::write(tmp.path().join("f"), "a").unwrap();
    git(&["add", "f"]);
    git(&["commit", "-q", "-m", "a"]);
    std::fs::write(tmp.path().join("f"), "b").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(["golden", "--golden"])
        .arg(tmp.path().join("golden"))
        .args(["calibrate", "--runs", "2", "--out"])
        .arg(tmp.path().join("reports"))
        .arg(smoke())
        .current_dir(tmp.path())
        .env_remove("CI")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("uncommitted changes") && err.contains("-dirty"),
        "{err}"
    );
    assert!(!tmp.path().join("reports").exists(), "nothing ran");
}

/// `run.json` records what the verdict was judged against (the golden's and the calibration's
/// digests, the resolved bands); after a re-bless, `compare RUN` says the golden changed and
/// shows the verdict at run time beside the new one.
#[test]
fn compare_after_a_rebless_says_the_golden_changed_with_both_verdicts() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let dst = golden.join("mock-gsm8k-grpo/cpu");
    std::fs::create_dir_all(&dst).unwrap();
    for f in ["metrics.csv", "golden.yaml"] {
        std::fs::copy(
            repo().join("golden/mock-gsm8k-grpo/cpu").join(f),
            dst.join(f),
        )
        .unwrap();
    }
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(args)
            .arg("--golden")
            .arg(&golden)
            .current_dir(repo())
            .env("CI", "true")
            .output()
            .unwrap()
    };
    let out = tmp.path().join("reports");
    let o = cli(&[
        "run",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
        smoke().to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = out.join("mock-gsm8k-grpo/latest");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let sha = m["judged_against"]["golden"].as_str().unwrap_or_default();
    assert_eq!(sha.len(), 64, "{m}");
    let compare = || cli(&["compare", dir.to_str().unwrap()]);
    let same = compare();
    assert_eq!(same.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&same.stdout).contains("another golden"));
    // A re-bless: the header changes (here a comment), the series stays valid.
    let header = dst.join("golden.yaml");
    let mut text = std::fs::read_to_string(&header).unwrap();
    text.push_str("# re-blessed\n");
    std::fs::write(&header, text).unwrap();
    let changed = compare();
    let stdout = String::from_utf8_lossy(&changed.stdout);
    assert!(
        stdout.contains("judged against another golden than at run time")
            && stdout.contains(&format!("sha {} →", &sha[..12]))
            && stdout.contains("At run time: passed")
            && stdout.contains("(exit 0); now: passed"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(dir.join("compare/golden/report.md")).unwrap();
    assert!(md.contains("another golden than at run time"), "{md}");
}

/// `rlharness golden bless RUN`: the reviewed run itself becomes the pending golden (a rerun on
/// a nondeterministic backend would be another draw); a run made from another plan (a `--set`),
/// and any write under CI, are refused.
#[test]
fn golden_bless_writes_the_stored_run_as_the_pending_golden() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let bin = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
        c.current_dir(repo());
        c
    };
    let run = |out: &str, set: &[&str]| {
        let mut c = bin();
        c.args(["run", "--no-progress", "--golden"])
            .arg(&golden)
            .arg("--out")
            .arg(tmp.path().join(out))
            .arg(smoke())
            .env("CI", "true");
        for kv in set {
            c.args(["--set", kv]);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(4), "no golden yet");
        tmp.path().join(out).join("mock-gsm8k-grpo/latest")
    };
    let bless = |dir: &std::path::Path, ci: bool| {
        let mut c = bin();
        c.args(["golden", "--golden"])
            .arg(&golden)
            .arg("bless")
            .arg(dir);
        if ci {
            c.env("CI", "true");
        } else {
            c.env_remove("CI");
        }
        c.output().unwrap()
    };
    let plain = run("plain", &[]);
    let planted = run("planted", &["backend.efficiency.scale=0.9"]);
    assert!(!golden.join("mock-gsm8k-grpo").exists(), "CI never writes");

    let refused = bless(&planted, false);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("cannot bless") && err.contains("another plan"),
        "{err}"
    );
    let refused = bless(&plain, true);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("CI never writes goldens"));
    let missing = bless(&tmp.path().join("nowhere"), false);
    assert_eq!(missing.status.code(), Some(2));

    let ok = bless(&plain, false);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(golden.join("mock-gsm8k-grpo/cpu/metrics.csv.new").is_file());
    let accepted = bin()
        .args(["golden", "--golden"])
        .arg(&golden)
        .args(["accept", "mock-gsm8k-grpo"])
        .env_remove("CI")
        .output()
        .unwrap();
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    // The blessed run is its own golden: re-judged against it, it passes; the planted run fails.
    let judge = |dir: &std::path::Path| {
        bin()
            .args(["compare", "--golden"])
            .arg(&golden)
            .arg(dir)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(judge(&plain), Some(0));
    assert_eq!(judge(&planted), Some(1));
}

/// `rlharness run SCENARIO --seeds A..B`: one run directory per seed under one combined
/// directory, each seed judged against the golden alone, the seeds' window means tested against
/// the golden's calibration (Student's t); `compare DIR` reproduces the combined verdict. A reward
/// 0.1 lower is caught by the distribution test (`seeds:critic/rewards/mean`).
#[test]
fn multi_seed_runs_judge_the_seeds_distribution_against_the_calibration() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let src = repo().join("golden/mock-gsm8k-grpo/cpu");
    let dst = golden.join("mock-gsm8k-grpo/cpu");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::copy(src.join("metrics.csv"), dst.join("metrics.csv")).unwrap();
    // The smoke's own bands are for its one seed: here the reward gets a calibrated band (the
    // golden's recorded rules left out, so that is not "loosened").
    let yaml = std::fs::read_to_string(src.join("golden.yaml")).unwrap();
    let yaml: String = yaml
        .lines()
        .filter(|l| !l.starts_with("rules:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dst.join("golden.yaml"), yaml).unwrap();
    const CHECKS: &str =
        "checks.golden={critic/rewards/mean: {window: 5, calibrated: {k: 4, floor: 0.02}}}";
    let cli = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
        c.args(args)
            .args(["--golden"])
            .arg(&golden)
            .arg("--out")
            .arg(tmp.path().join("reports"))
            .current_dir(repo())
            .env_remove("CI");
        c.output().unwrap()
    };
    let smoke = smoke().display().to_string();
    let cal = cli(&[
        "golden",
        "calibrate",
        "--allow-dirty",
        "--seeds",
        "1..8",
        "--jobs",
        "2",
        // The rules the seeds are judged by: the smoke's own fixed reward band is for its one
        // seed, and a calibration refuses runs that fail a fixed band.
        "--set",
        CHECKS,
        &smoke,
    ]);
    assert!(
        cal.status.success(),
        "{}",
        String::from_utf8_lossy(&cal.stderr)
    );

    let run = |set: &[&str]| {
        let mut args = vec![
            "run",
            smoke.as_str(),
            "--seeds",
            "11..16",
            "--jobs",
            "2",
            "--set",
            CHECKS,
        ];
        for s in set {
            args.extend(["--set", s]);
        }
        let out = cli(&args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let dir = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("report: "))
            .map(|r| std::path::PathBuf::from(r.trim_end_matches("/report.md")))
            .unwrap_or_else(|| panic!("no report line: {text}"));
        (out.status.code(), dir)
    };
    let (code, dir) = run(&[]);
    assert_eq!(
        code,
        Some(0),
        "{}",
        std::fs::read_to_string(dir.join("report.md")).unwrap()
    );
    let seeds: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("seeds.json")).unwrap()).unwrap();
    assert_eq!(seeds["seeds"], serde_json::json!([11, 12, 13, 14, 15, 16]));
    for s in 11..=16 {
        let seed_dir = dir.join(format!("seed-{s}"));
        let m = rlharness::rundir::RunManifest::read(&seed_dir).unwrap();
        assert_eq!(m.seed, s);
        assert!(seed_dir.join("verdict.json").is_file());
    }
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("verdict.json")).unwrap()).unwrap();
    let ids: Vec<&str> = verdict["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    // Every seed's own verdict, then the windowed rules' distribution tests.
    assert_eq!(
        ids,
        [
            "seed:11",
            "seed:12",
            "seed:13",
            "seed:14",
            "seed:15",
            "seed:16",
            "seeds:critic/rewards/mean",
        ]
    );
    assert!(dir.join("plots/critic_rewards_mean.svg").is_file());
    // report.html draws what plots/*.svg draws: every seed, the golden, the seeds' window means
    // (it used to draw the bands alone); and its config is the seeds' (not "every knob has its
    // default value").
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let svg = std::fs::read_to_string(dir.join("plots/critic_rewards_mean.svg")).unwrap();
    for series in [
        "seed 11",
        "seed 16",
        "golden",
        "seeds&#39; window mean",
        "calibration ±2σ",
    ] {
        let group = format!("<g class=\"series\" data-series=\"{series}\">");
        let band = format!("<g class=\"band\" data-series=\"{series}\">");
        assert!(
            html.contains(&group) || html.contains(&band),
            "report.html does not draw {series}"
        );
        assert!(
            svg.contains(&group) || svg.contains(&band),
            "the plot does not draw {series}"
        );
    }
    assert!(
        html.contains(svg.trim()),
        "report.html's plot is not plots/*.svg's"
    );
    assert!(!html.contains("Every knob has its default value"));
    assert!(html.contains("actor_rollout_ref.actor.optim.betas"));
    // `compare DIR` makes the same verdict from what the directories store.
    let status = rlharness::app::compare_command(&dir, None, &golden)
        .unwrap()
        .0
        .exit_status();
    assert_eq!(status, ExitStatus::Passed);
    assert_eq!(
        std::fs::read_to_string(dir.join("verdict.json")).unwrap(),
        std::fs::read_to_string(dir.join("compare/golden/verdict.json")).unwrap()
    );

    let (code, dir) = run(&["backend.reward.offset=-0.1"]);
    assert_eq!(code, Some(1));
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("verdict.json")).unwrap()).unwrap();
    let reward = verdict["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "seeds:critic/rewards/mean")
        .unwrap();
    assert_eq!(reward["status"], "regressed", "{reward}");
    assert!(
        reward["evidence"]["message"]
            .as_str()
            .unwrap()
            .contains("Student's t"),
        "{reward}"
    );
}

/// `--seeds` needs at least two seeds and excludes `--seed`.
#[test]
fn multi_seed_arguments_are_checked() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .arg("run")
            .arg(smoke())
            .args(args)
            .current_dir(repo())
            .output()
            .unwrap()
    };
    let one = run(&["--seeds", "3..3"]);
    assert_eq!(one.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&one.stderr).contains("at least 2 seeds"));
    let both = run(&["--seeds", "1..3", "--seed", "4"]);
    assert_eq!(both.status.code(), Some(2));
    let bad = run(&["--seeds", "x..3"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`x`"));
}
