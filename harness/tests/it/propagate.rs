//! End to end: the propagation matrix of the smoke scenario with the builtin driver on the
//! mock, judged against the facts of the knob reference; and the planted original bug.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rlharness::tools::propagate::command::{run_matrix, MatrixOptions};
use rlharness::tools::propagate::render::PropagationReport;
use rlharness::tools::propagate::verdict::{CellVerdict, KnobResult, KnobVerdict};
use serde_json::json;

fn smoke() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/smoke/mock-gsm8k-grpo.yaml")
}

/// [`run_matrix`] of `scenario` into `out` with `set` and the default options, which must
/// finish: the report, its folder and whether a perturbed run failed.
async fn matrix(scenario: &Path, out: &Path, set: &[String]) -> (PropagationReport, PathBuf, bool) {
    run_matrix(scenario, out, set, &MatrixOptions::default())
        .await
        .unwrap()
}

fn knob<'a>(r: &'a PropagationReport, path: &str) -> &'a KnobResult {
    r.knobs
        .iter()
        .find(|k| k.path == path)
        .unwrap_or_else(|| panic!("no row for {path}"))
}

const ZORRO: &str = "remote_backend.train.zorro_train.enable";
const LOGITS: [&str; 3] = [
    "remote_backend.train.logits.optimization",
    "remote_backend.train.logits.optimization_peak_mem_size_in_gib",
    "remote_backend.train.logits.compute_in_fp32",
];

/// The verdicts of a knob's cells under one value of ZoRRo.
fn under_zorro(k: &KnobResult, on: bool) -> Vec<CellVerdict> {
    k.cells
        .iter()
        .filter(|c| c.condition.get(ZORRO) == Some(&json!(on)))
        .map(|c| c.verdict)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_matrix_agrees_with_the_knob_reference() {
    let out = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (r, dir, failed) = matrix(&smoke(), out.path(), &[]).await;
    println!(
        "{}\nwhole matrix: {} runs in {:.1} s",
        rlharness::tools::propagate::render::markdown(&r),
        r.runs,
        t.elapsed().as_secs_f64()
    );
    assert!(!failed, "a perturbed run failed");
    assert!(dir.starts_with(out.path()));

    // The logits knobs are consumed under ZoRRo (from ds_worker_config).
    for p in LOGITS {
        let k = knob(&r, p);
        assert!(
            under_zorro(k, true)
                .iter()
                .all(|v| *v == CellVerdict::Consumed),
            "{p}: {:?}",
            k.evidence()
        );
        assert!(k.cells.iter().any(|c| c
            .consumed_at
            .iter()
            .any(|a| a.starts_with("job.training.ds_worker_config."))));
    }
    assert_eq!(knob(&r, LOGITS[0]).verdict, KnobVerdict::Consumed);
    assert!(
        !knob(&r, LOGITS[2]).flagged,
        "{:?}",
        knob(&r, LOGITS[2]).problems
    );
    // 2.5 GiB where the ZoRRo init path declares an integer.
    let peak = knob(&r, LOGITS[1]);
    assert!(
        peak.problems
            .iter()
            .any(|p| p.contains("type mismatch") && p.contains("declares int")),
        "{:?}",
        peak.problems
    );

    // compute_from_fp32_inputs: a no-op without ZoRRo.
    let k = knob(&r, "remote_backend.train.logits.compute_from_fp32_inputs");
    assert_eq!(
        k.verdict,
        KnobVerdict::ConsumedUnderCondition,
        "{:?}",
        k.evidence()
    );
    assert_eq!(under_zorro(k, false), vec![CellVerdict::NotSent]);
    assert!(!k.flagged, "{:?}", k.problems);

    // clip_ratio and loss_mode: sent but not consumed.
    for p in [
        "actor_rollout_ref.actor.clip_ratio",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
    ] {
        let k = knob(&r, p);
        assert_eq!(
            k.verdict,
            KnobVerdict::SentNotConsumed,
            "{p}: {:?}",
            k.evidence()
        );
        assert!(k.flagged);
    }

    // max_num_batched_tokens: not sent.
    let k = knob(&r, "actor_rollout_ref.rollout.max_num_batched_tokens");
    assert_eq!((k.verdict, k.flagged), (KnobVerdict::NotSent, true));

    // The seed matters only with full determinism.
    let k = knob(&r, "remote_backend.train.determinism.seed");
    assert_eq!(
        k.verdict,
        KnobVerdict::ConsumedUnderCondition,
        "{:?}",
        k.evidence()
    );
    assert_eq!(
        k.consumed_when,
        vec![[(
            "remote_backend.train.determinism.full".to_string(),
            json!(true)
        )]
        .into_iter()
        .collect()]
    );

    // Every flag of the smoke matrix is a known gap of the manifest: CI can gate on exit 0.
    assert!(
        r.passed(),
        "new flags or closed gaps:\n{}",
        rlharness::tools::propagate::render::markdown(&r)
    );
    assert!(r.flagged() > 0 && r.new_flags() == 0);
    // Start-up flags are observed here: the harness started the server with them.
    let k = knob(&r, "remote_backend.sampling_gpus");
    assert_eq!(k.verdict, KnobVerdict::Consumed, "{:?}", k.evidence());

    // The reports are on disk, one JUnit case per knob.
    rlharness::tools::propagate::command::write_reports(&r, &dir).unwrap();
    let junit = std::fs::read_to_string(dir.join("propagation.junit.xml")).unwrap();
    let parsed = quick_junit::Report::deserialize_from_str(&junit).unwrap();
    assert_eq!(parsed.test_suites[0].test_cases.len(), r.knobs.len());
    assert!(dir.join("propagation.md").is_file() && dir.join("propagation.html").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planted_original_bug_is_flagged_for_all_three_logits_knobs() {
    let out = tempfile::tempdir().unwrap();
    let set = vec!["driver.plant=[logits_in_meta_only]".to_string()];
    let (r, _, failed) = matrix(&smoke(), out.path(), &set).await;
    assert!(!failed);
    for p in LOGITS {
        let k = knob(&r, p);
        assert!(k.flagged, "{p} not flagged");
        assert!(
            under_zorro(k, true).contains(&CellVerdict::SentNotConsumed),
            "{p}: {:?}",
            k.evidence()
        );
        assert!(
            k.problems
                .iter()
                .any(|m| m.contains("did not change") && m.contains("ds_worker_config")),
            "{p}: {:?}",
            k.problems
        );
    }
}

fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/propagate/verl-arctic-standin.yaml")
}

fn new_flags(r: &PropagationReport) -> Vec<&str> {
    r.knobs
        .iter()
        .filter(|k| k.flagged && k.known_gap.is_none())
        .map(|k| k.path.as_str())
        .collect()
}

/// `propagate` over a command scenario drives the trainer under test (a stand-in for verl +
/// the Arctic adapter, `tests/fixtures/verl/fake_arctic_verl.py`), each trial stopped on the
/// wire after its first update. Bug-free, it flags only the manifest's known gaps (exit 0);
/// with the three planted adapter bugs, it flags exactly the knobs they break, each with the
/// wire location the server reads and what was seen there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_trainer_matrix_flags_exactly_the_planted_adapter_bugs() {
    let out = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (r, dir, failed) = matrix(&standin(), out.path(), &[]).await;
    println!(
        "bug-free stand-in matrix: {} runs in {:.1} s",
        r.runs,
        t.elapsed().as_secs_f64()
    );
    assert!(!failed);
    assert!(
        r.passed(),
        "{}",
        rlharness::tools::propagate::render::markdown(&r)
    );
    assert!(r.driver.contains("fake_arctic_verl.py"), "{}", r.driver);
    // Grouped by default, with fewer runs than one knob per trial would need.
    assert!(r.grouping && r.planned_grouped < r.planned_solo, "{r:?}");
    assert!(r.runs < r.planned_solo, "{} runs", r.runs);
    // Bug-free, every group is attributed: no split.
    assert_eq!(r.splits, 0, "{r:?}");
    // The trainer printed its resolved config: every key of its backend block is listed.
    let seen = r.unlisted.seen_in.as_deref().unwrap_or_default();
    assert!(seen.contains("stdout.log"), "{:?}", r.unlisted);
    assert!(r.unlisted.knobs.is_empty(), "{:?}", r.unlisted);
    // Knobs no trial observed are counted, and skipped in JUnit, not successes.
    assert!(r.unobserved() > 0);
    rlharness::tools::propagate::command::write_reports(&r, &dir).unwrap();
    let junit = std::fs::read_to_string(dir.join("propagation.junit.xml")).unwrap();
    let parsed = quick_junit::Report::deserialize_from_str(&junit).unwrap();
    let skipped = parsed.test_suites[0]
        .test_cases
        .iter()
        .filter(|c| matches!(c.status, quick_junit::TestCaseStatus::Skipped { .. }))
        .count();
    assert_eq!(skipped, r.unobserved(), "{junit}");
    // --require-observed: the same matrix fails.
    let mut strict = r.clone();
    strict.require_observed = true;
    assert!(!strict.passed());
    // The trainer started no server here: a start-up flag is not observable, not "not sent".
    let k = knob(&r, "remote_backend.sampling_gpus");
    assert_eq!(k.verdict, KnobVerdict::NotObservable, "{:?}", k.evidence());
    assert!(r
        .unobserved_paths()
        .contains(&"remote_backend.sampling_gpus"));
    let k = knob(&r, "remote_backend.sampling_gpus");
    assert_eq!(k.verdict, KnobVerdict::NotObservable, "{:?}", k.evidence());
    assert!(!k.flagged);
    // Over Ray the wire cannot be seen: said so, not "not sent".
    let k = knob(&r, "remote_backend.comms.protocol");
    let ray = k.cells.iter().find(|c| c.value == json!("ray")).unwrap();
    assert_eq!(ray.verdict, CellVerdict::NotObservable);
    assert!(ray
        .unobservable
        .as_deref()
        .unwrap()
        .contains("run with remote_backend.comms.protocol=http"));
    // Each trial stopped when its second step began: no trial ran the scenario's 20 steps.
    let trial = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.path().join("run.json").is_file())
        .unwrap()
        .path();
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trial.join("run.json")).unwrap()).unwrap();
    assert!(
        run["notes"].to_string().contains("stopped on purpose"),
        "{run}"
    );

    let set = vec![
        "driver.env.ARCTIC_STANDIN_BUGS=zorro-logits-dropped,wrong-job,forward-compat".to_string(),
    ];
    let (r, _, failed) = matrix(&standin(), out.path(), &set).await;
    assert!(!failed);
    let mut flagged = new_flags(&r);
    flagged.sort();
    let mut want = vec![
        LOGITS[0],
        LOGITS[1],
        LOGITS[2],
        "remote_backend.train.logits.compute_from_fp32_inputs",
        "remote_backend.weight_sync.low_memory",
    ];
    want.sort();
    assert_eq!(
        flagged,
        want,
        "{}",
        rlharness::tools::propagate::render::markdown(&r)
    );
    assert!(!r.passed());
    // The seed's bug: the knob, the location the server reads under ZoRRo, and that it stayed.
    for p in LOGITS {
        let k = knob(&r, p);
        assert!(
            k.problems.iter().any(|m| m.contains(ZORRO)
                && m.contains("job.training.ds_worker_config.logits_")
                && m.contains("did not change")),
            "{p}: {:?}",
            k.problems
        );
    }
    // The knob written to the wrong job: seen on the sampling job, missing on the training job.
    let k = knob(&r, "remote_backend.weight_sync.low_memory");
    assert!(
        k.problems
            .iter()
            .any(|m| m.contains("job.training.low_memory"))
            && k.problems
                .iter()
                .any(|m| m.contains("job.sampling.low_memory")),
        "{:?}",
        k.problems
    );
    // The forward-compatible key nothing reads: where it was sent.
    let k = knob(&r, "remote_backend.train.logits.compute_from_fp32_inputs");
    assert!(
        k.problems
            .iter()
            .any(|m| m.contains("unexpected effect meta.logits_compute_from_fp32_inputs")),
        "{:?}",
        k.problems
    );
}

/// A trainer that never reaches the wire is a clear error naming the run and its last lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainer_that_never_reaches_the_wire_is_named_with_its_last_lines() {
    let out = tempfile::tempdir().unwrap();
    let set = vec!["driver.env.ARCTIC_STANDIN_BUGS=no-such-bug".to_string()];
    let options = MatrixOptions {
        until: rlharness::tools::propagate::command::Until::Initialize,
        jobs: 4,
        ..MatrixOptions::default()
    };
    let err = run_matrix(&standin(), out.path(), &set, &options)
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("never reached the wire") && err.contains("unknown bug switch"),
        "{err}"
    );
    // The plain baseline runs first, alone: the matrix stops at it.
    assert!(err.contains("runs were not started"), "{err}");
    let matrix_dir = std::fs::read_dir(out.path().join("verl-arctic-standin"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let runs: Vec<_> = std::fs::read_dir(&matrix_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(runs.len(), 1, "only the baseline ran: {runs:?}");
}

/// The per-knob verdicts of a matrix: verdict, flagged, known gap, every problem.
fn verdicts(r: &PropagationReport) -> Vec<(String, KnobVerdict, bool, bool, Vec<String>)> {
    r.knobs
        .iter()
        .map(|k| {
            // How many kinds of the trainer's processes the environment sampler saw with the
            // value tried depends on which short-lived ones it caught: the count is a sample,
            // not part of the verdict two matrices must agree on.
            let mut p: Vec<String> = k.problems.iter().map(|p| sampled_count(p)).collect();
            p.sort();
            (
                k.path.clone(),
                k.verdict,
                k.flagged,
                k.known_gap.is_some(),
                p,
            )
        })
        .collect()
}

/// `problem` with the count of "it reached N other kinds of process" left out.
fn sampled_count(problem: &str) -> String {
    match problem.split_once("(it reached ") {
        Some((head, tail)) => {
            let rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
            format!("{head}(it reached some{rest}")
        }
        None => problem.to_string(),
    }
}

/// Group testing is exact: with an unexpected effect inside a group (`forward-compat`), a
/// reader dropped beside one that still changes (`dwc-temperature-dropped`) and a key the
/// manifest does not list (`unlisted-knob`), the grouped matrix splits the ambiguous group and
/// ends with the same per-knob verdicts as one knob per trial, in fewer runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_and_ungrouped_matrices_agree_and_an_unexpected_effect_splits_its_group() {
    let out = tempfile::tempdir().unwrap();
    let set = vec![
        "driver.env.ARCTIC_STANDIN_BUGS=forward-compat,dwc-temperature-dropped,unlisted-knob"
            .to_string(),
    ];
    let t = Instant::now();
    let (grouped, _, failed) = matrix(&standin(), out.path(), &set).await;
    let grouped_s = t.elapsed().as_secs_f64();
    assert!(!failed);
    let solo_options = MatrixOptions {
        group: false,
        ..MatrixOptions::default()
    };
    let t = Instant::now();
    let (solo, _, failed) = run_matrix(&standin(), out.path(), &set, &solo_options)
        .await
        .unwrap();
    println!(
        "stand-in with bugs: grouped {} runs ({} splits) in {grouped_s:.1} s; one knob per trial {} runs in {:.1} s",
        grouped.runs,
        grouped.splits,
        solo.runs,
        t.elapsed().as_secs_f64()
    );
    assert!(!failed);
    assert!(grouped.splits > 0, "the unexpected effect split no group");
    assert!(
        grouped.runs < solo.runs,
        "{} vs {}",
        grouped.runs,
        solo.runs
    );
    assert!(
        solo.runs <= solo.planned_solo,
        "{} > {}",
        solo.runs,
        solo.planned_solo
    );
    assert_eq!(verdicts(&grouped), verdicts(&solo));

    // `--until auto` stops the runs whose knobs are read only in a JobConfig at the jobs'
    // initialization: the same verdicts but one, in no more runs. The exception is its stated
    // blind spot: `forward-compat` also sends a ZoRRo-only knob in the update's meta, an
    // unexpected effect after initialization, which the ZoRRo-on trial no longer sees (the
    // knob stays flagged by its ZoRRo-off trial).
    let auto = MatrixOptions {
        until: rlharness::tools::propagate::command::Until::Auto,
        ..MatrixOptions::default()
    };
    let t = Instant::now();
    let (fast, _, failed) = run_matrix(&standin(), out.path(), &set, &auto)
        .await
        .unwrap();
    assert!(!failed);
    let early: usize = fast
        .until
        .rsplit(" (")
        .next()
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    println!(
        "until auto: {} runs, {early} stopped at initialization, in {:.1} s",
        fast.runs,
        t.elapsed().as_secs_f64()
    );
    assert!(early > 0, "{}", fast.until);
    let blind = "remote_backend.train.logits.compute_from_fp32_inputs";
    let mut want = verdicts(&grouped);
    for v in want.iter_mut().filter(|v| v.0 == blind) {
        v.4.retain(|p| !p.contains("zorro_train.enable=true): unexpected effect meta."));
    }
    assert_eq!(verdicts(&fast), want);
    assert!(knob(&fast, blind).flagged);
    let mut flagged = new_flags(&grouped);
    flagged.sort();
    assert_eq!(
        flagged,
        vec![
            "actor_rollout_ref.rollout.temperature",
            "remote_backend.train.logits.compute_from_fp32_inputs"
        ],
        "{}",
        rlharness::tools::propagate::render::markdown(&grouped)
    );
    // The dropped copy is flagged though the sampling params still change.
    let k = knob(&grouped, "actor_rollout_ref.rollout.temperature");
    assert!(
        k.problems.iter().any(|p| p.contains(ZORRO)
            && p.contains("job.training.ds_worker_config.temperature")
            && p.contains("did not change")),
        "{:?}",
        k.problems
    );
    assert!(k
        .cells
        .iter()
        .any(|c| c.consumed_at == ["generate.sampling_params.temperature"]));
    // The unlisted key: reported, a new flag, in both.
    for r in [&grouped, &solo] {
        let paths: Vec<&str> = r.unlisted.knobs.iter().map(|k| k.path.as_str()).collect();
        assert_eq!(paths, ["remote_backend.train.new_forward_compat_knob"]);
        assert!(!r.passed());
    }
    let md = rlharness::tools::propagate::render::markdown(&grouped);
    assert!(
        md.contains("`remote_backend.train.new_forward_compat_knob` = true: **FLAGGED**"),
        "{md}"
    );
}

/// `--until initialize` stops each trial after its jobs are initialized. A knob read later (in
/// a per-call `meta`, a request's parameters, the sleep/wake calls) or sent only later is not
/// observable there, with the reach that shows it; it is not flagged as "not sent" (34 knobs
/// were, before). What the JobConfigs do show is still judged: the logits knob's float in an
/// int field is the one flag left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_initialize_judges_what_initialization_shows_and_no_more() {
    use rlharness::tools::propagate::command::Until;
    let out = tempfile::tempdir().unwrap();
    let opts = MatrixOptions {
        until: Until::Initialize,
        ..MatrixOptions::default()
    };
    let (r, _, failed) = run_matrix(&smoke(), out.path(), &[], &opts).await.unwrap();
    assert!(!failed);
    let flagged: Vec<&str> = r
        .knobs
        .iter()
        .filter(|k| k.flagged)
        .map(|k| k.path.as_str())
        .collect();
    assert_eq!(flagged, [LOGITS[1]], "{flagged:?}");
    // That flag is the manifest's known gap (a fractional size where the server declares an
    // int), accepted here as at full reach: the condition whose reader is past initialization
    // (zorro off: a per-call meta) is not observable, and does not narrow "consumed".
    let peak = knob(&r, LOGITS[1]);
    assert_eq!(peak.verdict, KnobVerdict::Consumed);
    assert!(peak.known_gap.is_some(), "{:?}", peak.problems);
    assert!(r.passed(), "`--until initialize` exits 1 on the smoke");
    for path in [
        "remote_backend.colocate",
        "actor_rollout_ref.actor.clip_ratio",
        "actor_rollout_ref.actor.strategy",
    ] {
        let k = knob(&r, path);
        assert_eq!(k.verdict, KnobVerdict::NotObservable, "{path}");
        assert!(
            k.cells.iter().all(|c| c
                .unobservable
                .as_deref()
                .is_some_and(|w| w.contains("--until auto"))),
            "{path}: {:?}",
            k.cells
        );
    }
    // A knob every reader of which is a JobConfig is judged as at any reach.
    assert_eq!(
        knob(&r, "remote_backend.training_gpus").verdict,
        KnobVerdict::Consumed
    );
}
