//! One judge: `compare RUN` re-judges a stored run as `run` did, for every CPU scenario, a
//! watchdog stop and an MFU the series left out; self-tests judged against a reference made
//! here.

use std::path::{Path, PathBuf};

use rlharness::model::error::ExitStatus;
use serde_json::Value;

use super::smoke;
use crate::common::shared::shared_run;
use crate::common::{opts, repo, run_expecting};

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
    let scenario = repo().join("scenarios/selftest/mock-mfu-drop.yaml");
    let run = shared_run(&scenario, &opts(Path::new(""), &[])).await;
    let report = run.report();
    assert_eq!(
        report.exit_status(),
        ExitStatus::Passed,
        "{}",
        report.summary()
    );
    let v = report.verdict.as_ref().unwrap();
    assert_eq!(v.outcome, rlharness::judge::Outcome::Regressed);
    let mfu = v.rule("golden:perf/mfu/actor").unwrap();
    assert!(
        mfu.evidence.message.contains("regressed"),
        "{}",
        mfu.evidence.message
    );
    assert_eq!(report.reference.as_ref().unwrap().label, "reference run");
    let manifest = rlharness::model::rundir::RunManifest::read(&run.dir).unwrap();
    let reference = manifest
        .reference_run
        .expect("the planted run names its reference");
    assert!(reference.ends_with("reference"), "{reference}");
    // The reference ran as written: the planted run's MFU is the reference's times 0.95.
    let ref_table = rlharness::model::metrics::MetricTable::read_csv(
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
/// bands, expectations, the replay rule, watchdog stops, run failures). The runs are those the
/// fault, replay and smoke tests read (`common::shared`); this is the one test that re-judges
/// them, and `compare` writes nothing but `RUN/compare/` (in place: verdict.json names the run's
/// folder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_reproduces_the_run_verdict_of_every_cpu_scenario() {
    let scenarios = cpu_scenarios();
    let runs = futures_util::future::join_all(
        scenarios
            .iter()
            .map(|s| async move { (s, shared_run(s, &opts(Path::new(""), &[])).await) }),
    )
    .await;
    for (scenario, run) in runs {
        let report = run.report();
        assert_compare_reproduces(&run.dir, &report, &scenario.display());
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
    assert_eq!(e.status, rlharness::judge::RuleStatus::Regressed, "{e:?}");
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
