//! Scenario files end to end: strict errors with positions, layering, includes, overrides,
//! interpolation, provenance, the RunPlan, `check`, `list` and the backend-file lint.

use std::path::{Path, PathBuf};

use rlharness::app::check;
use rlharness::app::list;
use rlharness::run::plan::RunPlan;
use rlharness::scenario::check::{render_check, render_list, Diagnostic};
use rlharness::scenario::lint::lint_file;
use rlharness::scenario::{discover, load_scenario, Origin, Scenario, SpecError, SpecErrors};
use serde_json::json;

mod builtin;
mod check;
mod check_vs_run;

fn shipped(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(rel)
}

/// A scenarios root in a tempdir with the shipped defaults and Arctic backend files.
struct Root {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Root {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("scenarios");
        std::fs::create_dir_all(root.join("defaults")).unwrap();
        std::fs::create_dir_all(root.join("backends")).unwrap();
        for rel in ["defaults/verl.yaml", "backends/arctic.yaml"] {
            std::fs::copy(shipped(rel), root.join(rel)).unwrap();
        }
        Root { _dir: dir, root }
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A minimal valid scenario with the given `config:` body (already indented by 2).
    fn scenario(&self, rel: &str, config: &str) -> PathBuf {
        let text = format!(
            "name: t\ndescription: a test scenario\nseed: 1\nsteps: 2\ndriver: {{kind: builtin}}\nbackend: {{kind: mock}}\nconfig:\n{config}"
        );
        self.write(rel, &text)
    }
}

fn load(p: &Path, sets: &[&str]) -> Result<Scenario, SpecErrors> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load_scenario(p, &sets)
}

fn only_error(r: Result<Scenario, SpecErrors>) -> SpecError {
    let errs = r.expect_err("expected an error");
    assert_eq!(errs.len(), 1, "{errs}");
    errs.0.into_iter().next().unwrap()
}

/// Loading `p` with `sets` fails with exactly one error: at `line` (and `col`, where the test
/// pins it), under `key`, its message containing `says`. Returns it for further checks.
fn fails_at(
    p: &Path,
    sets: &[&str],
    (line, col): (usize, Option<usize>),
    key: &str,
    says: &str,
) -> SpecError {
    let e = only_error(load(p, sets));
    assert_eq!((e.line, e.key_path.as_str()), (line, key), "{e}");
    if let Some(col) = col {
        assert_eq!(e.col, col, "{e}");
    }
    assert!(e.message.contains(says), "{e}");
    e
}

#[test]
fn valid_scenario_layers_defaults_includes_and_file_values() {
    let r = Root::new();
    let p = r.scenario(
        "smoke.yaml",
        "  actor_rollout_ref:\n    rollout:\n      n: 8\n    actor:\n      optim:\n        lr: 1.0e-5\n  remote_backend:\n    include: backends/arctic.yaml\n    train:\n      zorro_train:\n        enable: true\n",
    );
    let s = load(&p, &[]).unwrap();
    let c = &s.config;
    assert_eq!(
        c.get("actor_rollout_ref.rollout.n").unwrap().value,
        json!(8)
    );
    assert_eq!(
        c.get("actor_rollout_ref.rollout.n").unwrap().origin,
        Origin::File {
            path: p.clone(),
            line: 10,
            col: 10
        }
    );
    // From the defaults file.
    let epochs = c.get("actor_rollout_ref.actor.ppo_epochs").unwrap();
    assert_eq!(epochs.value, json!(1));
    assert!(
        matches!(&epochs.origin, Origin::Default { path, .. } if path.ends_with("defaults/verl.yaml"))
    );
    assert!(
        epochs.origin.to_string().starts_with("default ("),
        "{}",
        epochs.origin
    );
    // From the included file, overridden by a sibling key.
    assert_eq!(c.get("remote_backend.colocate").unwrap().value, json!(true));
    assert!(c
        .get("remote_backend.colocate")
        .unwrap()
        .origin
        .to_string()
        .contains("backends/arctic.yaml:"));
    assert_eq!(
        c.get("remote_backend.train.zorro_train.enable")
            .unwrap()
            .value,
        json!(true)
    );
    // Interpolation keeps the type and points to where the value comes from.
    let mr = c
        .get("remote_backend.train.zorro_train.max_rollouts")
        .unwrap();
    assert_eq!(mr.value, json!(8));
    match &mr.origin {
        Origin::Interpolated { from, origin } => {
            assert_eq!(from, "actor_rollout_ref.rollout.n");
            assert!(matches!(**origin, Origin::File { line: 10, .. }));
        }
        other => panic!("expected an interpolated origin, got {other}"),
    }
    // Embedded interpolation of the defaults file is stringified.
    assert_eq!(
        c.get("trainer.default_local_dir").unwrap().value,
        json!("checkpoints/verl_examples/gsm8k")
    );
    // Subtrees, typed access, JSON.
    assert_eq!(
        c.get("actor_rollout_ref.actor.optim.betas").unwrap().value,
        json!([0.9, 0.999])
    );
    assert!(c.get("remote_backend.train").unwrap().value.is_object());
    assert_eq!(
        c.get_as::<f64>("actor_rollout_ref.actor.optim.lr").unwrap(),
        Some(1e-5)
    );
    assert_eq!(c.get_as::<u64>("no.such.key").unwrap(), None);
    let e = c.get_as::<u64>("actor_rollout_ref.model.path").unwrap_err();
    assert_eq!(e.key_path, "config.actor_rollout_ref.model.path");
    assert!(e.file.ends_with("defaults/verl.yaml"), "{e}");
    assert_eq!(c.to_json()["data"]["max_prompt_length"], json!(512));
    let leaves = c.leaves();
    assert!(leaves.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(
        leaves
            .iter()
            .any(|(k, _)| k
                == "remote_backend.train.deepspeed.zero_optimization.offload_param.device")
    );
    // Sources: scenario, defaults, include.
    assert_eq!(s.sources.len(), 3);
    assert_eq!(
        s.origins["seed"],
        Origin::File {
            path: p.clone(),
            line: 3,
            col: 7
        }
    );
    assert_eq!(
        s.origins["backend.kind"].to_string(),
        format!("{}:6:17", p.display())
    );
}

#[test]
fn misspelled_config_key_names_file_line_col_and_path() {
    let r = Root::new();
    let p = r.scenario(
        "bad.yaml",
        "  actor_rollout_ref:\n    actor:\n      ppo_epoch: 2\n",
    );
    let e = fails_at(
        &p,
        &[],
        (10, Some(7)),
        "config.actor_rollout_ref.actor.ppo_epoch",
        "unknown key `ppo_epoch`",
    );
    assert_eq!(e.file, p);
    assert!(e.message.contains("did you mean `ppo_epochs`?"), "{e}");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!(
            "{}:10:7: config.actor_rollout_ref.actor.ppo_epoch: ",
            p.display()
        )),
        "{shown}"
    );
}

#[test]
fn misspelled_top_level_and_block_keys_are_all_reported() {
    let r = Root::new();
    let p = r.write(
        "bad.yaml",
        "name: t\ndescription: d\nseed: 1\nsteps: 2\nsteeps: 3\ndriver: {kind: builtin, tsk: {}}\nbackend: {kind: mock}\ntimeouts: {step: soon}\n",
    );
    let errs = load(&p, &[]).unwrap_err();
    let got: Vec<(usize, String)> = errs.iter().map(|e| (e.line, e.key_path.clone())).collect();
    assert_eq!(
        got,
        vec![
            (5, "steeps".into()),
            (6, "driver.tsk".into()),
            (8, "timeouts.step".into())
        ],
        "{errs}"
    );
    assert!(errs.0[0].message.contains("did you mean `steps`?"));
    assert!(errs.0[1].message.contains("unknown field `tsk`"));
    assert!(
        errs.0[2].message.contains("invalid duration \"soon\""),
        "{}",
        errs.0[2]
    );
}

#[test]
fn wrong_type_says_what_was_expected() {
    let r = Root::new();
    let p = r.write(
        "bad.yaml",
        "name: t\ndescription: d\nseed: one\nsteps: 2\ndriver: {kind: builtin}\nbackend: {kind: mock}\n",
    );
    let e = fails_at(&p, &[], (3, Some(7)), "seed", "invalid type");
    assert_eq!(e.message, "invalid type: string \"one\", expected u64");

    let p = r.scenario(
        "bad2.yaml",
        "  actor_rollout_ref:\n    actor:\n      optim: 3\n",
    );
    let e = fails_at(
        &p,
        &[],
        (10, None),
        "config.actor_rollout_ref.actor.optim",
        "expected a mapping",
    );
    assert!(
        e.message
            .starts_with("expected a mapping (with keys lr, weight_decay"),
        "{e}"
    );
}

#[test]
fn an_expected_failure_without_a_reason_names_file_and_line() {
    let r = Root::new();
    let p = r.write(
        "bad.yaml",
        "name: t\ndescription: d\nseed: 1\nsteps: 2\ndriver: {kind: builtin}\nbackend: {kind: mock}\nexpected_verdict:\n  outcome: failed\n",
    );
    let e = fails_at(
        &p,
        &[],
        (8, None),
        "expected_verdict",
        "`outcome: failed` needs a `reason`",
    );
    assert!(e.to_string().contains("bad.yaml:8:"), "{e}");
}

#[test]
fn internally_tagged_backend_error_points_at_the_inner_key() {
    let r = Root::new();
    let p = r.write(
        "bad.yaml",
        "name: t\ndescription: d\nseed: 1\nsteps: 2\ndriver: {kind: builtin}\nbackend:\n  kind: remote\n  ulr: http://x\n",
    );
    let errs = load(&p, &[]).unwrap_err();
    let e = &errs.0[0];
    assert_eq!(
        (e.line, e.col, e.key_path.as_str()),
        (8, 3, "backend.ulr"),
        "{errs}"
    );
    assert!(e.message.contains("unknown field `ulr`"), "{e}");

    let p = r.write(
        "bad2.yaml",
        "name: t\ndescription: d\nseed: 1\nsteps: 2\ndriver: {kind: builtin}\nbackend:\n  kind: remote\n  url: 7\n",
    );
    fails_at(
        &p,
        &[],
        (8, Some(8)),
        "backend.url",
        "invalid type: integer `7`, expected a string",
    );
}

#[test]
fn bad_interpolations_are_errors_with_position() {
    let r = Root::new();
    let p = r.scenario(
        "missing.yaml",
        "  trainer:\n    experiment_name: run-${data.no_such}\n",
    );
    fails_at(
        &p,
        &[],
        (9, Some(22)),
        "config.trainer.experiment_name",
        "`data.no_such`, which does not exist",
    );

    let p = r.scenario(
        "cycle.yaml",
        "  trainer:\n    project_name: ${trainer.experiment_name}\n    experiment_name: ${trainer.project_name}\n",
    );
    let errs = load(&p, &[]).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.message.contains("interpolation cycle")),
        "{errs}"
    );
    assert!(errs.iter().all(|e| e.file == p && e.line >= 9), "{errs}");
}

#[test]
fn missing_include_names_the_include_key() {
    let r = Root::new();
    let p = r.scenario(
        "inc.yaml",
        "  remote_backend:\n    include: backends/nope.yaml\n",
    );
    fails_at(
        &p,
        &[],
        (9, Some(5)),
        "config.remote_backend.include",
        "included file `backends/nope.yaml` not found",
    );
}

#[test]
fn included_file_keys_are_checked_against_the_include() {
    let r = Root::new();
    let p = r.scenario(
        "inc.yaml",
        "  remote_backend:\n    include: backends/arctic.yaml\n    train:\n      zoro_train: {enable: true}\n",
    );
    let e = only_error(load(&p, &[]));
    assert_eq!(e.key_path, "config.remote_backend.train.zoro_train");
    assert!(e.message.contains("did you mean `zorro_train`?"), "{e}");
}

#[test]
fn scenarios_in_subfolders_include_relative_to_the_root() {
    let r = Root::new();
    let p = r.scenario(
        "deep/er/x.yaml",
        "  remote_backend:\n    include: backends/arctic.yaml\n",
    );
    let s = load(&p, &[]).unwrap();
    assert_eq!(
        s.config.get("remote_backend.comms.protocol").unwrap().value,
        json!("ray")
    );
}

#[test]
fn set_overrides_apply_with_provenance() {
    let r = Root::new();
    let p = r.scenario(
        "s.yaml",
        "  actor_rollout_ref:\n    rollout:\n      n: 4\n  remote_backend:\n    include: backends/arctic.yaml\n",
    );
    let s = load(
        &p,
        &[
            "steps=5",
            "config.actor_rollout_ref.rollout.n=16",
            "config.actor_rollout_ref.actor.optim.betas=[0.9, 0.95]",
            "backend.kind=remote",
            "backend.url=http://127.0.0.1:7000",
            "+config.trainer.extra_knob='x'",
        ],
    )
    .unwrap();
    assert_eq!(s.steps, 5);
    assert_eq!(
        s.origins["steps"],
        Origin::Set {
            arg: "steps=5".into()
        }
    );
    assert_eq!(
        s.backend,
        rlharness::run::backend::BackendSpec::Remote {
            url: "http://127.0.0.1:7000".into()
        }
    );
    let n = s.config.get("actor_rollout_ref.rollout.n").unwrap();
    assert_eq!(n.value, json!(16));
    assert_eq!(
        n.origin.to_string(),
        "--set config.actor_rollout_ref.rollout.n=16"
    );
    // The interpolation follows the override.
    let mr = s
        .config
        .get("remote_backend.train.zorro_train.max_rollouts")
        .unwrap();
    assert_eq!(mr.value, json!(16));
    assert_eq!(
        mr.origin.to_string(),
        "${actor_rollout_ref.rollout.n} <- --set config.actor_rollout_ref.rollout.n=16"
    );
    assert_eq!(
        s.config
            .get("actor_rollout_ref.actor.optim.betas")
            .unwrap()
            .value,
        json!([0.9, 0.95])
    );
    assert_eq!(
        s.config.get("trainer.extra_knob").unwrap().value,
        json!("x")
    );
    // The root mapping keeps the provenance of the scenario's `config` (its first key), not of a `--set`.
    assert!(matches!(
        s.config.get("").unwrap().origin,
        Origin::File { line: 8, .. }
    ));
}

#[test]
fn bad_set_overrides_are_errors() {
    let r = Root::new();
    let p = r.scenario("s.yaml", "  data:\n    train_batch_size: 8\n");
    let e = only_error(load(&p, &["config.actor_rollout_ref.actor.optim.lrr=1"]));
    assert_eq!(
        e.file,
        PathBuf::from("--set config.actor_rollout_ref.actor.optim.lrr=1")
    );
    assert_eq!(e.key_path, "config.actor_rollout_ref.actor.optim.lrr");
    assert!(
        e.message.contains("did you mean `lr`?") && e.message.contains("`+`"),
        "{e}"
    );
    let e = only_error(load(&p, &["+config.data.train_batch_size=3"]));
    assert!(e.message.contains("already exists"), "{e}");
    let e = only_error(load(&p, &["stepz=3"]));
    assert!(e.message.contains("did you mean `steps`?"), "{e}");
    let e = only_error(load(&p, &["steps=many"]));
    assert_eq!(e.key_path, "steps");
    assert_eq!(e.file, PathBuf::from("--set steps=many"));
    let e = only_error(load(&p, &["backend.ofset=1"]));
    assert!(e.message.contains("unknown field `ofset`"), "{e}");
    let e = only_error(load(&p, &["seed"]));
    assert!(e.message.contains("KEY=VALUE"), "{e}");
    // ++ adds or replaces.
    let s = load(
        &p,
        &[
            "++config.data.train_batch_size=3",
            "++config.data.new_one=1",
        ],
    )
    .unwrap();
    assert_eq!(
        s.config.get("data.train_batch_size").unwrap().value,
        json!(3)
    );
}
