//! The flagship on "another host" (feature `torch`): kernels pinned to the x86-64 baseline
//! (`backend.cpu_isa=baseline`, set in the torch child's environment before libtorch starts)
//! round like no AVX2 host, which is what a CPU model the golden was not made on looks like.
#![cfg(feature = "torch")]

use crate::common;

use common::{opts, repo, run_expecting};

use rlharness::model::error::ExitStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_kernel_level_is_another_host_judged_by_the_bands() {
    // The baseline kernels round like no AVX2 host: the fingerprint differs from the
    // golden's, so the exact lane stands aside and the bands judge, as on a CPU model the
    // golden was not made on. The flagship must still learn and pass there.
    let tmp = tempfile::tempdir().unwrap();
    let report = run_expecting(
        &repo().join("scenarios/tiny-gsm8k-grpo.yaml"),
        &opts(tmp.path(), &["backend.cpu_isa=baseline"]),
        ExitStatus::Passed,
    )
    .await;
    let v = report.verdict.unwrap();
    let lane = v.exact_lane.unwrap();
    assert!(!lane.applied);
    assert!(
        lane.message.contains("differs from the golden's"),
        "{}",
        lane.message
    );
    let kernels = report.run.numerics.unwrap().cpu_kernels.unwrap();
    assert_eq!(kernels.isa, "baseline");
    assert!(kernels
        .env
        .contains(&"ATEN_CPU_CAPABILITY=default".to_string()));
}
