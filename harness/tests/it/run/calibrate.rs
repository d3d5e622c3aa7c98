//! `golden calibrate`, `golden bless` and `compare` after a re-bless, through the binary on the
//! smoke scenario.

use std::path::{Path, PathBuf};

use super::smoke;
use crate::common::repo;

/// A copy of the smoke scenario's accepted golden under `golden`: its folder.
fn copy_smoke_golden(golden: &Path) -> PathBuf {
    let dst = golden.join("mock-gsm8k-grpo/cpu");
    std::fs::create_dir_all(&dst).unwrap();
    for f in ["metrics.csv", "golden.yaml"] {
        std::fs::copy(
            repo().join("golden/mock-gsm8k-grpo/cpu").join(f),
            dst.join(f),
        )
        .unwrap();
    }
    dst
}

/// `rlharness golden calibrate` runs the scenario N times and writes `calibration.json` beside
/// the golden; the mock is deterministic, so every standard deviation is 0 (a calibrated band
/// then falls back to its floor). CI never calibrates.
#[test]
fn golden_calibrate_writes_the_measured_noise_beside_the_golden() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let calibrate = |ci: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
        c.args(["golden", "--golden"])
            .arg(&golden)
            // `--allow-dirty`: a working tree under development has uncommitted changes.
            .args([
                "calibrate",
                "--allow-dirty",
                "--runs",
                "2",
                "--jobs",
                "2",
                "--out",
            ])
            .arg(tmp.path().join("reports"))
            .arg(smoke())
            .current_dir(repo());
        match ci {
            Some(v) => c.env("CI", v),
            None => c.env_remove("CI"),
        };
        c.output().unwrap()
    };
    let refused = calibrate(Some("true"));
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("CI never writes goldens"));
    let out = calibrate(None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cal: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(golden.join("mock-gsm8k-grpo/cpu/calibration.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cal["runs"], 2);
    assert_eq!(cal["seeds"], serde_json::json!([1, 1]));
    // The terminal gets a line a rule, not a Markdown row a window (calibration.json has those).
    let printed = String::from_utf8_lossy(&out.stdout);
    let rules = cal["windows"].as_object().unwrap().len();
    assert!(!printed.contains('|'), "{printed}");
    assert_eq!(printed.lines().count(), rules + 3, "{printed}");
    let reward = cal["windows"]["critic/rewards/mean"].as_array().unwrap();
    assert_eq!(reward.len(), 4, "4 windows of 5 steps");
    assert!(
        reward.iter().all(|w| w["n"] == 2 && w["std"] == 0.0),
        "{reward:?}"
    );
    assert_eq!(cal["steps"]["actor/lr"].as_array().unwrap().len(), 20);
    // Two runs of one seed of a deterministic backend measured no noise, and it says so; a
    // calibration run never offers itself as a golden.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("every window measured σ = 0 over 2 runs of one seed"),
        "{err}"
    );
    assert!(!err.contains("refusing to write a golden"), "{err}");

    // The calibration's runs are apart: under `calibrations/`, not moving the scenario's
    // `latest`, and no history counts them.
    let reports = tmp.path().join("reports/mock-gsm8k-grpo");
    assert!(!reports.join("latest").exists());
    let runs = std::fs::read_dir(reports.join("calibrations"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "latest" && e.path().join("run.json").is_file())
        .count();
    assert_eq!(runs, 2);
    let history = |golden: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .arg("history")
            .arg(tmp.path().join("reports"))
            .arg("--golden")
            .arg(golden)
            .arg("--out")
            .arg(tmp.path().join("history"))
            .output()
            .unwrap()
    };
    let h = history(&golden);
    assert_eq!(h.status.code(), Some(0), "{}", crate::common::text(&h));
    crate::common::says(
        &crate::common::text(&h),
        &["Left out: 2 calibration run(s)"],
    );
    // A store that does not exist is an input error, not "no golden" everywhere.
    let h = history(&tmp.path().join("no-such-store"));
    assert_eq!(h.status.code(), Some(2), "{}", crate::common::text(&h));
    crate::common::says(&crate::common::text(&h), &["no golden store at"]);
}

/// `golden calibrate --detect 5%` reads the shipped calibration (nothing runs) and prints the
/// seeds a multi-seed verdict needs per window: for the flagship (a 37-run calibration), a 5%
/// reward drop over steps 11..20 takes 9 seeds, over steps 1..10 22.
#[test]
fn golden_calibrate_detect_prints_the_seeds_needed() {
    let cli = |detect: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args([
                "golden",
                "calibrate",
                "scenarios/tiny-gsm8k-grpo.yaml",
                "--detect",
                detect,
            ])
            .current_dir(repo())
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let o = cli("5%");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A plain table for a terminal, one row a window.
    let row = |cells: &[&str]| {
        out.lines().any(|l| {
            l.split_whitespace()
                .take(cells.len())
                .eq(cells.iter().copied())
        })
    };
    assert!(
        row(&[
            "critic/rewards/mean",
            "11..20",
            "0.695117",
            "0.022251",
            "0.034756",
            "9"
        ]),
        "{out}"
    );
    assert!(
        row(&[
            "critic/rewards/mean",
            "1..10",
            "0.454424",
            "0.020329",
            "0.022721",
            "22"
        ]),
        "{out}"
    );
    assert!(!out.contains('|'), "no Markdown on the terminal: {out}");
    let bad = cli("5x");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--detect: `5x` is not a fraction"));
}

/// `--detect` reads the scenario's calibration whatever its hardware key (a GPU run's is known
/// only once its backend runs): it used to look under `cpu` alone, find nothing for an H200
/// scenario, and calibrate all over again. With calibrations for two keys it asks which.
#[test]
fn golden_calibrate_detect_finds_the_calibration_of_any_hardware() {
    let tmp = tempfile::tempdir().unwrap();
    let cal = repo().join("golden/tiny-gsm8k-grpo/cpu/calibration.json");
    let detect = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(["golden", "--golden"])
            .arg(tmp.path())
            .args([
                "calibrate",
                "scenarios/tiny-gsm8k-grpo.yaml",
                "--detect",
                "5%",
            ])
            .args(extra)
            .current_dir(repo())
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let h200 = tmp.path().join("tiny-gsm8k-grpo/h200");
    std::fs::create_dir_all(&h200).unwrap();
    std::fs::copy(&cal, h200.join("calibration.json")).unwrap();
    let o = detect(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("seeds a multi-seed verdict needs"));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("calibrating first"));
    let a100 = tmp.path().join("tiny-gsm8k-grpo/a100");
    std::fs::create_dir_all(&a100).unwrap();
    std::fs::copy(&cal, a100.join("calibration.json")).unwrap();
    let o = detect(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a100, h200"));
    assert!(detect(&["--hardware", "h200"]).status.success());
}

/// A calibration measures healthy runs only: a seed whose run fails a rule that does not depend
/// on the calibration (here the smoke's fixed reward band, made for its one seed) stops it,
/// naming the seed, the run and the rule, and nothing is written.
#[test]
fn golden_calibrate_refuses_a_run_that_fails_a_fixed_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let dst = copy_smoke_golden(&golden);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(["golden", "--golden"])
        .arg(&golden)
        // Seeds 4 and 5 miss the band by 0.015 and 0.0175 (seed 2 sits on its edge).
        .args(["calibrate", "--allow-dirty", "--seeds", "4..5", "--out"])
        .arg(tmp.path().join("reports"))
        .arg(smoke())
        .current_dir(repo())
        .env_remove("CI")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("failed rules that do not depend on the calibration")
            && err.contains("golden:critic/rewards/mean"),
        "{err}"
    );
    assert!(!dst.join("calibration.json").exists());
}

/// A calibration names the commit it measured: `golden calibrate` refuses a git tree with
/// uncommitted changes to tracked files (before running anything), unless `--allow-dirty`.
#[test]
fn golden_calibrate_refuses_a_dirty_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    git(&["init", "-q"]);
    std::fs::write(tmp.path().join("f"), "a").unwrap();
    git(&["add", "f"]);
    git(&["commit", "-q", "-m", "a"]);
    std::fs::write(tmp.path().join("f"), "b").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(["golden", "--golden"])
        .arg(tmp.path().join("golden"))
        .args(["calibrate", "--runs", "2", "--out"])
        .arg(tmp.path().join("reports"))
        .arg(smoke())
        .current_dir(tmp.path())
        .env_remove("CI")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("uncommitted changes") && err.contains("-dirty"),
        "{err}"
    );
    assert!(!tmp.path().join("reports").exists(), "nothing ran");
}

/// `run.json` records what the verdict was judged against (the golden's and the calibration's
/// digests, the resolved bands); after a re-bless, `compare RUN` says the golden changed and
/// shows the verdict at run time beside the new one.
#[test]
fn compare_after_a_rebless_says_the_golden_changed_with_both_verdicts() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let dst = copy_smoke_golden(&golden);
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(args)
            .arg("--golden")
            .arg(&golden)
            .current_dir(repo())
            .env("CI", "true")
            .output()
            .unwrap()
    };
    let out = tmp.path().join("reports");
    let o = cli(&[
        "run",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
        smoke().to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = out.join("mock-gsm8k-grpo/latest");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let sha = m["judged_against"]["golden"].as_str().unwrap_or_default();
    assert_eq!(sha.len(), 64, "{m}");
    let compare = || cli(&["compare", dir.to_str().unwrap()]);
    let same = compare();
    assert_eq!(same.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&same.stdout).contains("another golden"));
    // A re-bless: the header changes (here a comment), the series stays valid.
    let header = dst.join("golden.yaml");
    let mut text = std::fs::read_to_string(&header).unwrap();
    text.push_str("# re-blessed\n");
    std::fs::write(&header, text).unwrap();
    let changed = compare();
    let stdout = String::from_utf8_lossy(&changed.stdout);
    assert!(
        stdout.contains("judged against another golden than at run time")
            && stdout.contains(&format!("sha {} →", &sha[..12]))
            && stdout.contains("At run time: passed")
            && stdout.contains("(exit 0); now: passed"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(dir.join("compare/golden/report.md")).unwrap();
    assert!(md.contains("another golden than at run time"), "{md}");
}

/// `rlharness golden bless RUN`: the reviewed run itself becomes the pending golden (a rerun on
/// a nondeterministic backend would be another draw); a run made from another plan (a `--set`),
/// and any write under CI, are refused.
#[test]
fn golden_bless_writes_the_stored_run_as_the_pending_golden() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let bin = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"));
        c.current_dir(repo());
        c
    };
    let run = |out: &str, set: &[&str]| {
        let mut c = bin();
        c.args(["run", "--no-progress", "--golden"])
            .arg(&golden)
            .arg("--out")
            .arg(tmp.path().join(out))
            .arg(smoke())
            .env("CI", "true");
        for kv in set {
            c.args(["--set", kv]);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(4), "no golden yet");
        tmp.path().join(out).join("mock-gsm8k-grpo/latest")
    };
    let bless = |dir: &std::path::Path, ci: bool| {
        let mut c = bin();
        c.args(["golden", "--golden"])
            .arg(&golden)
            .arg("bless")
            .arg(dir);
        if ci {
            c.env("CI", "true");
        } else {
            c.env_remove("CI");
        }
        c.output().unwrap()
    };
    let plain = run("plain", &[]);
    let planted = run("planted", &["backend.efficiency.scale=0.9"]);
    assert!(!golden.join("mock-gsm8k-grpo").exists(), "CI never writes");

    let refused = bless(&planted, false);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("cannot bless") && err.contains("another plan"),
        "{err}"
    );
    let refused = bless(&plain, true);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("CI never writes goldens"));
    let missing = bless(&tmp.path().join("nowhere"), false);
    assert_eq!(missing.status.code(), Some(2));

    let ok = bless(&plain, false);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(golden.join("mock-gsm8k-grpo/cpu/metrics.csv.new").is_file());
    let accepted = bin()
        .args(["golden", "--golden"])
        .arg(&golden)
        .args(["accept", "mock-gsm8k-grpo"])
        .env_remove("CI")
        .output()
        .unwrap();
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    // The blessed run is its own golden: re-judged against it, it passes; the planted run fails.
    let judge = |dir: &std::path::Path| {
        bin()
            .args(["compare", "--golden"])
            .arg(&golden)
            .arg(dir)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(judge(&plain), Some(0));
    assert_eq!(judge(&planted), Some(1));
}

/// A recalibration that widens a band fails the verdict as `loosened:...:band` until it is
/// accepted with `golden accept --widen`, which says by how much; then it passes again.
#[test]
fn a_widening_recalibration_fails_until_accepted_with_widen() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = tmp.path().join("golden");
    let dst = golden.join("tiny-gsm8k-grpo/cpu");
    std::fs::create_dir_all(&dst).unwrap();
    for f in ["metrics.csv", "golden.yaml", "calibration.json"] {
        std::fs::copy(
            repo().join("golden/tiny-gsm8k-grpo/cpu").join(f),
            dst.join(f),
        )
        .unwrap();
    }
    // The scenarios beside the store: `--widen` records the bands of the rules in force now.
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(repo().join("scenarios"))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let scenario =
        rlharness::scenario::load_scenario(&repo().join("scenarios/tiny-gsm8k-grpo.yaml"), &[])
            .unwrap();
    let loosened = || {
        let g = rlharness::model::golden::GoldenStore::new(&golden)
            .load("tiny-gsm8k-grpo", "cpu")
            .unwrap()
            .unwrap();
        let record = rlharness::judge::RunRecord::completed(&g.table, &scenario.checks, 1);
        let v = rlharness::judge::judge_run(&record, Some(&g)).unwrap();
        v.rules
            .iter()
            .filter(|r| r.status != rlharness::judge::RuleStatus::Pass)
            .map(|r| r.rule.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(loosened(), Vec::<String>::new());
    // A noisier calibration: the reward's σ three times what was blessed.
    let path = dst.join("calibration.json");
    let mut cal: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for w in cal["windows"]["critic/rewards/mean"]
        .as_array_mut()
        .unwrap()
    {
        w["std"] = serde_json::json!(w["std"].as_f64().unwrap() * 3.0);
    }
    std::fs::write(&path, serde_json::to_string(&cal).unwrap()).unwrap();
    assert_eq!(loosened(), ["loosened:golden:critic/rewards/mean:band"]);
    let accept = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(["golden", "--golden"])
            .arg(&golden)
            .args(["accept", "--widen"])
            .args(args)
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let o = accept(&["tiny-gsm8k-grpo"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        said.contains("critic/rewards/mean steps 1..10: ±") && said.contains("(+"),
        "{said}"
    );
    assert_eq!(loosened(), Vec::<String>::new());
    // Nothing named: refused, nothing accepted silently.
    assert_eq!(accept(&[]).status.code(), Some(2));
}
