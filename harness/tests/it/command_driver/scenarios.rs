//! Command-driver scenarios as files: what loads, what a GPU recipe hands verl, and
//! `rlharness run`'s exit statuses on the stand-in launcher.

use std::path::{Path, PathBuf};

use rlharness::model::error::ExitStatus;
use rlharness::model::rundir::RunStatus;

use super::{dead, fixture, manifest, read};
use crate::common::repo;

/// A scenario file in a scenarios root of its own, over the repository's verl defaults.
fn write_scenario(dir: &Path, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("defaults")).unwrap();
    std::fs::copy(
        repo().join("scenarios/defaults/verl.yaml"),
        dir.join("defaults/verl.yaml"),
    )
    .unwrap();
    let p = dir.join("s.yaml");
    std::fs::write(&p, body).unwrap();
    p
}

/// Why the scenario `body` (written as by `write_scenario`) does not load.
fn load_error(dir: &Path, body: &str) -> String {
    rlharness::scenario::load_scenario(&write_scenario(dir, body), &[])
        .unwrap_err()
        .to_string()
}

#[test]
fn a_minimal_command_scenario_is_valid_and_a_builtin_one_needs_a_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_scenario(
        tmp.path(),
        "name: m\ndescription: d\nseed: 1\nsteps: 2\n\
         driver: {kind: command, command: [python3, -m, verl.trainer.main_ppo], metrics_from: verl-console}\n",
    );
    let s = rlharness::scenario::load_scenario(&p, &[]).unwrap();
    assert_eq!(s.backend, rlharness::run::backend::BackendSpec::None);
    let e = load_error(
        tmp.path(),
        "name: m\ndescription: d\nseed: 1\nsteps: 2\ndriver: {kind: builtin}\n",
    );
    assert!(e.contains("missing required key `backend`"), "{e}");
    let e = load_error(
        tmp.path(),
        "name: m\ndescription: d\nseed: 1\nsteps: 2\ndriver: {kind: builtin}\nbackend: {kind: none}\n",
    );
    assert!(e.contains("the builtin driver needs a backend"), "{e}");
    let e = load_error(
        tmp.path(),
        "name: m\ndescription: d\nseed: 1\nsteps: 2\n\
         driver: {kind: command, command: [], metrics_from: verl-console}\n",
    );
    assert!(e.contains("`command` must name a program"), "{e}");
    let e = load_error(
        tmp.path(),
        "name: m\ndescription: d\nseed: 1\nsteps: 2\n\
         driver: {kind: command, command: [x], metrics_from: wandb}\n",
    );
    assert!(e.contains("wandb"), "{e}");
}

#[test]
fn the_qwen3_gpu_scenarios_validate_and_are_listed_as_skipped_here() {
    let gpu = repo().join("scenarios/gpu");
    let names = [
        "qwen3-0.6b-gsm8k-grpo-zorro.yaml",
        "qwen3-1.7b-gsm8k-grpo-zorro.yaml",
    ];
    let paths: Vec<PathBuf> = names.iter().map(|n| gpu.join(n)).collect();
    let outcome = rlharness::app::check(&paths);
    assert!(
        outcome.is_ok(),
        "{}",
        rlharness::scenario::check::render_check(&outcome)
    );
    // The 1.7B golden holds the published numbers, marked as such.
    let golden = rlharness::model::golden::GoldenStore::with_ci(repo().join("golden"), true)
        .load("qwen3-1.7b-gsm8k-grpo-zorro", "h200")
        .unwrap()
        .unwrap();
    assert!(golden
        .provenance
        .source
        .as_deref()
        .unwrap()
        .starts_with("published: Arctic verl integration README"));
    assert_eq!(
        golden.table.series("perf/mfu/actor"),
        vec![(1, 0.261), (2, 0.256), (3, 0.26), (4, 0.264)]
    );
    assert_eq!(
        golden.table.series("val-core/openai/gsm8k/acc/mean@1"),
        vec![(4, 0.00152)]
    );
    let listed = rlharness::app::list(&repo().join("scenarios"));
    let have_verl = rlharness::scenario::Requires {
        python_modules: vec!["verl".into(), "arctic_platform".into()],
        gpus: 1,
        ..Default::default()
    }
    .unmet()
    .is_empty();
    for n in names {
        let e = listed
            .iter()
            .find(|e| e.path.ends_with(n))
            .unwrap_or_else(|| panic!("{n} not listed"));
        if !have_verl {
            let reasons = e.runnable.clone().unwrap_err();
            assert!(
                reasons
                    .iter()
                    .any(|r| r.contains("python module `verl`") || r.contains("GPU")),
                "{reasons:?}"
            );
        }
    }
}

#[test]
fn the_qwen3_recipe_reaches_verl_as_the_example_recipes_overrides() {
    let path = repo().join("scenarios/gpu/qwen3-0.6b-gsm8k-grpo-zorro.yaml");
    let scenario = rlharness::scenario::load_scenario(&path, &[]).unwrap();
    let rlharness::run::driver::DriverSpec::Command(spec) = scenario.driver.clone() else {
        panic!("not a command driver");
    };
    let plan = rlharness::run::plan::RunPlan::new(scenario, None, None).unwrap();
    let run_dir = Path::new("/abs/reports/qwen3-0.6b-gsm8k-grpo-zorro/20261202T000000-abcd");
    let launch = rlharness::run::plan::launch::launch_for(&spec, &plan, run_dir, None);
    assert_eq!(launch.program, PathBuf::from("python3"));
    let want: Vec<String> = [
        "-m",
        "verl.trainer.main_ppo",
        "remote_backend=arctic",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.model.path='Qwen/Qwen3-0.6B'",
        "actor_rollout_ref.rollout.n=5",
        "actor_rollout_ref.rollout.name='arctic'",
        "algorithm.adv_estimator='grpo'",
        "data.max_prompt_length=512",
        "data.max_response_length=1024",
        "data.train_batch_size=16",
        "data.train_files='~/data/gsm8k/train.parquet'",
        "data.val_files='~/data/gsm8k/test.parquet'",
        "remote_backend.train.deepspeed.zero_optimization.stage=2",
        "remote_backend.train.zorro_train.enable=true",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.remote_backend='arctic'",
        "trainer.total_training_steps=6",
        "trainer.logger=['console','file']",
        "trainer.project_name='rlharness'",
        "trainer.experiment_name='qwen3-0.6b-gsm8k-grpo-zorro-20261202T000000-abcd'",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(launch.args, want);
    assert!(launch.env.contains(&(
        "VERL_FILE_LOGGER_PATH".to_string(),
        "/abs/reports/qwen3-0.6b-gsm8k-grpo-zorro/20261202T000000-abcd/verl_metrics.jsonl"
            .to_string()
    )));
    // `--set` reaches the trainer too, with its own quoting.
    let scenario = rlharness::scenario::load_scenario(
        &path,
        &["config.actor_rollout_ref.actor.optim.betas=[0.9, 0.95]".to_string()],
    )
    .unwrap();
    let plan = rlharness::run::plan::RunPlan::new(scenario, None, Some(2)).unwrap();
    let launch = rlharness::run::plan::launch::launch_for(&spec, &plan, run_dir, None);
    assert!(launch
        .args
        .contains(&"actor_rollout_ref.actor.optim.betas=[0.9,0.95]".to_string()));
    assert!(launch
        .args
        .contains(&"trainer.total_training_steps=2".to_string()));
}

/// `rlharness run ...` as the binary parses and runs it (in-process: the target folder may be
/// shared with other checkouts, so the built binary is not necessarily this one). `CI=true`
/// is never set here (the process environment is shared by the tests); nothing is blessed
/// because the fixture has no golden rules.
#[test]
fn rlharness_run_exits_3_on_a_hang_and_0_on_a_clean_fixture() {
    use clap::Parser;
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut argv: Vec<String> = vec!["rlharness".into(), "run".into(), "--no-progress".into()];
        argv.push("--out".into());
        argv.push(tmp.path().display().to_string());
        argv.push("--golden".into());
        argv.push(tmp.path().join("golden").display().to_string());
        for a in extra {
            argv.push("--set".into());
            argv.push(a.to_string());
        }
        argv.push(fixture("verl-console.yaml").display().to_string());
        rlharness::app::main(rlharness::app::cli::Cli::parse_from(argv))
    };
    assert_eq!(run(&[]), ExitStatus::Passed);
    assert_eq!(
        run(&["driver.command.1=hang", "timeouts.step=1"]),
        ExitStatus::RunFailed
    );
    let latest = tmp.path().join("fixture-verl-console/latest");
    assert_eq!(manifest(&latest).status, RunStatus::TimedOut);
    let child: i32 = read(&latest, "child.pid").trim().parse().unwrap();
    assert!(dead(child), "child {child} still alive");
}
