//! Record and replay: a run's whole wire traffic kept as a cassette, served back to the builtin
//! driver, every request checked against its recording. The flagship's cassette (recorded on
//! the torch backend, committed under golden/) needs no torch here: replay is pure client side.

use crate::common;

use common::shared::shared_run;
use common::{repo, run_options};
use std::path::{Path, PathBuf};

use rlharness::app::run_one;
use rlharness::model::error::ExitStatus;
use rlharness::model::metrics::MetricTable;
use rlharness::report::Report;
use rlharness::run::backend::replay::{self, MismatchKind, ReplayOutcome};
use rlharness::run::plan::RunPlan;
use rlharness::run::runner::{execute, execute_recording, RunEnd, RunOptions};
use rlharness_arctic::cassette::{Cassette, METRICS_FILE};
use rlharness_arctic::wire::{decode, encode, Node, Tensor};

fn flagship_cassette() -> PathBuf {
    repo().join("golden/tiny-gsm8k-grpo/cpu/cassette")
}

/// Options of a test run straight into `run_dir`, with `--set` overrides (executed here
/// without `run_one`, so the live judge is handed in as `run_one` would).
fn opts(run_dir: &Path, set: &[String]) -> RunOptions {
    RunOptions {
        // The judge's fail-fast rules, as `run_one` hands them to the runner.
        live_judge: Some(rlharness::judge::FailFast::handed()),
        ..run_options(
            run_dir,
            repo().join("golden"),
            run_dir.to_path_buf(),
            set.to_vec(),
        )
    }
}

fn plan(file: &Path, set: &[String], steps: Option<u64>) -> RunPlan {
    let scenario = rlharness::scenario::load_scenario(file, set).unwrap();
    RunPlan::new(scenario, None, steps).unwrap()
}

fn smoke() -> PathBuf {
    repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")
}

/// `--set` arguments that turn the smoke scenario into a replay of `cassette`.
fn as_replay(cassette: &Path, extra: &[&str]) -> Vec<String> {
    let mut set = vec![format!(
        "backend={{kind: replay, cassette: '{}'}}",
        cassette.display()
    )];
    set.extend(extra.iter().map(|s| s.to_string()));
    set
}

/// Record three steps of the smoke scenario on the mock; the cassette's folder.
async fn record_mock(tmp: &Path) -> PathBuf {
    let dir = tmp.join("record");
    let executed = execute_recording(plan(&smoke(), &[], Some(3)), &opts(&dir, &[]))
        .await
        .unwrap();
    assert_eq!(executed.end, RunEnd::Completed);
    assert!(executed.replay.is_none());
    dir.join("cassette")
}

async fn replay_mock(
    tmp: &Path,
    name: &str,
    cassette: &Path,
    extra: &[&str],
) -> (ReplayOutcome, MetricTable, RunEnd) {
    let set = as_replay(cassette, extra);
    let dir = tmp.join(name);
    let executed = execute(plan(&smoke(), &set, Some(3)), &opts(&dir, &set))
        .await
        .unwrap();
    (
        executed.replay.expect("a replay outcome"),
        executed.metrics,
        executed.end,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_record_then_replay_reproduces_the_run_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let cassette = record_mock(tmp.path()).await;
    let c = Cassette::load(&cassette).unwrap();
    // 3 steps of 16 generates plus forwards, updates, syncs, and the job set-up and teardown.
    assert!(c.exchanges.len() > 60, "{}", c.exchanges.len());
    // The frames are in the pack, the JSON bodies inline.
    assert!(c
        .exchanges
        .iter()
        .any(|x| x.entry.request.as_ref().and_then(|b| b.offset).is_some()));
    assert!(c.exchanges.iter().any(|x| x
        .entry
        .request
        .as_ref()
        .and_then(|b| b.json.as_ref())
        .is_some()));
    let recorded = MetricTable::read_csv(&tmp.path().join("record/metrics.csv")).unwrap();

    let (outcome, metrics, end) = replay_mock(tmp.path(), "replay", &cassette, &[]).await;
    assert_eq!(end, RunEnd::Completed);
    assert!(outcome.passed(), "{}", outcome.summary());
    assert_eq!(outcome.served, c.exchanges.len());
    // The mock reports simulated durations, and they replay too: every metric is the same.
    assert_eq!(metrics.steps(), vec![1, 2, 3]);
    assert_eq!(metrics.columns(), recorded.columns());
    for col in recorded.columns() {
        assert_eq!(metrics.series(&col), recorded.series(&col), "{col}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_replay_names_a_dropped_meta_key_and_a_missing_call() {
    let tmp = tempfile::tempdir().unwrap();
    let cassette = record_mock(tmp.path()).await;

    let (outcome, _, end) = replay_mock(
        tmp.path(),
        "planted",
        &cassette,
        &["driver.plant=[{drop_meta_key: temperature}]"],
    )
    .await;
    assert_eq!(
        end,
        RunEnd::Completed,
        "a differing request is still served"
    );
    let first = outcome
        .mismatches
        .first()
        .expect("the dropped key is caught");
    assert_eq!(
        first.to_string(),
        format!(
            "replay mismatch at POST /forward call 1 (job {}): meta.temperature: recorded 1.0, got <absent>",
            first.job.unwrap()
        )
    );
    // Every forward and forward-backward of the 3 steps differs.
    assert_eq!(outcome.mismatches.len(), 6, "{}", outcome.summary());
    assert!(outcome.summary().contains("6 mismatches in all"));

    // A driver that skips the weight sync (colocated: it still wakes the sampler and resets
    // its prefix cache): the recorded weight-sync operations, one before the first rollout and
    // one after each step, are left unrequested, and nothing else differs.
    let (outcome, _, _) = replay_mock(
        tmp.path(),
        "skip-sync",
        &cassette,
        &["driver.plant=[skip_weight_sync]"],
    )
    .await;
    let texts: Vec<String> = outcome.mismatches.iter().map(|m| m.to_string()).collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    for (k, t) in texts.iter().enumerate() {
        assert!(
            t.starts_with(&format!(
                "replay mismatch at POST /operation call {} (job ",
                k + 1
            )) && t.ends_with("recorded but never requested"),
            "{texts:?}"
        );
    }
    assert!(outcome
        .mismatches
        .iter()
        .all(|m| m.what == MismatchKind::NeverRequested));

    // More steps than recorded: the extra call is refused, and the run fails there.
    let set = as_replay(&cassette, &[]);
    let dir = tmp.path().join("extra");
    let executed = execute(plan(&smoke(), &set, Some(4)), &opts(&dir, &set))
        .await
        .unwrap();
    let reason = executed.end.reason().unwrap_or_default();
    assert!(
        reason.contains("409") && reason.contains("not in the recording"),
        "{reason}"
    );
}

/// The first tensor of a frame, one column shorter: a client that sends the wrong shape.
fn shrink_first_tensor(node: &Node) -> Option<Node> {
    match node {
        Node::Tensor { tensor, scalar } if tensor.shape.len() == 2 && tensor.shape[1] > 1 => {
            let [rows, cols] = [tensor.shape[0], tensor.shape[1]];
            let w = tensor.dtype.size();
            let mut data = Vec::with_capacity(rows * (cols - 1) * w);
            for r in 0..rows {
                data.extend_from_slice(&tensor.data[r * cols * w..(r * cols + cols - 1) * w]);
            }
            let t = Tensor::new(tensor.dtype, vec![rows, cols - 1], data.into()).ok()?;
            Some(Node::Tensor {
                tensor: t,
                scalar: *scalar,
            })
        }
        Node::Dict(entries) => {
            for (i, (_, child)) in entries.iter().enumerate() {
                if let Some(new) = shrink_first_tensor(child) {
                    let mut entries = entries.clone();
                    entries[i].1 = new;
                    return Some(Node::Dict(entries));
                }
            }
            None
        }
        _ => None,
    }
}

/// Send every recorded request of the flagship's cassette back to a replay of it, with the
/// first `/forward` frame's first tensor one column short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_tensor_shape_is_caught() {
    let cassette = Cassette::load(&flagship_cassette()).unwrap();
    let exchanges = cassette.exchanges.clone();
    let server = replay::start(cassette).await.unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut changed = None;
    for x in &exchanges {
        let e = &x.entry;
        let url = match &e.query {
            Some(q) => format!("{}{}?{q}", server.url, e.path),
            None => format!("{}{}", server.url, e.path),
        };
        let mut req = if e.method == "GET" {
            http.get(&url)
        } else {
            http.post(&url)
        };
        if let Some(body) = &x.request {
            let mut bytes = body.bytes.to_vec();
            if changed.is_none() && e.path == "/forward" {
                let node = decode(body.bytes.clone()).unwrap();
                bytes = encode(&shrink_first_tensor(&node).expect("a [B,S] tensor")).unwrap();
                changed = Some(e.job_id);
            }
            if let Some(ct) = &body.content_type {
                req = req.header("content-type", ct);
            }
            req = req.body(bytes);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), e.status, "{} {}", e.method, e.path);
        let got = resp.bytes().await.unwrap();
        assert_eq!(
            &got[..],
            &x.response[..],
            "byte-identical answer to {} {}",
            e.method,
            e.path
        );
    }
    let outcome = server.handle.outcome();
    assert_eq!(outcome.mismatches.len(), 1, "{}", outcome.summary());
    let m = outcome.mismatches[0].to_string();
    assert!(
        m.starts_with("replay mismatch at POST /forward call 1 (job "),
        "{m}"
    );
    assert!(m.contains(".shape: recorded ["), "{m}");
    let _ = server.stop.send(());
}

fn replay_scenario(name: &str) -> PathBuf {
    repo().join("scenarios/replay").join(name)
}

/// The run of `scenarios/replay/NAME` (shared with `run::reproduce`, which re-judges every CPU
/// scenario); it must exit 0. Its report and run directory.
async fn run_replay_passing(name: &str) -> (Report, PathBuf) {
    let run = shared_run(&replay_scenario(name), &opts(Path::new(""), &[])).await;
    let report = run.report();
    assert_eq!(
        report.exit_status(),
        ExitStatus::Passed,
        "{}",
        report.summary()
    );
    (report, run.dir.clone())
}

/// Metrics that come from the server's answers (not from the wall clock).
const FROM_SERVER: &[&str] = &[
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/advantages/mean",
    "response_length/mean",
    "actor/entropy",
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/lr",
    "perf/total_num_tokens",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flagship_replays_with_the_recorded_metrics() {
    let (report, dir) = run_replay_passing("tiny-gsm8k-grpo-replay.yaml").await;
    let verdict = report.verdict.as_ref().unwrap();
    let rule = verdict
        .rules
        .iter()
        .find(|r| r.rule == rlharness::judge::REPLAY_RULE)
        .unwrap();
    assert!(
        rule.evidence.message.starts_with("all "),
        "{}",
        rule.evidence.message
    );

    // Recorded before `/weight-digest`: the replay answers it 404 as a real server would, so
    // the driver says once that it cannot check the syncs, and logs no `weight_sync/match`.
    assert!(report.metrics.series("weight_sync/match").is_empty());
    assert!(verdict.rule("weight_sync:match").is_none());
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let why = run["weight_sync"]["unavailable"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.starts_with("weight syncs not checked bit for bit"),
        "{}",
        run["weight_sync"]
    );
    assert_eq!(run["weight_sync"]["checked"], 0);
    let noted = run["notes"].as_array().unwrap();
    assert_eq!(
        noted.iter().filter(|n| n.as_str() == Some(why)).count(),
        1,
        "{noted:?}"
    );

    let recorded = MetricTable::read_csv(&flagship_cassette().join(METRICS_FILE)).unwrap();
    assert_eq!(report.metrics.steps(), recorded.steps());
    for m in FROM_SERVER {
        let (got, want) = (report.metrics.series(m), recorded.series(m));
        assert!(!want.is_empty(), "{m} was recorded");
        assert_eq!(got.len(), want.len(), "{m}");
        for ((s, a), (_, b)) in got.iter().zip(&want) {
            // metrics.csv keeps shortest round-trip floats: equal, up to its formatting.
            assert!(
                (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                "{m} at step {s}: {a} vs {b}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planted_dropped_meta_key_is_caught_and_named() {
    // The scenario expects exactly this failure: `run` exits 0 when it is caught.
    let (report, _) = run_replay_passing("tiny-gsm8k-grpo-replay-dropped-meta.yaml").await;
    let rule = report
        .verdict
        .as_ref()
        .unwrap()
        .rules
        .iter()
        .find(|r| r.rule == rlharness::judge::REPLAY_RULE)
        .unwrap();
    assert!(
        rule.evidence.message.contains(
            "POST /forward call 1 (job 2): meta.max_token_len_per_gpu: recorded 4096, got <absent>"
        ),
        "{}",
        rule.evidence.message
    );

    // Without the declared verdict the same run would be a failed check (exit 1): its
    // verdict regressed.
    assert_eq!(
        report.verdict.as_ref().unwrap().outcome,
        rlharness::judge::Outcome::Regressed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_cassette_is_invalid_input_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("cassette");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(flagship_cassette()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let victim = copy.join(rlharness_arctic::cassette::PACK_FILE);
    let z = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &z[..z.len() - 9]).unwrap();
    let set = vec![format!("backend.cassette='{}'", copy.display())];
    let err = run_one(
        &replay_scenario("tiny-gsm8k-grpo-replay.yaml"),
        &opts(&tmp.path().join("run"), &set),
    )
    .await
    .unwrap_err();
    assert_eq!(err.status, ExitStatus::InvalidInput);
    let msg = err.to_string();
    let name = victim.file_name().unwrap().to_string_lossy().into_owned();
    assert!(msg.contains(&name) && msg.contains("truncated"), "{msg}");

    let set = vec![format!(
        "backend.cassette='{}'",
        tmp.path().join("none").display()
    )];
    let err = run_one(
        &replay_scenario("tiny-gsm8k-grpo-replay.yaml"),
        &opts(&tmp.path().join("run2"), &set),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("no cassette at"), "{err}");
}
