//! `rlharness golden audit`: every shipped calibrated scenario's verdict within its false-alarm
//! budget, every gating rule able to fail; and what `check` says of a calibration too small.

use crate::common::{copy_dir, repo};

/// The scenario files under `scenarios/` with a calibration in `golden/`, by scenario name.
fn calibrated_scenarios() -> Vec<(String, std::path::PathBuf)> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("golden"))
        .unwrap()
        .flatten()
        .filter(|d| {
            std::fs::read_dir(d.path())
                .into_iter()
                .flatten()
                .flatten()
                .any(|hw| hw.path().join("calibration.json").is_file())
        })
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut files = Vec::new();
    let mut stack = vec![repo().join("scenarios")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                let text = std::fs::read_to_string(&p).unwrap();
                if let Some(n) = text.lines().find_map(|l| l.strip_prefix("name: ")) {
                    if names.iter().any(|x| x == n.trim()) {
                        files.push((n.trim().to_string(), p));
                    }
                }
            }
        }
    }
    files.sort();
    assert_eq!(
        files.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        names,
        "every calibration has its scenario"
    );
    files
}

/// What CI requires of each shipped calibration: the simulated false-alarm rate of the whole
/// verdict (its 95 % interval's lower end) at or below the scenario's budget, and no gating
/// rule that cannot fail.
#[test]
fn every_shipped_calibrated_scenario_passes_its_audit() {
    let scenarios = calibrated_scenarios();
    assert!(scenarios.len() >= 4, "{scenarios:?}");
    for (name, file) in scenarios {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(["golden", "audit"])
            .arg(&file)
            .args(["--draws", "600", "--power-draws", "20", "--format", "json"])
            .current_dir(repo())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let a: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{name}: {e}: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(out.status.code(), Some(0), "{name}: {:#}", a["problems"]);
        let lo = a["false_alarm_ci"][0].as_f64().unwrap();
        assert!(lo <= a["alpha_run"].as_f64().unwrap(), "{name}: {a:#}");
        for r in a["rules"].as_array().unwrap() {
            assert_eq!(r["cannot_fail"], false, "{name}: {r}");
        }
        // Its verdicts state the audited rate: the stored audit is this golden's, calibration's
        // and checks'.
        assert_eq!(
            a["stored"],
            "holds",
            "{name}: golden/{name}/*/audit.json is missing or stale: run `rlharness golden \
             audit {} --save` (and `--seeds 5 --save`)",
            file.strip_prefix(repo()).unwrap_or(&file).display()
        );
        println!(
            "{name}: {} of {} ({:.2}%), budget {}",
            a["false_alarms"],
            a["draws"],
            100.0 * a["false_alarm_rate"].as_f64().unwrap(),
            a["alpha_run"]
        );
    }
}

/// A rule that cannot fail (its budget as large as its windows) fails the audit (exit 1,
/// named), and its JSON says so.
#[test]
fn an_audit_names_a_rule_that_cannot_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let scenarios = tmp.path().join("scenarios");
    std::fs::create_dir_all(scenarios.join("smoke")).unwrap();
    for d in ["backends", "defaults"] {
        copy_dir(&repo().join("scenarios").join(d), &scenarios.join(d));
    }
    let text = std::fs::read_to_string(repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml"))
        .unwrap()
        .replace(
            "    critic/rewards/mean: {window: 5, abs: 0.05}",
            "    critic/rewards/mean: {window: 5, calibrated: {}}\n    actor/entropy: {window: 5, abs: 0.01, budget: 4}",
        );
    let file = scenarios.join("smoke/mock-gsm8k-grpo.yaml");
    std::fs::write(&file, text).unwrap();
    let bin = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(args)
            .current_dir(tmp.path())
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let f = file.to_str().unwrap();
    bin(&["run", f, "--update-golden", "-q", "--out", "reports"]);
    assert!(bin(&["golden", "accept"]).status.success());
    let cal = bin(&[
        "golden",
        "calibrate",
        f,
        "--seeds",
        "1..12",
        "--jobs",
        "2",
        "--out",
        "cal",
    ]);
    assert!(
        cal.status.success(),
        "{}",
        String::from_utf8_lossy(&cal.stderr)
    );
    // Twelve runs for the reward's and the stability rules' windows: too few, and said so.
    assert!(
        String::from_utf8_lossy(&cal.stderr).contains("cannot gate"),
        "{}",
        String::from_utf8_lossy(&cal.stderr)
    );
    // The same calibration again from the runs it left (`--from-runs`): nothing runs, every
    // statistic is the same; a run that did not complete is left out, named.
    let cal_file = tmp
        .path()
        .join("golden/mock-gsm8k-grpo/cpu/calibration.json");
    let stats = |text: &str| {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        (v["seeds"].clone(), v["steps"].clone(), v["windows"].clone())
    };
    let first = std::fs::read_to_string(&cal_file).unwrap();
    let again = bin(&["golden", "calibrate", f, "--from-runs", "cal"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        stats(&first),
        stats(&std::fs::read_to_string(&cal_file).unwrap())
    );
    let runs = tmp.path().join("cal/mock-gsm8k-grpo/calibrations");
    let one = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| !p.is_symlink() && p.join("run.json").is_file())
        .unwrap();
    let manifest = one.join("run.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("\"status\": \"completed\"", "\"status\": \"interrupted\""),
    )
    .unwrap();
    let partial = bin(&["golden", "calibrate", f, "--from-runs", "cal"]);
    let said = String::from_utf8_lossy(&partial.stderr);
    assert!(partial.status.success(), "{said}");
    assert!(
        said.contains("left out") && said.contains("did not complete"),
        "{said}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cal_file).unwrap()).unwrap();
    assert_eq!(v["runs"], 11, "{}", v["seeds"]);
    std::fs::write(&manifest, text).unwrap();
    assert!(bin(&["golden", "calibrate", f, "--from-runs", "cal"])
        .status
        .success());
    let a = bin(&[
        "golden",
        "audit",
        f,
        "--draws",
        "200",
        "--power-draws",
        "10",
    ]);
    let out = String::from_utf8_lossy(&a.stdout);
    assert_eq!(a.status.code(), Some(1), "{out}");
    assert!(out.contains("`golden:actor/entropy` cannot fail"), "{out}");
    assert!(out.contains("CANNOT FAIL"), "{out}");
    // `check` refuses the rule that cannot fail (exit 2, at its line), and says at the reward
    // rule's line that the calibration is too small (a warning).
    let c = bin(&["check", f]);
    let said = String::from_utf8_lossy(&c.stdout);
    assert_eq!(c.status.code(), Some(2), "{said}");
    assert!(
        said.contains(
            "checks.golden.actor/entropy: `golden:actor/entropy` cannot fail: its budget 4"
        ),
        "{said}"
    );
    assert!(
        said.lines().any(|l| l.starts_with("warning: ")
            && l.contains("checks.golden.critic/rewards/mean")
            && l.contains("calibrate >= ")),
        "{said}"
    );

    // The verdict states its budget; with `golden audit --save`, the audited rate too, as long
    // as the golden, the calibration and the checks are those the audit was made for.
    let budget_of_a_run = |out: &str| -> serde_json::Value {
        bin(&["run", f, "-q", "--out", out]);
        let runs = tmp.path().join(out).join("mock-gsm8k-grpo");
        let run = std::fs::read_dir(&runs)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("verdict.json")).unwrap())
                .unwrap();
        let md = std::fs::read_to_string(run.join("report.md")).unwrap();
        assert!(md.contains("**False-alarm budget:** α_run "), "{md}");
        v["budget"].clone()
    };
    let b = budget_of_a_run("before");
    assert_eq!(b["alpha_run"], 0.01, "{b}");
    assert!(b["tests"].as_u64().unwrap() >= 4, "{b}");
    assert!(
        b["unaudited"].as_str().unwrap().contains("not audited"),
        "{b}"
    );
    let saved = bin(&[
        "golden",
        "audit",
        f,
        "--draws",
        "150",
        "--power-draws",
        "10",
        "--save",
    ]);
    assert_eq!(
        saved.status.code(),
        Some(1),
        "the rule that cannot fail: {}{}",
        String::from_utf8_lossy(&saved.stdout),
        String::from_utf8_lossy(&saved.stderr)
    );
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("golden/mock-gsm8k-grpo/cpu/audit.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["audits"][0]["draws"], 150, "{record}");
    let b = budget_of_a_run("after");
    assert_eq!(b["audit"]["draws"], 150, "{b}");
    assert_eq!(b["audit"]["seeds"], 1, "{b}");
    assert!(b.get("unaudited").is_none(), "{b}");
    // Other checks than those audited: said, not stated.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("checks:\n", "checks:\n  alpha: 0.02\n")).unwrap();
    let b = budget_of_a_run("changed");
    assert_eq!(b["alpha_run"], 0.02, "{b}");
    assert!(b.get("audit").is_none(), "{b}");
    assert!(
        b["unaudited"]
            .as_str()
            .unwrap()
            .contains("another golden, calibration or checks"),
        "{b}"
    );
}

/// Bad input to the audit: a scenario whose golden has no calibration, and `--draws 0`, are
/// invalid input (exit 2) with the command to run or the flag named.
#[test]
fn an_audit_without_a_calibration_or_draws_is_invalid_input() {
    let audit = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(["golden", "audit", "scenarios/smoke/mock-gsm8k-grpo.yaml"])
            .args(args)
            .current_dir(repo())
            .output()
            .unwrap()
    };
    let o = audit(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("has no calibration"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = audit(&["--draws", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--draws"));
}
