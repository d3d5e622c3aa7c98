//! A command trainer's launch, made from the plan: the scenario's config as Hydra overrides,
//! the harness's own keys, the environment, the program path. It lives with the plan (it reads
//! the plan's config and origins); the driver only starts what it is given.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::RunPlan;
use crate::run::driver::command::{
    hydra_quote, hydra_value, CommandDriverSpec, TrainerLaunch, HARNESS_KEYS, JSONL_FILE,
};
use crate::scenario::Origin;

/// What the harness itself tells the trainer.
#[derive(Debug, Clone)]
pub(crate) struct HarnessSettings {
    pub(crate) steps: u64,
    pub(crate) project_name: String,
    pub(crate) experiment_name: String,
}

/// The scenario's config as Hydra overrides: every leaf the scenario (or `--set`) wrote, in
/// path order; defaults and included backend files are left to the trainer's own config
/// (verl has them), except where the scenario changed them. A key no default layer defines
/// was added with `+` and is passed with `+`. Then the harness's own keys.
pub(crate) fn hydra_overrides(plan: &RunPlan, settings: &HarnessSettings) -> Vec<String> {
    let config = &plan.scenario.config;
    let layer_files: BTreeSet<&Path> = plan
        .scenario
        .sources
        .iter()
        .skip(1)
        .map(PathBuf::as_path)
        .collect();
    let mut out = Vec::new();
    for (path, resolved) in config.leaves() {
        if path.is_empty() || HARNESS_KEYS.contains(&path.as_str()) {
            continue;
        }
        if resolved.origin.is_default() {
            continue;
        }
        // `${...}` written in a layer file: the trainer's config holds the same reference.
        if let Origin::Interpolated { .. } = resolved.origin {
            if config
                .node(&path)
                .is_some_and(|n| layer_files.contains(n.pos.file.as_path()))
            {
                continue;
            }
        }
        let plus = if config.default_of(&path).is_none() {
            "+"
        } else {
            ""
        };
        out.push(format!("{plus}{path}={}", hydra_value(&resolved.value)));
    }
    out.push(format!("trainer.total_training_steps={}", settings.steps));
    out.push(format!(
        "trainer.logger=[{}]",
        trainer_loggers(plan)
            .0
            .iter()
            .map(|l| hydra_quote(l))
            .collect::<Vec<_>>()
            .join(",")
    ));
    out.push(format!(
        "trainer.project_name={}",
        hydra_quote(&settings.project_name)
    ));
    out.push(format!(
        "trainer.experiment_name={}",
        hydra_quote(&settings.experiment_name)
    ));
    out
}

/// verl's loggers for the run: the scenario's own `trainer.logger` (one name or a list) with
/// `console` and `file` added where missing (the harness reads verl's console and its file
/// logger), or `console` and `file` alone where the scenario names none (verl's default adds
/// wandb, which needs an account and the network). With what was added, in words, for the
/// run's notes.
pub(crate) fn trainer_loggers(plan: &RunPlan) -> (Vec<String>, Option<String>) {
    let config = &plan.scenario.config;
    let own = config
        .get("trainer.logger")
        .filter(|r| !r.origin.is_default())
        .map(|r| match &r.value {
            serde_json::Value::Array(a) => a
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect(),
            serde_json::Value::String(s) => vec![s.clone()],
            other => vec![other.to_string()],
        });
    let Some(own) = own else {
        return (vec!["console".into(), "file".into()], None);
    };
    let mut loggers = own.clone();
    let added: Vec<&str> = ["console", "file"]
        .into_iter()
        .filter(|l| !own.iter().any(|o| o == l))
        .collect();
    loggers.extend(added.iter().map(|l| l.to_string()));
    let note = (!added.is_empty()).then(|| {
        format!(
            "trainer.logger: the scenario's {:?} with {} added (the harness reads verl's console \
             and its file logger)",
            own,
            added
                .iter()
                .map(|l| format!("'{l}'"))
                .collect::<Vec<_>>()
                .join(" and ")
        )
    });
    (loggers, note)
}

/// This executable's path. A rebuild while it runs replaces the file, and Linux then names the
/// running image `<path> (deleted)`: the path itself, holding the new build, is what a trainer
/// can start.
pub(crate) fn harness_bin() -> String {
    let path = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "rlharness".into());
    match path.strip_suffix(" (deleted)") {
        Some(p) => p.to_string(),
        None => path,
    }
}

/// Build the launch of a scenario's command. `run_dir` must be absolute; `backend_url` is the
/// recording proxy's URL when the trainer's Arctic client goes through it.
pub fn launch_for(
    spec: &CommandDriverSpec,
    plan: &RunPlan,
    run_dir: &Path,
    backend_url: Option<&str>,
) -> TrainerLaunch {
    let run_id = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    let settings = HarnessSettings {
        steps: plan.scenario.steps,
        project_name: "rlharness".into(),
        experiment_name: format!("{}-{run_id}", plan.scenario.name),
    };
    let program = spec.program(&plan.scenario.path);
    let mut args: Vec<String> = spec.command.iter().skip(1).cloned().collect();
    args.extend(hydra_overrides(plan, &settings));
    let jsonl_path = run_dir.join(JSONL_FILE);
    let mut env = vec![
        (
            "VERL_FILE_LOGGER_PATH".to_string(),
            jsonl_path.display().to_string(),
        ),
        ("RLHARNESS_RUN_DIR".into(), run_dir.display().to_string()),
        // Piped stdout is block-buffered in Python: console lines would arrive in bursts.
        ("PYTHONUNBUFFERED".into(), "1".into()),
        // The scenario's seed (`--seed`, `--seeds`), for a launcher to pass on: a trainer's
        // seeds are its own config keys, which the harness cannot name for every trainer.
        ("RLHARNESS_SEED".into(), plan.scenario.seed.to_string()),
        // The scenario file, absolute (e.g. for `rlharness assets verl --scenario`).
        (
            "RLHARNESS_SCENARIO".into(),
            std::path::absolute(&plan.scenario.path)
                .unwrap_or_else(|_| plan.scenario.path.clone())
                .display()
                .to_string(),
        ),
        // A launcher may call the harness (e.g. `rlharness assets`) with the same build.
        ("RLHARNESS_BIN".into(), harness_bin()),
        // Marks every process the trainer starts, wherever it ends up (driver/strays.rs).
        (
            crate::run::driver::strays::TOKEN_VAR.into(),
            crate::run::driver::strays::new_token(&run_id),
        ),
    ];
    if let Some(url) = backend_url {
        env.push(("RLHARNESS_BACKEND_URL".into(), url.to_string()));
    }
    for (k, v) in &spec.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    TrainerLaunch {
        program,
        args,
        env,
        metrics_from: spec.metrics_from,
        jsonl_path,
        run_dir: run_dir.to_path_buf(),
        steps: plan.scenario.steps,
        watch_env: spec
            .env
            .keys()
            .chain(&spec.watch_env)
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect(),
        asked_env: spec.env.clone(),
    }
}
