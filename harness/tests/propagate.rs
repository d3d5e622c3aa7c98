//! End to end: the propagation matrix of the smoke scenario with the builtin driver on the
//! mock, judged against the facts of the knob reference; and the planted original bug.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rlharness::propagate::command::run_matrix;
use rlharness::propagate::render::PropagationReport;
use rlharness::propagate::verdict::{CellVerdict, KnobResult, KnobVerdict};
use serde_json::json;

fn smoke() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/smoke/mock-gsm8k-grpo.yaml")
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
    let (r, dir, failed) = run_matrix(&smoke(), out.path(), &[]).await.unwrap();
    println!(
        "{}\nwhole matrix: {} runs in {:.1} s",
        rlharness::propagate::render::markdown(&r),
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

    // The reports are on disk, one JUnit case per knob.
    rlharness::propagate::command::write_reports(&r, &dir).unwrap();
    let junit = std::fs::read_to_string(dir.join("propagation.junit.xml")).unwrap();
    let parsed = quick_junit::Report::deserialize_from_str(&junit).unwrap();
    assert_eq!(parsed.test_suites[0].test_cases.len(), r.knobs.len());
    assert!(dir.join("propagation.md").is_file() && dir.join("propagation.html").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planted_original_bug_is_flagged_for_all_three_logits_knobs() {
    let out = tempfile::tempdir().unwrap();
    let set = vec!["driver.plant=[logits_in_meta_only]".to_string()];
    let (r, _, failed) = run_matrix(&smoke(), out.path(), &set).await.unwrap();
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
