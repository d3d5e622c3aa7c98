//! `rlharness assets verl`: the scenario's torch model and task as files for real verl.

use crate::app::cli::VerlAssetsArgs;
use crate::app::errors::Failure;
use crate::model::error::{CommandError, ExitStatus};
use crate::run::backend::BackendSpec;
use crate::run::driver::{DriverSpec, TaskSpec};
use crate::tools::assets::{verl_files, write_files, DataPlan};
use rlharness_arctic::task::{ArithConfig, ArithTask};
use rlharness_arctic::torch_spec::decoder::DecoderConfig;
use rlharness_arctic::torch_spec::TorchSpec;

pub(crate) fn verl(args: &VerlAssetsArgs) -> Result<ExitStatus, CommandError> {
    let scenario = crate::run::plan::load_checked(&args.scenario, &args.set)?;
    let file = args.scenario.display();
    let spec = match &scenario.backend {
        BackendSpec::Torch(spec) => spec,
        other => {
            return Err(CommandError::invalid(format!(
                "{file}: `assets verl` describes the torch engine's model, but the scenario's backend is {}",
                backend_kind(other)
            )))
        }
    };
    let model = DecoderConfig::from_spec(&spec.model).map_err(|source| Failure::AssetsModel {
        file: args.scenario.clone(),
        source,
    })?;
    let task = ArithTask::new(task_config(&scenario.driver, spec)).map_err(|source| {
        Failure::AssetsTask {
            file: args.scenario.clone(),
            source,
        }
    })?;
    let plan = DataPlan {
        rows: args.rows,
        val_rows: args.val_rows,
        seed: args.seed.unwrap_or(scenario.seed),
    };
    let files = verl_files(&model, &task, plan)?;
    write_files(&args.out, &files, args.force)?;
    let out = args.out.display();
    outln!(
        "wrote {out}/model (qwen3 config: vocab {}, hidden {}, {} layers; tokenizer) and \
         {out}/data (train.jsonl {} rows, val.jsonl {} rows; seed {}, {} distinct problems)",
        model.vocab_size,
        model.hidden,
        model.layers,
        plan.rows,
        plan.val_rows,
        plan.seed,
        task.distinct_problems()
    );
    Ok(ExitStatus::Passed)
}

/// The task the rows are drawn from: the builtin driver's; for another driver, the problems
/// the engine's model was warm-started on (`a+b` up to the warm start's largest operand).
fn task_config(driver: &DriverSpec, spec: &TorchSpec) -> ArithConfig {
    match driver {
        DriverSpec::Builtin(b) => match &b.task {
            TaskSpec::Arith(cfg) => cfg.clone(),
        },
        DriverSpec::Command(_) => ArithConfig {
            max_operand: spec.warm_start.max_operand,
            ..ArithConfig::default()
        },
    }
}

fn backend_kind(b: &BackendSpec) -> &'static str {
    match b {
        BackendSpec::Mock(_) => "mock",
        BackendSpec::Torch(_) => "torch",
        BackendSpec::Remote { .. } => "remote",
        BackendSpec::Replay { .. } => "replay",
        BackendSpec::None => "none",
    }
}
