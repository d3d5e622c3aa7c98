//! What `check`, `list` and `lint` say of scenario files, discovery, and the RunPlan's digests.

use super::*;

#[test]
fn run_plan_hashes_origins_and_differing_knobs() {
    let r = Root::new();
    let p = r.scenario(
        "s.yaml",
        "  actor_rollout_ref:\n    rollout:\n      n: 8\n    actor:\n      ppo_epochs: 1\n  remote_backend:\n    include: backends/arctic.yaml\n",
    );
    let s = load(&p, &[]).unwrap();
    let plan = RunPlan::new(s.clone(), Some(9), None).unwrap();
    assert_eq!(plan.scenario.seed, 9);
    assert_eq!(plan.origins["seed"].to_string(), "--set seed=9");
    assert_eq!(plan.scenario_hash.len(), 64);
    let j = plan.to_json();
    assert_eq!(j["seed"], json!(9));
    assert_eq!(j["origins"]["seed"], json!("--set seed=9"));
    assert_eq!(
        j["config"]["actor_rollout_ref.rollout.n"]["value"],
        json!(8)
    );
    assert_eq!(
        j["config"]["actor_rollout_ref.rollout.n"]["default"],
        json!(1)
    );
    assert_eq!(
        j["config"]["actor_rollout_ref.rollout.n"]["origin"],
        json!(format!("{}:10:10", p.display()))
    );
    let diff = plan.knobs_differing_from_defaults();
    let paths: Vec<&str> = diff.iter().map(|d| d.0.as_str()).collect();
    // ppo_epochs is set to its default value: not a difference. max_rollouts follows n.
    assert_eq!(
        paths,
        vec![
            "actor_rollout_ref.rollout.n",
            "remote_backend.train.zorro_train.max_rollouts"
        ],
        "{diff:?}"
    );
    assert_eq!(diff[0].1, json!(1));
    assert_eq!(diff[0].2, json!(8));

    // Same values from a different file layout: same plan hash, other scenario hash.
    let same = load(&p, &[]).unwrap();
    assert_eq!(
        RunPlan::new(same, Some(9), None).unwrap().plan_hash,
        plan.plan_hash
    );
    let changed = load(&p, &["config.actor_rollout_ref.rollout.n=4"]).unwrap();
    assert_ne!(
        RunPlan::new(changed, Some(9), None).unwrap().plan_hash,
        plan.plan_hash
    );
    let p2 = r.write(
        "s2.yaml",
        &format!(
            "# a comment changes the file, not the plan\n{}",
            std::fs::read_to_string(&p).unwrap()
        ),
    );
    let moved = RunPlan::new(load(&p2, &[]).unwrap(), Some(9), None).unwrap();
    assert_eq!(moved.plan_hash, plan.plan_hash);
    assert_ne!(moved.scenario_hash, plan.scenario_hash);
}

#[test]
fn discover_skips_layer_folders() {
    let r = Root::new();
    r.scenario("a.yaml", "  {}\n");
    r.scenario("sub/b.yml", "  {}\n");
    r.write("notes.txt", "x");
    r.write("backends/other.yaml", "# x\na: 1\n");
    let found = discover(std::slice::from_ref(&r.root)).unwrap();
    let rel: Vec<String> = found
        .iter()
        .map(|p| p.strip_prefix(&r.root).unwrap().display().to_string())
        .collect();
    assert_eq!(rel, vec!["a.yaml", "sub/b.yml"]);
    let e = discover(&[r.root.join("nope")]).unwrap_err();
    assert!(e.message.contains("no such scenario"), "{e}");
}

#[test]
fn shipped_layer_files_pass_the_lint() {
    for rel in ["defaults/verl.yaml", "backends/arctic.yaml"] {
        let issues = lint_file(&shipped(rel));
        assert!(issues.is_empty(), "{rel}: {issues:?}");
    }
}

#[test]
fn check_reports_scenario_errors_and_lint_issues() {
    let r = Root::new();
    r.scenario("good.yaml", "  data:\n    train_batch_size: 8\n");
    r.scenario("bad.yaml", "  data:\n    train_batch_sise: 8\n");
    r.write("backends/sloppy.yaml", "# A.\na: 1  # inline\nb: 2\n");
    let outcome = check(std::slice::from_ref(&r.root));
    assert!(!outcome.is_ok());
    assert_eq!(outcome.error_count(), 4, "{}", render_check(&outcome));
    let text = render_check(&outcome);
    let bad = r.root.join("bad.yaml");
    assert!(
        text.contains(&format!(
            "error: {}:9:5: config.data.train_batch_sise: unknown key",
            bad.display()
        )),
        "{text}"
    );
    let sloppy = r.root.join("backends/sloppy.yaml");
    assert!(
        text.contains(&format!("error: {}:2: inline comment", sloppy.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "error: {}:2: field `a` must be followed by a blank line",
            sloppy.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "error: {}:3: field `b` has no comment",
            sloppy.display()
        )),
        "{text}"
    );
    assert!(
        text.trim_end()
            .ends_with("4 errors in 2 files (2 scenarios and 3 backend/defaults files checked)"),
        "{text}"
    );
    let lint_count = outcome
        .files
        .iter()
        .flat_map(|f| &f.errors)
        .filter(|d| matches!(d, Diagnostic::Lint(_)))
        .count();
    assert_eq!(lint_count, 3);

    std::fs::remove_file(r.root.join("bad.yaml")).unwrap();
    std::fs::remove_file(r.root.join("backends/sloppy.yaml")).unwrap();
    let outcome = check(std::slice::from_ref(&r.root));
    assert!(outcome.is_ok(), "{}", render_check(&outcome));
    assert_eq!(
        render_check(&outcome),
        "ok: 1 scenario and 2 backend/defaults files valid\n"
    );
}

#[test]
fn list_shows_runnability() {
    let r = Root::new();
    r.scenario("plain.yaml", "  {}\n");
    r.write(
        "needs.yaml",
        "name: needs\ndescription: d\ntags: [gpu]\nrequires: {commands: [definitely-not-a-command-rlh]}\nseed: 1\nsteps: 1\ndriver: {kind: builtin}\nbackend: {kind: mock}\n",
    );
    r.write("broken.yaml", "name: [\n");
    let entries = list(&r.root);
    assert_eq!(entries.len(), 3);
    let by_file = |f: &str| entries.iter().find(|e| e.path.ends_with(f)).unwrap();
    assert_eq!(by_file("plain.yaml").runnable, Ok(()));
    assert_eq!(
        by_file("needs.yaml").runnable,
        Err(vec![
            "needs command `definitely-not-a-command-rlh` on PATH".to_string()
        ])
    );
    assert!(by_file("broken.yaml").runnable.is_err());
    let table = render_list(&entries);
    assert!(table.starts_with("SCENARIO"), "{table}");
    assert!(
        table.contains("command definitely-not-a-command-rlh"),
        "{table}"
    );
}

#[test]
fn shipped_scenarios_are_valid() {
    let root = shipped("");
    let outcome = check(&[root]);
    assert!(outcome.is_ok(), "{}", render_check(&outcome));
}

/// Users keep scenarios in their own repositories: a minimal scenario in a folder with no
/// `defaults/verl.yaml` is layered over the verl defaults built into the binary.
#[test]
fn a_scenario_outside_the_scenarios_tree_uses_the_built_in_verl_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mine.yaml");
    std::fs::write(
        &file,
        "name: mine\ndescription: d\nseed: 1\nsteps: 1\ndriver: {kind: builtin}\nbackend: {kind: mock}\nconfig:\n  data:\n    train_batch_size: 8\n",
    )
    .unwrap();
    let s = load(&file, &[]).unwrap_or_else(|e| panic!("{e}"));
    let epochs = s
        .config
        .get("actor_rollout_ref.actor.ppo_epochs")
        .expect("a verl default");
    assert!(
        matches!(&epochs.origin, Origin::Default { path, .. } if path.ends_with("defaults/verl.yaml")),
        "{:?}",
        epochs.origin
    );
    assert_eq!(
        s.config.get("data.train_batch_size").unwrap().value,
        json!(8)
    );
    assert!(check(&[file]).is_ok());
}

#[test]
fn a_selftest_needs_a_plant_and_a_declared_verdict() {
    let r = Root::new();
    let head = "name: t\ndescription: d\nseed: 1\nsteps: 2\ndriver: {kind: builtin}\nbackend: {kind: mock}\n";
    let p = r.write(
        "empty.yaml",
        &format!("{head}selftest: {{plant: []}}\nexpected_verdict: {{outcome: regressed}}\n"),
    );
    fails_at(&p, &[], (7, None), "selftest.plant", "at least one change");
    let p = r.write(
        "bad.yaml",
        &format!("{head}selftest: {{plant: [lr]}}\nexpected_verdict: {{outcome: regressed}}\n"),
    );
    let e = only_error(load(&p, &[]));
    assert!(
        e.message.contains("`lr` is not a `key=value` override"),
        "{e}"
    );
    let p = r.write(
        "undeclared.yaml",
        &format!("{head}selftest: {{plant: [seed=2]}}\n"),
    );
    fails_at(
        &p,
        &[],
        (7, None),
        "selftest",
        "must declare the verdict it expects",
    );
    // A declared verdict that does not parse is declared: its own error is the only one, at
    // the line and key of the entry at fault.
    let verdict = "expected_verdict:\n  outcome: regressed\n  rules: [\"seeds:m\"]\n";
    for (file, rest, line, key, says) in [
        (
            "whole-seed.yaml",
            "  may_also_fail:\n    - {rule: \"seed:105\", reason: \"r\"}\n",
            12,
            "expected_verdict.may_also_fail[0]",
            "`seed:105` names a whole seed",
        ),
        (
            "no-reason.yaml",
            "  may_also_fail:\n    - \"seed:105/expect:e\"\n",
            12,
            "expected_verdict.may_also_fail[0]",
            "gives no reason",
        ),
        (
            "margin.yaml",
            "  margin: {rule: \"seeds:m\", within: 0}\n",
            11,
            "expected_verdict.margin",
            "`margin.within`: 0 is not a positive number",
        ),
    ] {
        let p = r.write(
            file,
            &format!("{head}selftest: {{plant: [seed=2]}}\n{verdict}{rest}"),
        );
        fails_at(&p, &[], (line, None), key, says);
    }
}

/// A multi-seed self-test's `seeds` must be a range of at least 2 seeds, and `golden` needs
/// `seeds`; each error names the file line and key.
#[test]
fn a_multi_seed_selftest_is_checked() {
    let r = Root::new();
    let head = "name: t\ndescription: d\nseed: 1\nsteps: 2\ndriver: {kind: builtin}\nbackend: {kind: mock}\n";
    let tail = "expected_verdict: {outcome: regressed}\n";
    for (file, selftest, key, words) in [
        (
            "one.yaml",
            "{plant: [seed=2], seeds: \"3..3\"}",
            "selftest.seeds",
            "at least 2 seeds",
        ),
        (
            "bad.yaml",
            "{plant: [seed=2], seeds: \"x..3\"}",
            "selftest.seeds",
            "`x` is not a seed",
        ),
        (
            "golden.yaml",
            "{plant: [seed=2], golden: other}",
            "selftest.golden",
            "needs `seeds`",
        ),
    ] {
        let p = r.write(file, &format!("{head}selftest: {selftest}\n{tail}"));
        fails_at(&p, &[], (7, None), key, words);
    }
    let ok = r.write(
        "ok.yaml",
        &format!("{head}selftest: {{plant: [seed=2], seeds: \"1..3\", golden: other}}\n{tail}"),
    );
    assert!(load(&ok, &[]).is_ok());
}

/// A project in a temporary folder: a copy of the shipped `scenarios/` and of one scenario's
/// goldens under `golden/`.
fn project_with(golden: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let repo = shipped("..");
    std::fs::create_dir(tmp.path().join("golden")).unwrap();
    let golden = format!("golden/{golden}");
    for (from, to) in [("scenarios", ""), (golden.as_str(), "golden")] {
        let ok = std::process::Command::new("cp")
            .arg("-r")
            .arg(repo.join(from))
            .arg(tmp.path().join(to))
            .status()
            .unwrap();
        assert!(ok.success());
    }
    tmp
}

/// `check` lints golden rules against the scenario's goldens (`golden/` beside `scenarios/`): a
/// band that cannot be crossed is an error at the rule's file, line and key.
#[test]
fn check_refuses_a_golden_rule_that_cannot_fail() {
    let tmp = project_with("mock-gsm8k-grpo");
    let file = tmp.path().join("scenarios/smoke/mock-gsm8k-grpo.yaml");
    let clean = check(std::slice::from_ref(&file));
    assert!(clean.is_ok(), "{}", render_check(&clean));
    // MFU may fall to 0 (rel 2 reaches below it) and may rise without limit: nothing fails.
    let text = std::fs::read_to_string(&file).unwrap();
    let bad = text.replace(
        "perf/mfu/actor: {rel: 0.05, direction: higher_is_better}",
        "perf/mfu/actor: {rel: 2.0, direction: higher_is_better, improvement_limit: unlimited}",
    );
    assert_ne!(bad, text);
    std::fs::write(&file, bad).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("perf/mfu/actor: {rel: 0.05"))
        .unwrap()
        + 1;
    let outcome = check(std::slice::from_ref(&file));
    let rendered = render_check(&outcome);
    assert_eq!(outcome.error_count(), 1, "{rendered}");
    assert!(
        rendered.contains(&format!(
            "mock-gsm8k-grpo.yaml:{line}:1: checks.golden.perf/mfu/actor: `golden:perf/mfu/actor` cannot fail"
        )),
        "{rendered}"
    );
    assert!(
        rendered.contains("(golden mock-gsm8k-grpo/cpu)"),
        "{rendered}"
    );
    // A mistyped metric name: an error at its line with a did-you-mean, not a `missing` later.
    let typo = text.replace("perf/mfu/actor: {rel: 0.05", "perf/mfu/actr: {rel: 0.05");
    assert_ne!(typo, text);
    std::fs::write(&file, typo).unwrap();
    let rendered = render_check(&check(std::slice::from_ref(&file)));
    assert!(
        rendered.contains(&format!(
            "mock-gsm8k-grpo.yaml:{line}:1: checks.golden.perf/mfu/actr: no metric `perf/mfu/actr` in the golden; did you mean `perf/mfu/actor`?"
        )),
        "{rendered}"
    );
}

/// Two scenarios with one `name:` would share one golden and one `latest`: `check` names both.
#[test]
fn check_refuses_two_scenarios_of_one_name() {
    let tmp = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("cp")
        .arg("-r")
        .arg(shipped("../scenarios"))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let smoke = tmp.path().join("scenarios/smoke");
    std::fs::copy(smoke.join("mock-gsm8k-grpo.yaml"), smoke.join("copy.yaml")).unwrap();
    let outcome = check(std::slice::from_ref(&smoke));
    let rendered = render_check(&outcome);
    assert_eq!(outcome.error_count(), 1, "{rendered}");
    assert!(
        rendered.contains("name: `mock-gsm8k-grpo` is also the name of"),
        "{rendered}"
    );
}

/// `check` asks of every rule whether a regression can fail it, without a golden too (the
/// shape) and against a calibrated golden: each bad kind is refused at its rule's line with
/// its reason, and the shipped files pass (`shipped_scenarios_are_valid`).
#[test]
fn check_refuses_each_kind_of_rule_that_cannot_fail() {
    let tmp = project_with("tiny-gsm8k-grpo");
    let smoke = tmp.path().join("scenarios/smoke/mock-gsm8k-grpo.yaml");
    let flagship = tmp.path().join("scenarios/tiny-gsm8k-grpo.yaml");
    let reward = "critic/rewards/mean: {window: 5, abs: 0.05}";
    // (file, the line replaced, its replacement, what the error says)
    let cases: &[(&Path, &str, &str, &str)] = &[
        (
            &smoke,
            reward,
            "critic/rewards/mean: {window: 5, abs: 0.05, budget: 4}",
            "cannot fail: its budget 4 is as large as its 4 window(s)",
        ),
        (
            &smoke,
            reward,
            "actor/grad_norm: {window: 5, rel: 1.0}",
            "puts the lower edge of its band at or below 0",
        ),
        (
            &smoke,
            reward,
            "critic/rewards/mean: {window: 5, abs: 0.05, direction: lower_is_better, improvement_limit: unlimited}",
            "cannot catch a regression: its direction is written against",
        ),
        (
            &smoke,
            "- all(actor/grad_norm, finite)",
            "- min(actor/entropy) >= 0",
            "cannot fail: it holds for every value its metrics can take",
        ),
        (
            &flagship,
            "critic/rewards/mean: {window: 10, calibrated: {floor: 0.03}}",
            "critic/rewards/mean: {window: 10, abs: 100}",
            "can hardly fail: its band is at least",
        ),
    ];
    for (file, from, to, says) in cases {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.contains(from), "{from}");
        let line = text.lines().position(|l| l.contains(from)).unwrap() + 1;
        std::fs::write(file, text.replacen(from, to, 1)).unwrap();
        let outcome = check(std::slice::from_ref(&file.to_path_buf()));
        let rendered = render_check(&outcome);
        std::fs::write(file, &text).unwrap();
        assert!(!outcome.is_ok(), "{to}: {rendered}");
        let name = file.file_name().unwrap().to_string_lossy();
        assert!(
            rendered.lines().any(|l| l.starts_with("error: ")
                && l.contains(&format!("{name}:{line}:1: "))
                && l.contains(says)),
            "{to}: wants `{says}` at line {line}: {rendered}"
        );
    }
}
