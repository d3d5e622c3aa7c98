//! `check` as strict as `run`, both ways: each bad input goes through both commands, which
//! must give the same exit code and the same message (from one function,
//! `app::preflight`); `run` refuses before anything starts.

use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::common::{repo, scenarios_root_in, text};

/// One row: what it breaks, how, the exit code both commands must give, and what the error
/// must say (file, line and key included).
struct Row {
    name: &'static str,
    breaks: fn(&Path),
    code: i32,
    says: &'static [&'static str],
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{}: no {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

fn golden_dir(dir: &Path) -> std::path::PathBuf {
    dir.join("golden/mock-gsm8k-grpo/cpu")
}

/// The golden's `metrics_sha256` made to match its series again (a hand edit that kept the
/// header consistent).
fn reseal(dir: &Path) {
    let g = golden_dir(dir);
    let csv = std::fs::read(g.join("metrics.csv")).unwrap();
    let sha: String = Sha256::digest(
        csv.iter()
            .copied()
            .filter(|b| *b != b'\r')
            .collect::<Vec<u8>>(),
    )
    .iter()
    .map(|b| format!("{b:02x}"))
    .collect();
    let header = std::fs::read_to_string(g.join("golden.yaml")).unwrap();
    let old = header
        .lines()
        .find(|l| l.trim_start().starts_with("metrics_sha256:"))
        .expect("a metrics_sha256 line")
        .to_string();
    let indent = &old[..old.len() - old.trim_start().len()];
    std::fs::write(
        g.join("golden.yaml"),
        header.replacen(&old, &format!("{indent}metrics_sha256: {sha}"), 1),
    )
    .unwrap();
}

const ROWS: &[Row] = &[
    Row {
        name: "valid",
        breaks: |_| {},
        code: 0,
        says: &[],
    },
    Row {
        name: "golden series edited by hand",
        breaks: |d| edit(&golden_dir(d).join("metrics.csv"), "\n1,", "\n1,9"),
        code: 2,
        says: &[
            "mock.yaml:",
            "name: its golden mock-gsm8k-grpo/cpu does not read",
            "metrics.csv does not match golden.yaml",
        ],
    },
    Row {
        name: "golden cell that is not a number",
        breaks: |d| {
            let csv = golden_dir(d).join("metrics.csv");
            let text = std::fs::read_to_string(&csv).unwrap();
            let row = text.lines().nth(2).unwrap().to_string();
            let (step, rest) = row.split_once(',').unwrap();
            let (_, tail) = rest.split_once(',').unwrap();
            edit(&csv, &row, &format!("{step},abc,{tail}"));
            reseal(d);
        },
        code: 2,
        says: &["does not read", "abc"],
    },
    Row {
        name: "golden header that is not YAML",
        breaks: |d| {
            let h = golden_dir(d).join("golden.yaml");
            let text = std::fs::read_to_string(&h).unwrap();
            std::fs::write(&h, format!("{text}  : [broken\n")).unwrap();
        },
        code: 2,
        says: &["does not read", "invalid golden header"],
    },
    Row {
        name: "calibration that is not JSON",
        breaks: |d| std::fs::write(golden_dir(d).join("calibration.json"), "{not json").unwrap(),
        code: 2,
        says: &["does not read", "calibration.json"],
    },
    Row {
        name: "a misspelt metric in an expectation",
        breaks: |d| {
            edit(
                &d.join("scenarios/mock.yaml"),
                "all(actor/grad_norm, finite)",
                "all(actor/grad_nrom, finite)",
            )
        },
        code: 2,
        says: &[
            "mock.yaml:34:",
            "checks.expect: no metric `actor/grad_nrom`",
            "did you mean `actor/grad_norm`?",
        ],
    },
    Row {
        name: "a misspelt metric in a golden rule",
        breaks: |d| {
            edit(
                &d.join("scenarios/mock.yaml"),
                "    critic/rewards/mean: {window: 5",
                "    critic/rewards/maen: {window: 5",
            )
        },
        code: 2,
        says: &[
            "checks.golden.critic/rewards/maen",
            "did you mean `critic/rewards/",
        ],
    },
    Row {
        name: "a trainer program that does not exist",
        breaks: |d| {
            edit(
                &d.join("scenarios/mock.yaml"),
                "driver:\n  kind: builtin\n  task: {name: arith, max_operand: 99, ops: [\"+\", \"-\"]}\n  scorer: {name: gsm8k, mode: strict}\n",
                "driver:\n  kind: command\n  command: [no-such-trainer-anywhere, --flag]\n  metrics_from: verl-jsonl\n",
            )
        },
        code: 2,
        says: &[
            "mock.yaml:13:",
            "driver.command: no program `no-such-trainer-anywhere` on PATH",
        ],
    },
    Row {
        name: "a driver.env value of the wrong type",
        breaks: |d| {
            edit(
                &d.join("scenarios/mock.yaml"),
                "driver:\n  kind: builtin\n  task: {name: arith, max_operand: 99, ops: [\"+\", \"-\"]}\n  scorer: {name: gsm8k, mode: strict}\n",
                "driver:\n  kind: command\n  command: [python3, -c, \"print(1)\"]\n  metrics_from: verl-jsonl\n  env:\n    OK: 1\n    BAD: [1, 2]\n",
            )
        },
        code: 2,
        says: &["mock.yaml:17:", "driver.env.BAD: invalid type: sequence"],
    },
];

/// A project in `dir`: the scenario layers, the shipped mock smoke as `scenarios/mock.yaml`,
/// and its golden (the golden store beside `scenarios/`, as `run` and `check` find it).
fn project(dir: &Path) {
    let root = scenarios_root_in(dir);
    std::fs::copy(
        repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml"),
        root.join("mock.yaml"),
    )
    .unwrap();
    let g = golden_dir(dir);
    std::fs::create_dir_all(&g).unwrap();
    for f in ["golden.yaml", "metrics.csv"] {
        std::fs::copy(repo().join("golden/mock-gsm8k-grpo/cpu").join(f), g.join(f)).unwrap();
    }
}

fn rlharness(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(args)
        .current_dir(dir)
        .env("CI", "true")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    (o.status.code(), text(&o))
}

#[test]
fn check_and_run_give_the_same_exit_code_and_message_on_every_bad_input() {
    let mut wrong = Vec::new();
    for row in ROWS {
        let tmp = tempfile::tempdir().unwrap();
        project(tmp.path());
        (row.breaks)(tmp.path());
        let (check, check_text) = rlharness(tmp.path(), &["check", "scenarios/mock.yaml"]);
        let (run, run_text) = rlharness(
            tmp.path(),
            &[
                "run",
                "scenarios/mock.yaml",
                "--no-progress",
                "--out",
                "out",
            ],
        );
        if (check, run) != (Some(row.code), Some(row.code)) {
            wrong.push(format!(
                "{}: check {check:?}, run {run:?}, want {}\n--- check:\n{check_text}\n--- run:\n{run_text}",
                row.name, row.code
            ));
            continue;
        }
        for (cmd, t) in [("check", &check_text), ("run", &run_text)] {
            let missing: Vec<&&str> = row.says.iter().filter(|s| !t.contains(**s)).collect();
            if !missing.is_empty() {
                wrong.push(format!(
                    "{}: {cmd} does not say {missing:?}:\n{t}",
                    row.name
                ));
            }
        }
        if row.code == 2 {
            // Refused before anything started: no run directory.
            let runs = tmp.path().join("out/mock-gsm8k-grpo");
            let made = std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
            if made > 0 {
                wrong.push(format!(
                    "{}: run made a run directory under {}",
                    row.name,
                    runs.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// `golden accept` refuses a pending golden whose rule reads a metric its run never had: with
/// no golden yet nothing can tell the typo, and the blessed rule would only ever fail as
/// missing.
#[test]
fn golden_accept_refuses_a_rule_on_a_metric_the_run_never_had() {
    let tmp = tempfile::tempdir().unwrap();
    project(tmp.path());
    std::fs::remove_dir_all(tmp.path().join("golden/mock-gsm8k-grpo")).unwrap();
    edit(
        &tmp.path().join("scenarios/mock.yaml"),
        "    actor/lr: {rel: 1.0e-6}\n",
        "    actor/lr: {rel: 1.0e-6}\n    actor/no_such_metric: {rel: 0.1}\n",
    );
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(args)
            .current_dir(tmp.path())
            .env_remove("CI")
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        (o.status.code(), text(&o))
    };
    let (code, t) = run(&[
        "run",
        "scenarios/mock.yaml",
        "--no-progress",
        "--out",
        "out",
    ]);
    assert_eq!(code, Some(4), "a pending golden: {t}");
    let (code, t) = run(&["golden", "accept", "mock-gsm8k-grpo"]);
    assert_eq!(code, Some(2), "{t}");
    crate::common::says(&t, &["not accepted", "`golden:actor/no_such_metric`"]);
    assert!(
        !tmp.path()
            .join("golden/mock-gsm8k-grpo/cpu/golden.yaml")
            .exists(),
        "nothing accepted"
    );
}
