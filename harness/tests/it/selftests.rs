//! The self-tests as a set (`scenarios/selftest/`): every planted self-test has a
//! near-threshold twin and an unplanted control, and the control is the same scenario judged by
//! at least the same rules. Running them is `run.rs`'s (mock) and `flagship.rs`'s (torch) work;
//! this module checks that the set is complete, so that a plant cannot go without the run that
//! shows the judge passes the same scenario unplanted, nor a control quietly drop a rule.
//!
//! The files are compared as written (they are formatted alike): a self-test is split into its
//! top-level blocks; what may differ between a self-test and its control is its name, its
//! description, its tags (a control's are a superset), its plant, its rules (a control's
//! `checks` are a superset) and its expected verdict; every other block must be equal, line for
//! line.

use std::collections::BTreeMap;

use crate::common::repo;

/// One self-test file, split into what may differ and what must not.
#[derive(Debug)]
struct SelfTest {
    file: String,
    tags: Vec<String>,
    /// The `selftest:` block without its `plant:` line (seeds, golden).
    selftest_rest: Vec<String>,
    checks: Vec<String>,
    passes: bool,
    /// Every other top-level block, comments and blank lines left out.
    rest: BTreeMap<String, Vec<String>>,
}

fn parse(file: &str, text: &str) -> SelfTest {
    let mut blocks: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut key = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if !line.starts_with(' ') {
            key = line.split(':').next().unwrap().to_string();
        }
        blocks
            .entry(key.clone())
            .or_default()
            .push(line.to_string());
    }
    let mut take = |k: &str| blocks.remove(k).unwrap_or_default();
    let tags = take("tags")
        .concat()
        .trim_start_matches("tags:")
        .trim()
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|t| t.trim().to_string())
        .collect();
    let selftest_rest = take("selftest")
        .into_iter()
        .filter(|l| !l.trim_start().starts_with("plant:"))
        .collect();
    let checks = take("checks");
    let passes = take("expected_verdict")
        .iter()
        .any(|l| l.trim() == "outcome: passed");
    take("name");
    take("description");
    SelfTest {
        file: file.to_string(),
        tags,
        selftest_rest,
        checks,
        passes,
        rest: blocks,
    }
}

fn selftests() -> Vec<SelfTest> {
    let dir = repo().join("scenarios/selftest");
    let mut out: Vec<SelfTest> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            parse(&file, &std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
}

/// Why `control` is not a control of `planted` (empty when it is).
fn not_a_control_of(control: &SelfTest, planted: &SelfTest) -> Vec<String> {
    let mut why = Vec::new();
    if !control.passes {
        why.push("its expected outcome is not `passed`".to_string());
    }
    if control.rest != planted.rest {
        let differ: std::collections::BTreeSet<&String> = control
            .rest
            .keys()
            .chain(planted.rest.keys())
            .filter(|k| control.rest.get(*k) != planted.rest.get(*k))
            .collect();
        why.push(format!("the scenario differs in {differ:?}"));
    }
    if control.selftest_rest != planted.selftest_rest {
        why.push("its seeds or golden differ".to_string());
    }
    let missing: Vec<&String> = planted
        .checks
        .iter()
        .filter(|l| !control.checks.contains(l))
        .collect();
    if !missing.is_empty() {
        why.push(format!("it leaves out the rules {missing:?}"));
    }
    let tags: Vec<&String> = planted
        .tags
        .iter()
        .filter(|t| !control.tags.contains(t) && *t != "multi-seed")
        .collect();
    if !tags.is_empty() {
        why.push(format!("it lacks the tags {tags:?}"));
    }
    why
}

/// Every planted self-test has a near-threshold twin (`<name>-near.yaml`: the same scenario
/// and rules, a smaller plant, also caught) and a control (a self-test that plants nothing
/// and passes every rule the planted one judges with); no control leaves a rule out.
#[test]
fn every_planted_selftest_has_a_twin_and_a_control() {
    let all = selftests();
    let planted: Vec<&SelfTest> = all.iter().filter(|s| !s.passes).collect();
    let controls: Vec<&SelfTest> = all
        .iter()
        .filter(|s| s.passes && s.file.contains("control"))
        .collect();
    assert!(planted.len() >= 20, "{} planted self-tests", planted.len());
    let mut problems = Vec::new();
    for p in &planted {
        if !p.file.ends_with("-near.yaml") {
            let twin = p.file.replace(".yaml", "-near.yaml");
            match all.iter().find(|s| s.file == twin) {
                None => problems.push(format!("{}: no near-threshold twin {twin}", p.file)),
                Some(t) => {
                    if t.passes {
                        problems.push(format!("{twin}: a twin must be caught too"));
                    }
                    if t.rest != p.rest || t.checks != p.checks {
                        problems.push(format!("{twin}: not the same scenario and rules"));
                    }
                }
            }
        }
        let why: Vec<(String, Vec<String>)> = controls
            .iter()
            .map(|c| (c.file.clone(), not_a_control_of(c, p)))
            .collect();
        if !why.iter().any(|(_, w)| w.is_empty()) {
            problems.push(format!("{}: no control; the nearest: {why:?}", p.file));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The check itself can fail: a control that drops a rule, or plants another seed, is none.
    let control = all.iter().find(|s| s.file == "mock-control.yaml").unwrap();
    let planted = all.iter().find(|s| s.file == "mock-mfu-drop.yaml").unwrap();
    assert!(not_a_control_of(control, planted).is_empty());
    let text =
        std::fs::read_to_string(repo().join("scenarios/selftest/mock-control.yaml")).unwrap();
    for (from, to, why) in [
        (
            "    perf/mfu/actor: {rel: 0.02}\n",
            "",
            "leaves out the rules",
        ),
        (
            "seed: 1\n",
            "seed: 2\n",
            "the scenario differs in {\"seed\"}",
        ),
        ("outcome: passed", "outcome: regressed", "not `passed`"),
    ] {
        assert!(text.contains(from), "{from}");
        let broken = parse("broken.yaml", &text.replace(from, to));
        let w = not_a_control_of(&broken, planted);
        assert!(w.iter().any(|m| m.contains(why)), "{from:?}: {w:?}");
    }
}

/// The mock rows of docs/verdicts.md's self-test table are what `ci/selftest-figures.py` makes
/// of the mock self-tests' `verdict.json` now (the mock simulates time, so its figures are the
/// same on any host): a change to the judge or the mock that moves a figure fails here until
/// the table is regenerated.
#[test]
fn the_docs_selftest_table_is_what_the_runs_give() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files: Vec<String> = selftests()
        .into_iter()
        .map(|s| s.file)
        .filter(|f| f.starts_with("mock-"))
        .map(|f| format!("scenarios/selftest/{f}"))
        .collect();
    files.sort();
    let args: Vec<&str> = files.iter().map(String::as_str).collect();
    let status = crate::common::rlharness_run(&args, tmp.path())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let out = std::process::Command::new("python3")
        .current_dir(repo())
        .arg("ci/selftest-figures.py")
        .arg(tmp.path())
        .arg("--print")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = String::from_utf8(out.stdout).unwrap();
    assert_eq!(rows.lines().count(), files.len(), "{rows}");
    let docs = std::fs::read_to_string(repo().join("docs/verdicts.md")).unwrap();
    let stale: Vec<&str> = rows.lines().filter(|r| !docs.contains(r)).collect();
    assert!(
        stale.is_empty(),
        "docs/verdicts.md is stale; regenerate it (`python3 ci/selftest-figures.py RUNS`). \
         The rows now: {stale:#?}"
    );
}
