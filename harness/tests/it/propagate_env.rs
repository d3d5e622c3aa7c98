//! `propagate` follows the environment variables of a command trainer: every one the scenario's
//! `driver.env` sets and every one the launcher sets, as each of the trainer's processes got
//! them (the stand-in for verl + the Arctic adapter, whose `launch_local_server` starts a
//! child, as the real adapter starts its server).

use std::path::{Path, PathBuf};

use rlharness::tools::propagate::command::{run_matrix, write_reports, MatrixOptions, Until};
use rlharness::tools::propagate::environ::{EnvPassage, EnvSource};
use rlharness::tools::propagate::render::PropagationReport;

fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/propagate/verl-arctic-standin.yaml")
}

async fn env_matrix(bugs: &str) -> (tempfile::TempDir, PropagationReport, PathBuf) {
    let out = tempfile::tempdir().unwrap();
    let set: Vec<String> = [
        format!("++driver.env.ARCTIC_STANDIN_BUGS={bugs}"),
        "++driver.env.TOKENIZERS_PARALLELISM='true'".into(),
        "++driver.env.RLH_PASSED=yes".into(),
    ]
    .into();
    let opts = MatrixOptions {
        until: Until::Initialize,
        knobs: vec!["remote_backend.training_gpus".into()],
        progress: false,
        ..MatrixOptions::default()
    };
    let (r, dir, failed) = run_matrix(&standin(), out.path(), &set, &opts)
        .await
        .unwrap();
    assert!(!failed);
    (out, r, dir)
}

fn passage<'a>(r: &'a PropagationReport, name: &str) -> &'a EnvPassage {
    r.environment
        .variables
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no row for {name}: {:?}", r.environment))
}

/// A `driver.env` value that reaches every process passes; one the launcher exports its own
/// value over is flagged, naming the process and what it got, and fails the check (exit 1),
/// in every report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_env_value_the_launcher_overwrites_is_flagged() {
    let (_keep, clean, _) = env_matrix("").await;
    assert!(clean.passed(), "{}", clean.terminal_summary());
    for name in [
        "RLH_PASSED",
        "TOKENIZERS_PARALLELISM",
        "ARCTIC_STANDIN_BUGS",
    ] {
        let p = passage(&clean, name);
        assert_eq!(p.source, EnvSource::DriverEnv);
        assert!(!p.flagged && p.reaches_trainer, "{}", p.describe());
        // The trainer and the child its server launcher starts.
        assert!(p.processes.len() >= 2, "{:?}", p.processes);
    }

    assert_eq!(
        clean.environment.trainer.as_deref(),
        Some("fake_arctic_verl.py")
    );

    let (_keep, r, dir) = env_matrix("launcher-overwrites-env").await;
    assert!(!r.passed(), "{}", r.terminal_summary());
    let tp = passage(&r, "TOKENIZERS_PARALLELISM");
    assert!(tp.flagged && !tp.reaches_trainer, "{}", tp.describe());
    assert!(
        tp.missed_by
            .iter()
            .any(|m| m.starts_with("fake_arctic_verl.py") && m.ends_with("false")),
        "{:?}",
        tp.missed_by
    );
    assert!(!passage(&r, "RLH_PASSED").flagged);
    assert!(r
        .terminal_summary()
        .contains("FLAGGED env.TOKENIZERS_PARALLELISM"));
    write_reports(&r, &dir).unwrap();
    let md = std::fs::read_to_string(dir.join("propagation.md")).unwrap();
    assert!(
        md.contains("| `TOKENIZERS_PARALLELISM` | `driver.env` | **FLAGGED** |"),
        "{md}"
    );
    let junit = std::fs::read_to_string(dir.join("propagation.junit.xml")).unwrap();
    assert!(junit.contains("env.TOKENIZERS_PARALLELISM"), "{junit}");
}
