//! The command driver through `rlharness run`, against a stand-in for verl's launcher
//! (`tests/fixtures/verl/fake_verl.sh`) that prints verl's console and file-logger formats:
//! the right values at the right steps, the watchdog (hang, non-zero exit, non-finite watched
//! metric, fail fast, stalled request) with the process group gone and the partial run kept.

use crate::common;

use common::{dead, run_expecting, run_options};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rlharness::model::error::ExitStatus;
use rlharness::model::metrics::MetricTable;
use rlharness::model::rundir::RunManifest;
use rlharness::model::rundir::RunStatus;
use rlharness::report::Report;
use rlharness::run::runner::RunOptions;

mod scenarios;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/verl/scenarios")
        .join(name)
}

/// Options of a test run into `out/run`, its goldens in `out/golden`, with `--set` overrides.
fn opts(out: &Path, set: &[&str]) -> RunOptions {
    run_options(
        out,
        out.join("golden"),
        out.join("run"),
        set.iter().map(|s| s.to_string()).collect(),
    )
}

/// Run the fixture scenario `name` into `out/run` with `--set` overrides; it must end with
/// exit status `want`.
async fn run_fixture(out: &Path, name: &str, set: &[&str], want: ExitStatus) -> Report {
    run_expecting(&fixture(name), &opts(out, set), want).await
}

/// Run the fixture scenario `name` into a new temporary folder's `run/`, ending with exit
/// status `want`: the folder (kept while the first value lives), the run directory, its
/// `run.json` and the report.
async fn ran(
    name: &str,
    set: &[&str],
    want: ExitStatus,
) -> (tempfile::TempDir, PathBuf, RunManifest, Report) {
    let tmp = tempfile::tempdir().unwrap();
    let report = run_fixture(tmp.path(), name, set, want).await;
    let dir = tmp.path().join("run");
    let m = manifest(&dir);
    (tmp, dir, m, report)
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"))
}

fn table(dir: &Path) -> MetricTable {
    MetricTable::read_csv(&dir.join("metrics.csv")).unwrap()
}

fn manifest(dir: &Path) -> RunManifest {
    serde_json::from_str(&read(dir, "run.json")).unwrap()
}

/// The run in `out/run` was aborted at `step` for `reason`.
#[track_caller]
fn assert_aborted(out: &Path, step: u64, reason: &str) {
    let m = manifest(&out.join("run"));
    assert_eq!(m.status, RunStatus::Aborted);
    assert_eq!(m.failed_step, Some(step));
    assert_eq!(m.reason.as_deref(), Some(reason));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_metrics_land_at_their_steps_with_hydra_overrides_and_logs_kept() {
    let (_tmp, dir, _, _) = ran("verl-console.yaml", &[], ExitStatus::Passed).await;
    let t = table(&dir);
    // Step 0 (validation before training) is kept apart; the series starts at 1.
    assert_eq!(t.steps(), vec![1, 2, 3, 4]);
    for s in 1..=4u64 {
        let row = t.row(s).unwrap();
        let sf = s as f64;
        assert_eq!(row.get("training/global_step"), Some(sf), "np.int64 at {s}");
        assert_eq!(
            row.get("critic/score/mean"),
            Some(sf / 10.0),
            "np.float64 at {s}"
        );
        assert_eq!(row.get("actor/pg_loss"), Some(-sf / 1000.0));
        assert_eq!(row.get("actor/grad_norm"), Some((sf + 1.0) / 10.0));
        assert_eq!(row.get("actor/lr"), Some(1e-6));
        assert_eq!(row.get("perf/time_per_step"), Some(40.5 + sf));
        assert_eq!(
            row.get("response_length/clip_ratio"),
            Some(0.0),
            "np.float32"
        );
        assert_eq!(
            row.get("actor/is_last"),
            Some(if s == 4 { 1.0 } else { 0.0 })
        );
    }
    // Even steps came on stderr, in colour, from another actor name.
    assert_eq!(t.row(2).unwrap().get("perf/mfu/actor"), Some(0.22));
    assert_eq!(t.series("val-core/openai/gsm8k/acc/mean@1"), vec![(4, 0.5)]);
    // The JSONL-only key is absent: the console was the source.
    assert!(t.series("perf/throughput").is_empty());

    let val: serde_json::Value =
        serde_json::from_str(&read(&dir, "val_before_train.json")).unwrap();
    assert_eq!(val["step"], 0);
    assert_eq!(val["data"]["val-core/openai/gsm8k/acc/mean@1"], 0.25);

    // stdout and stderr are kept raw (colours included).
    assert!(read(&dir, "stdout.log").contains("(TaskRunner pid="));
    assert!(read(&dir, "stderr.log").contains("\u{1b}[36m(TaskRunnerV1 pid=4242, ip=10.0.0.2)"));

    // The scenario's knobs as Hydra overrides, then the harness's own.
    let argv: Vec<String> = read(&dir, "trainer_argv.txt")
        .lines()
        .map(String::from)
        .collect();
    for want in [
        "actor_rollout_ref.actor.optim.betas=[0.9,0.95]",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.model.path='Qwen/Qwen3-0.6B'",
        "actor_rollout_ref.rollout.n=5",
        "data.train_batch_size=16",
        "trainer.total_training_steps=4",
        "trainer.logger=['console','file']",
        "trainer.project_name='rlharness'",
    ] {
        assert!(argv.contains(&want.to_string()), "{want} not in {argv:?}");
    }
    assert!(argv
        .iter()
        .any(|a| a.starts_with("trainer.experiment_name='fixture-verl-console-")));
    // Defaults stay verl's own: nothing the scenario did not write is passed.
    assert!(!argv
        .iter()
        .any(|a| a.starts_with("trainer.n_gpus_per_node=")));
    let jsonl = read(&dir, "trainer_jsonl_path.txt");
    assert!(Path::new(jsonl.trim()).is_absolute(), "{jsonl}");

    // No backend block: the trainer brings its own, and the report says nothing was observed.
    let m = manifest(&dir);
    assert_eq!(m.status, RunStatus::Completed);
    assert!(m.notes[0].starts_with("no wire observed"), "{:?}", m.notes);
    assert!(read(&dir, "report.md").contains("no wire observed"));
    assert!(!dir.join("wire.jsonl").exists());
}

/// The scenario's own loggers reach the launcher with the harness's `file` added, and the run
/// says so; `run.json` and the report hold the trainer's exact command line and the variables
/// the harness set (the run's token only as a digest); `--tensorboard` holds every metric the
/// harness captured (issue #45's "done when").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scenarios_loggers_are_kept_and_the_trainers_command_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let tb_root = tmp.path().join("tb");
    let o = RunOptions {
        tensorboard: Some(tb_root.clone()),
        ..opts(
            tmp.path(),
            &["config.trainer.logger=[console, tensorboard]"],
        )
    };
    run_expecting(&fixture("verl-console.yaml"), &o, ExitStatus::Passed).await;
    let dir = tmp.path().join("run");
    let argv: Vec<String> = read(&dir, "trainer_argv.txt")
        .lines()
        .map(String::from)
        .collect();
    assert!(
        argv.contains(&"trainer.logger=['console','tensorboard','file']".to_string()),
        "{argv:?}"
    );
    let m: serde_json::Value = serde_json::from_str(&read(&dir, "run.json")).unwrap();
    let notes = m["notes"].to_string();
    assert!(notes.contains("'file' added"), "{notes}");
    // The recorded argv ends with what the launcher got (after the program and the fixture's
    // own mode argument).
    let recorded: Vec<String> = m["trainer_command"]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(recorded[0].ends_with("fake_verl.sh"), "{recorded:?}");
    assert_eq!(
        recorded[recorded.len() - argv.len()..],
        argv[..],
        "run.json against what the launcher got"
    );
    let env = &m["trainer_command"]["env"];
    assert_eq!(env["PYTHONUNBUFFERED"], "1", "{env}");
    let token = env["RLHARNESS_RUN_TOKEN"].as_str().unwrap();
    assert!(token.starts_with("<hidden, sha256 "), "{token}");
    let md = read(&dir, "report.md");
    assert!(
        md.contains("trainer command")
            && md.contains("trainer.logger=")
            && md.contains("'file' added"),
        "{md}"
    );
    // A run directory outside `OUT/<scenario>/` goes under `DIR/<scenario>/<its name>/`.
    let tb = crate::tensorboard::read_scalars(&tb_root.join("fixture-verl-console/run"));
    crate::tensorboard::assert_every_metric(&tb, &dir);
    assert!(tb.contains_key("critic/score/mean"), "{:?}", tb.keys());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonl_metrics_are_tailed_with_nulls_as_non_finite() {
    let (_tmp, dir, _, _) = ran(
        "verl-jsonl.yaml",
        &["driver.command.1=nan", "metrics.watch=[]"],
        ExitStatus::Passed,
    )
    .await;
    let t = table(&dir);
    assert_eq!(t.steps(), vec![1, 2, 3, 4]);
    // The JSONL-only key proves the file was the source; text values are skipped.
    assert_eq!(
        t.series("perf/throughput"),
        vec![(1, 1001.25), (2, 1002.25), (3, 1003.25), (4, 1004.25)]
    );
    assert!(t.series("perf/time_per_step").is_empty());
    assert!(t.series("note").is_empty());
    let grad = t.series("actor/grad_norm");
    assert_eq!(grad.len(), 4);
    assert!(
        grad[2].1.is_nan(),
        "null at step 3 reads as non-finite: {grad:?}"
    );
    assert_eq!(grad[3], (4, 0.5));
    let val: serde_json::Value =
        serde_json::from_str(&read(&dir, "val_before_train.json")).unwrap();
    assert_eq!(val["data"]["val-aux/openai/gsm8k/reward/mean@1"], 0.25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_finite_watched_metric_aborts_at_its_step() {
    let tmp = tempfile::tempdir().unwrap();
    run_fixture(
        tmp.path(),
        "verl-jsonl.yaml",
        &["driver.command.1=nan"],
        ExitStatus::CheckFailed,
    )
    .await;
    assert_aborted(
        tmp.path(),
        3,
        "watched metric actor/grad_norm is NaN at step 3",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_step_the_console_never_showed_is_taken_from_the_file_logger_and_said() {
    let (_tmp, dir, _, _) = ran(
        "verl-console.yaml",
        &["driver.command.1=lost-last"],
        ExitStatus::Passed,
    )
    .await;
    let t = table(&dir);
    assert_eq!(t.steps(), vec![1, 2, 3, 4]);
    // Steps 1-3 from the console (no JSONL-only key), step 4 from the file logger.
    assert_eq!(t.row(4).unwrap().get("critic/score/mean"), Some(0.4));
    assert_eq!(t.row(4).unwrap().get("perf/mfu/actor"), Some(0.24));
    assert!(t.series("perf/throughput").is_empty());
    let m = manifest(&dir);
    assert_eq!(
        m.notes.last().map(String::as_str),
        Some(
            "verl's console never showed step 4 (Ray can drop a worker's last output when the \
             launcher exits first): taken from verl's file logger (verl_metrics.jsonl)"
        ),
        "{:?}",
        m.notes
    );
    assert!(read(&dir, "report.md").contains("verl's console never showed step 4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainer_that_exits_0_before_the_last_step_fails_the_run() {
    let (_tmp, dir, m, _) = ran(
        "verl-console.yaml",
        &["driver.command.1=stop-early"],
        ExitStatus::RunFailed,
    )
    .await;
    assert_eq!(m.status, RunStatus::Failed);
    assert_eq!(
        m.reason.as_deref(),
        Some(
            "step 3: the trainer exited 0 after step 2 of the 4 asked \
             (trainer.total_training_steps); steps 3..4 never reached the console or verl's \
             file logger"
        )
    );
    // The steps it finished are kept.
    assert_eq!(table(&dir).steps(), vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainer_that_stops_printing_is_a_hang_with_its_process_group_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    // When the trainer went quiet: the fake writes child.pid after step 2, then hangs.
    let (quiet, over) = (dir.join("child.pid"), Arc::new(AtomicBool::new(false)));
    let watcher = {
        let over = over.clone();
        std::thread::spawn(move || {
            while !over.load(Ordering::SeqCst) {
                if quiet.exists() {
                    return Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        })
    };
    run_fixture(
        tmp.path(),
        "verl-console.yaml",
        &["driver.command.1=hang", "timeouts.step=1"],
        ExitStatus::RunFailed,
    )
    .await;
    let ended = Instant::now();
    over.store(true, Ordering::SeqCst);
    let quiet = watcher
        .join()
        .unwrap()
        .expect("the trainer hung after step 2");
    let m = manifest(&dir);
    // Caught within timeouts.step + 5 s of the trainer's last line (it used to be timed from
    // the start, start-up included, which a busy machine can spend 5 s on alone).
    let took = ended - quiet;
    assert!(took < Duration::from_secs(6), "took {took:?}");
    assert_eq!(m.status, RunStatus::TimedOut);
    assert_eq!(m.failed_step, Some(3));
    let reason = m.reason.unwrap();
    assert!(
        reason.starts_with("hang at step 3 (no new step within timeouts.step = 1s; last activity: trainer printed `(TaskRunner pid="),
        "{reason}"
    );
    // The launcher and the worker it left behind are gone: the whole group was killed.
    let trainer: i32 = read(&dir, "trainer.pid").trim().parse().unwrap();
    let child: i32 = read(&dir, "child.pid").trim().parse().unwrap();
    assert!(dead(trainer), "trainer {trainer} still alive");
    assert!(dead(child), "child {child} still alive");
    assert!(!rlharness::run::driver::command::group_alive(trainer));
    // The partial run is kept: steps 1-2, logs, the report with the trainer's last lines.
    assert_eq!(table(&dir).steps(), vec![1, 2]);
    assert!(read(&dir, "stderr.log").contains("waiting for rollout workers"));
    let md = read(&dir, "report.md");
    assert!(md.contains("trainer output (last lines)"), "{md}");
    assert!(md.contains("waiting for rollout workers"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainer_that_exits_1_mid_run_fails_with_its_last_lines_in_the_report() {
    let (_tmp, dir, m, report) = ran(
        "verl-console.yaml",
        &["driver.command.1=exit1"],
        ExitStatus::RunFailed,
    )
    .await;
    assert_eq!(m.status, RunStatus::Failed);
    assert_eq!(
        m.reason.as_deref(),
        Some("step 4: the trainer exited with status 1")
    );
    assert_eq!(table(&dir).steps(), vec![1, 2, 3]);
    let tail = report.trainer_tail.clone().unwrap();
    assert!(tail.lines().count() <= 50);
    assert!(
        tail.contains("RuntimeError: CUDA error: an illegal memory access"),
        "{tail}"
    );
    // ANSI codes are stripped from the tail the report shows.
    assert!(!tail.contains('\u{1b}'));
    assert!(read(&dir, "report.md").contains("RuntimeError: CUDA error"));
    assert!(read(&dir, "junit.xml").contains("RuntimeError: CUDA error"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_fast_rule_stops_the_run_as_soon_as_it_cannot_pass() {
    let tmp = tempfile::tempdir().unwrap();
    // The JSONL file is one ordered stream (console steps race across stdout and stderr).
    run_fixture(
        tmp.path(),
        "verl-jsonl.yaml",
        &["checks.expect=[{expr: 'max(critic/score/mean) < 0.15', name: score-cap, fail_fast: true}]"],
        ExitStatus::CheckFailed,
    )
    .await;
    assert_aborted(
        tmp.path(),
        2,
        "fail fast: rule `expect:score-cap` can no longer pass after step 2 of 4",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arctic_backend_is_reached_through_the_recording_proxy() {
    if !rlharness::scenario::command_available("curl") {
        eprintln!("skipped: the proxied fixture needs curl");
        return;
    }
    let (_tmp, dir, _, _) = ran(
        "verl-console.yaml",
        &[
            "driver.command.1=proxied",
            "driver.proxy_listen=127.0.0.1:0",
            "backend.kind=mock",
        ],
        ExitStatus::Passed,
    )
    .await;
    let wire = read(&dir, "wire.jsonl");
    assert_eq!(wire.lines().count(), 4, "{wire}");
    assert!(wire.lines().all(|l| l.contains("\"/health\"")), "{wire}");
    assert!(manifest(&dir).notes.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_stalled_past_its_limit_is_a_hang_naming_the_route() {
    if !rlharness::scenario::command_available("curl") {
        eprintln!("skipped: the proxied fixture needs curl");
        return;
    }
    // An upstream that accepts and never answers.
    let stall = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", stall.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = stall.accept().await {
            conns.push(c);
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let backend_url = format!("backend.url={url}");
    run_fixture(
        tmp.path(),
        "verl-console.yaml",
        &[
            "driver.command.1=proxied",
            "driver.proxy_listen=127.0.0.1:0",
            "backend.kind=remote",
            &backend_url,
            "timeouts.request=1",
        ],
        ExitStatus::RunFailed,
    )
    .await;
    hold.abort();
    let m = manifest(&tmp.path().join("run"));
    assert_eq!(m.status, RunStatus::TimedOut);
    assert_eq!(
        m.reason.as_deref(),
        Some(
            "hang at step 1 (a request stalled past timeouts.request = 1s; last activity: /health)"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_fast_golden_rule_stops_the_run_at_the_first_point_outside_its_band() {
    let tmp = tempfile::tempdir().unwrap();
    // A golden whose score is far above what the trainer reaches.
    let mut golden = MetricTable::new();
    for s in 1..=4 {
        let mut m = rlharness::model::metrics::StepMetrics::new(s);
        m.insert("critic/score/mean", 0.9);
        golden.push(m);
    }
    let store = rlharness::model::golden::GoldenStore::with_ci(tmp.path().join("golden"), false);
    let prov = rlharness::model::golden::Provenance {
        device: "cpu".into(),
        ..Default::default()
    };
    store
        .write_pending("fixture-verl-jsonl", "cpu", &golden, &prov, None, None)
        .unwrap();
    store.accept(&[]).unwrap();
    run_fixture(
        tmp.path(),
        "verl-jsonl.yaml",
        &["checks.golden={critic/score/mean: {abs: 0.1, fail_fast: true}}"],
        ExitStatus::CheckFailed,
    )
    .await;
    assert_aborted(
        tmp.path(),
        1,
        "fail fast: rule `golden:critic/score/mean` can no longer pass after step 1 of 4",
    );
}

/// A trainer program that is there but cannot start (its interpreter is missing: `exec`
/// fails) is a failed run with a report; one that is not there at all is refused before the
/// run as invalid input (`scenario::check_vs_run`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainer_that_cannot_start_is_a_failed_run_with_a_report() {
    let tmp = tempfile::tempdir().unwrap();
    let trainer = tmp.path().join("no-interpreter.sh");
    std::fs::write(&trainer, "#!/no/such/interpreter\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&trainer, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let set = format!("driver.command.0={}", trainer.display());
    run_fixture(
        tmp.path(),
        "verl-console.yaml",
        &[&set],
        ExitStatus::RunFailed,
    )
    .await;
    let dir = tmp.path().join("run");
    let m = manifest(&dir);
    assert_eq!(m.status, RunStatus::Failed);
    let reason = m.reason.unwrap();
    assert!(
        reason.starts_with("step 1: cannot start the trainer `")
            && reason.contains("no-interpreter.sh"),
        "{reason}"
    );
    assert!(dir.join("report.md").is_file());
}
