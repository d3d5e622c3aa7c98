//! `rlharness bisect --propagate` on the real Arctic adapter with real verl: a throwaway
//! repository of the extracted adapter tree (ARCTIC_SRC), two commits after it, the first of
//! which applies the seed's logits bug (`zorro-logits-dropped.patch`). The search runs only the
//! trials that can show that bug (`--knobs remote_backend.train.logits.optimization
//! --condition remote_backend.train.zorro_train.enable=true`: its only reader is ZoRRo
//! training's `ds_worker_config`): a baseline and one trial per commit, each stopped once the
//! JobConfigs are sent, three commits tested (the two ends, then the one between: six runs; a
//! longer range adds two runs per commit tested and proves nothing more about the real
//! adapter; the search itself is tested on the mock, `bisect::`). Ignored in a plain
//! `cargo test`; `bash ci/verl-tests.sh` runs it (its path matches the `real_verl::` filter).

use std::process::Command;
use std::time::Instant;

use super::{bisect_json, checkout_untouched, runs_line, throwaway_repo};
use crate::common::{repo, says, text};

const SCENARIO: &str = "scenarios/verl/real-verl-arctic-grpo.yaml";

/// The setting `ci/verl-tests.sh` sets.
fn setting(k: &str) -> String {
    std::env::var(k)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("{k} is not set: the real-verl tests run through `bash ci/verl-tests.sh`")
        })
}

#[test]
#[ignore = "needs real verl: bash ci/verl-tests.sh"]
fn bisect_with_propagate_finds_the_commit_that_drops_the_logits_knobs() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let (verl, arctic) = (setting("VERL_SRC"), setting("ARCTIC_SRC"));
    let patch = repo().join("harness/tests/fixtures/verl/patches/zorro-logits-dropped.patch");
    let adapter = tmp.path().join("arctic");
    let commits = throwaway_repo(
        &adapter,
        std::path::Path::new(&arctic),
        2,
        1,
        "ds_worker_config: drop the logits settings",
        |d| {
            let p = Command::new("patch")
                .args(["-p1", "--quiet", "-d", d.to_str().unwrap(), "-i"])
                .arg(&patch)
                .output()
                .unwrap();
            assert!(p.status.success(), "the patch does not apply: {}", text(&p));
        },
    );
    let out = tmp.path().join("bisect");
    let o = Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .current_dir(repo())
        .args([
            "bisect",
            SCENARIO,
            "--repo",
            adapter.to_str().unwrap(),
            "--good",
            &commits[0],
            "--bad",
            &commits[2],
            "--source",
            "ARCTIC_SRC",
            "--propagate",
            "--knobs",
            "remote_backend.train.logits.optimization",
            "--condition",
            "remote_backend.train.zorro_train.enable=true",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("VERL_SRC", &verl)
        .env("ARCTIC_SRC", &arctic)
        .env("CI", "true")
        .env("RUST_LOG", "warn")
        .env_remove("VERL_ASSETS")
        .output()
        .unwrap();
    let json = bisect_json(&out);
    println!("{}", String::from_utf8_lossy(&o.stdout));
    println!(
        "bisect (real adapter, propagate): {}; {:.0} s",
        runs_line(&json),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        json["first_bad"]["sha"],
        commits[1].as_str(),
        "{}",
        text(&o)
    );
    says(
        &text(&o),
        &[
            "first bad commit:",
            "ds_worker_config: drop the logits settings",
            "flagged: remote_backend.train.logits.optimization",
        ],
    );
    // Only the trials that can show the bug ran: a baseline and one trial at each of the three
    // commits tested.
    assert_eq!(
        json["tested"].as_array().unwrap().len(),
        3,
        "{}",
        runs_line(&json)
    );
    assert_eq!(json["runs"], 6, "{}", runs_line(&json));
    checkout_untouched(&adapter, &commits[2]);
}
