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
//! line. A control's plant must change nothing the run uses (checked through the library's own
//! loader and plan), and a near twin caught by a band or a multi-seed test declares how near its
//! threshold it lands (`expected_verdict.margin`), which the judge then holds it to.

use std::collections::BTreeMap;
use std::path::Path;

use rlharness::run::plan::RunPlan;
use rlharness::scenario::load_scenario;
use serde_json::Value;

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
/// and passes every rule the planted one judges with); no control leaves a rule out; a twin
/// caught by a band or a multi-seed test declares its margin (`expected_verdict.margin`).
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
                    if let Some(why) = margin_missing(&declared_verdict(&t.file)) {
                        problems.push(format!("{twin}: {why}"));
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
    // A twin caught by a band without a margin is refused; one caught by the exact lane and a
    // presence rule only needs none.
    let mut twin = declared_verdict("mock-mfu-drop-near.yaml");
    assert_eq!(margin_missing(&twin), None);
    twin.as_object_mut().unwrap().remove("margin");
    let why = margin_missing(&twin).expect("a band twin without a margin");
    assert!(why.contains("`golden:perf/mfu/actor`"), "{why}");
    assert_eq!(
        margin_missing(&declared_verdict("mock-missing-at-steps-near.yaml")),
        None
    );
}

/// A self-test's `expected_verdict` as the library's loader reads it, in JSON.
fn declared_verdict(file: &str) -> Value {
    let path = repo().join("scenarios/selftest").join(file);
    let scenario = load_scenario(&path, &[]).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_json::to_value(&scenario.expected_verdict).unwrap()
}

/// The kinds of rule with a tolerance a near twin's margin is measured in: a band, or the
/// multi-seed distribution test.
const MARGIN_KINDS: &[&str] = &["golden:", "stability:", "seeds:"];

/// Why a near twin's declared verdict lacks the margin it needs: it is caught by a band or a
/// multi-seed test but declares no `margin` (the spec checks that a declared one names such a
/// rule among `rules`). A twin caught by the exact lane or a presence rule only needs none: their
/// threshold is one bit, one missing value.
fn margin_missing(expected: &Value) -> Option<String> {
    let banded: Vec<&str> = expected["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|r| MARGIN_KINDS.iter().any(|k| r.starts_with(k)))
        .collect();
    (!banded.is_empty() && expected.get("margin").is_none_or(Value::is_null)).then(|| {
        format!(
            "caught by `{}` but declares no `expected_verdict.margin`: how far past its \
             threshold the twin may fail",
            banded.join("`, `")
        )
    })
}

/// What applying `plant` to the scenario at `file` changes in what its run uses, as the runner
/// plants a self-test (the same file loaded with the plant as `--set` overrides) and resolved by
/// the library's own loader and plan: each top-level value of the resolved plan (the values its
/// `plan_hash` covers: driver, backend, checks, seed, steps, ...) and each config leaf that
/// differs, by key. A plant of the self-test block itself (its seeds, its golden) counts too.
/// Empty when the plant changes nothing.
fn what_the_plant_changes(file: &Path, plant: &[String]) -> Vec<String> {
    let plan = |set: &[String]| {
        let scenario =
            load_scenario(file, set).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        RunPlan::new(scenario, None, None).unwrap()
    };
    let (written, planted) = (plan(&[]), plan(plant));
    let mut changed: Vec<String> = plant
        .iter()
        .filter(|p| p.trim_start_matches('+').starts_with("selftest"))
        .cloned()
        .collect();
    let (a, b) = (written.to_json(), planted.to_json());
    // Where the values came from (the plant is an override) is not what the run uses.
    let provenance = [
        "path",
        "origins",
        "sources",
        "overrides",
        "scenario_hash",
        "plan_hash",
        "config",
    ];
    let keys: std::collections::BTreeSet<&String> = a
        .as_object()
        .unwrap()
        .keys()
        .chain(b.as_object().unwrap().keys())
        .collect();
    for key in keys {
        if !provenance.contains(&key.as_str()) && a.get(key) != b.get(key) {
            changed.push(key.clone());
        }
    }
    let leaves: std::collections::BTreeSet<&String> = a["config"]
        .as_object()
        .unwrap()
        .keys()
        .chain(b["config"].as_object().unwrap().keys())
        .collect();
    for leaf in leaves {
        let value = |v: &Value| v["config"].get(leaf).map(|e| e["value"].clone());
        if value(&a) != value(&b) {
            changed.push(format!("config.{leaf}"));
        }
    }
    if changed.is_empty() && written.plan_hash != planted.plan_hash {
        changed.push("the plan's hash (a resolved value not shown above)".into());
    }
    changed
}

/// Every control's plant changes nothing: the scenario loaded as written and with its plant
/// resolve to the same config and the same values everywhere else a run reads (the plan's hash
/// over them included). A control whose plant changed a value would be a planted self-test that
/// is expected to pass.
#[test]
fn a_control_plants_nothing() {
    let dir = repo().join("scenarios/selftest");
    let controls: Vec<SelfTest> = selftests()
        .into_iter()
        .filter(|s| s.passes && s.file.contains("control"))
        .collect();
    assert!(controls.len() >= 4, "{controls:?}");
    let mut problems = Vec::new();
    for c in &controls {
        let path = dir.join(&c.file);
        let plant = load_scenario(&path, &[]).unwrap().selftest_plant().to_vec();
        assert!(!plant.is_empty(), "{}: plants nothing at all", c.file);
        let changed = what_the_plant_changes(&path, &plant);
        if !changed.is_empty() {
            problems.push(format!(
                "{}: its plant {plant:?} changes {changed:?}",
                c.file
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The check can fail: a plant that changes a value, in the config or outside it, is named.
    for (file, plant, change) in [
        (
            "mock-control.yaml",
            "backend.efficiency.scale=0.95",
            "backend",
        ),
        (
            "flagship-control.yaml",
            "config.actor_rollout_ref.actor.optim.lr=2.001e-3",
            "config.actor_rollout_ref.actor.optim.lr",
        ),
        (
            "flagship-seeds-control.yaml",
            "driver.scorer.score=0.93",
            "driver",
        ),
        ("mock-control.yaml", "steps=9", "steps"),
        (
            "flagship-seeds-control.yaml",
            "selftest.seeds=101..102",
            "selftest.seeds=101..102",
        ),
    ] {
        let changed = what_the_plant_changes(&dir.join(file), &[plant.to_string()]);
        assert!(
            changed.iter().any(|c| c == change),
            "{file} with {plant}: {changed:?}"
        );
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
