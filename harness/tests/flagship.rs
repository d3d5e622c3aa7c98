//! The torch flagship and its collapse self-test, end to end through `rlharness run`
//! (feature `torch`): the first passes against its accepted CPU golden and its convergence
//! rules; the second is caught, and its verdict names the failed convergence rules.
#![cfg(feature = "torch")]

mod common;

use common::{opts, repo, run_expecting};

use rlharness::error::ExitStatus;
use rlharness::report::Report;

/// Run `scenarios/NAME` (into a directory of its own); it must exit 0.
async fn run_passing(name: &str) -> Report {
    let tmp = tempfile::tempdir().unwrap();
    run_expecting(
        &repo().join("scenarios").join(name),
        &opts(tmp.path(), &[]),
        ExitStatus::Passed,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flagship_learns_and_passes() {
    let report = run_passing("tiny-gsm8k-grpo.yaml").await;
    let v = report.verdict.unwrap();
    assert!(v.rule("expect:reward-converges").is_some());
    assert_eq!(report.run.device, "cpu");
    assert!(report
        .run
        .torch_version
        .as_deref()
        .unwrap_or("")
        .starts_with("2.11"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collapse_is_caught_by_the_convergence_rules() {
    // The scenario declares the failure it expects: exit 0 means the harness caught it.
    let report = run_passing("tiny-gsm8k-grpo-collapse.yaml").await;
    let v = report.verdict.unwrap();
    let failing: Vec<&str> = v.failing().map(|r| r.rule.as_str()).collect();
    assert!(
        failing.contains(&"expect:reward-converges"),
        "the verdict names the failed convergence rule: {failing:?}"
    );
}

/// One judge on the torch scenarios too: `rlharness compare RUN` writes exactly the
/// verdict.json `rlharness run` wrote, whatever the verdict is on this host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_reproduces_the_torch_verdicts() {
    for name in ["tiny-gsm8k-grpo.yaml", "tiny-gsm8k-grpo-collapse.yaml"] {
        let tmp = tempfile::tempdir().unwrap();
        let report =
            rlharness::app::run_one(&repo().join("scenarios").join(name), &opts(tmp.path(), &[]))
                .await
                .unwrap();
        let dir = tmp.path().join("run");
        let ran = std::fs::read_to_string(dir.join("verdict.json")).unwrap();
        let status =
            rlharness::report::compare_command(&dir, None, &repo().join("golden")).unwrap();
        let again = std::fs::read_to_string(dir.join("compare/golden/verdict.json")).unwrap();
        assert_eq!(ran, again, "{name}: compare's verdict differs from run's");
        assert_eq!(status, report.exit_status(), "{name}");
    }
}
