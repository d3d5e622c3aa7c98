//! Multi-seed runs (`run --seeds`): the seeds' distribution judged against the calibration,
//! and the arguments checked.

use rlharness::model::error::ExitStatus;

use super::smoke;
use crate::common::repo;

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
        let m = rlharness::model::rundir::RunManifest::read(&seed_dir).unwrap();
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

    // seeds.json records what the combined verdict was judged against.
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("seeds.json")).unwrap()).unwrap();
    let recorded = &manifest["judged_against"];
    assert!(
        recorded["golden"].is_string() && recorded["calibration"].is_string(),
        "{manifest}"
    );
    // A recalibration since the seeds ran: `compare` says so, with the verdict at run time.
    let cal_path = golden.join("mock-gsm8k-grpo/cpu/calibration.json");
    let before = std::fs::read_to_string(&cal_path).unwrap();
    let mut cal: serde_json::Value = serde_json::from_str(&before).unwrap();
    for w in cal["windows"]["critic/rewards/mean"]
        .as_array_mut()
        .unwrap()
    {
        w["std"] = serde_json::json!(w["std"].as_f64().unwrap() * 3.0);
    }
    std::fs::write(&cal_path, serde_json::to_string(&cal).unwrap()).unwrap();
    rlharness::app::compare_command(&dir, None, &golden).unwrap();
    let md = std::fs::read_to_string(dir.join("compare/golden/report.md")).unwrap();
    assert!(
        md.contains("judged against another golden than at run time")
            && md.contains("changed since the seeds ran. At run time: passed")
            && md.contains("its calibration (sha"),
        "{md}"
    );
    // It is seeds.json's own record that says so (not only the seeds' run.json): with the
    // seeds' records gone, the note stays.
    for seed in 11..=16 {
        let path = dir.join(format!("seed-{seed}/run.json"));
        let mut run: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        run.as_object_mut().unwrap().remove("judged_against");
        std::fs::write(&path, serde_json::to_string(&run).unwrap()).unwrap();
    }
    rlharness::app::compare_command(&dir, None, &golden).unwrap();
    let md = std::fs::read_to_string(dir.join("compare/golden/report.md")).unwrap();
    assert!(md.contains("changed since the seeds ran"), "{md}");
    std::fs::write(&cal_path, before).unwrap();

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
