//! `rlharness record`: a scenario's wire traffic kept as its cassette.

use crate::app::ci_env;
use crate::app::cli::RecordArgs;
use crate::app::errors::Failure;
use crate::model::error::{CommandError, ExitStatus};
use crate::run::backend::{replay, BackendSpec};
use crate::run::plan::RunPlan;
use crate::run::runner::{self, RunEnd};
use rlharness_arctic::fsx;

/// `rlharness record`: run a scenario through the proxy, keep its whole wire traffic as a
/// cassette and install it as `GOLDEN/<scenario>/<hardware>/cassette/` (replacing the old one)
/// once the run completed. The run is not judged: a recording of a few steps is not a
/// convergence run.
pub(crate) async fn record(args: RecordArgs) -> Result<ExitStatus, CommandError> {
    use rlharness_arctic::cassette::{Cassette, META_FILE, METRICS_FILE};
    let opts = runner::RunOptions {
        live_judge: Some(crate::judge::FailFast::handed()),
        ..args.common.options(&args.scenario)
    };
    if ci_env() {
        return Err(CommandError::invalid(
            "refusing to record under CI=true: CI never writes the golden store; record \
             locally and commit the cassette",
        ));
    }
    let scenario = crate::run::plan::load_checked(&args.scenario, &opts.set)?;
    if matches!(
        scenario.backend,
        BackendSpec::Replay { .. } | BackendSpec::None
    ) {
        return Err(CommandError::invalid(format!(
            "{}: `record` needs a scenario with a backend to record (mock, torch or remote)",
            args.scenario.display()
        )));
    }
    let plan = RunPlan::new(scenario, opts.seed, opts.steps)?;
    let unmet = plan.scenario.requires.unmet();
    if !unmet.is_empty() {
        return Err(CommandError::invalid(format!(
            "{}: cannot record here: {}",
            args.scenario.display(),
            unmet.join("; ")
        )));
    }
    let executed = runner::execute_recording(plan, &opts).await?;
    let recorded = executed.run_dir.join("cassette");
    if executed.end != RunEnd::Completed {
        return Err(CommandError::run_failed(format!(
            "the recording run did not complete ({}); the partial cassette stays in {} and no \
             cassette was installed",
            executed
                .end
                .reason()
                .unwrap_or_else(|| executed.end.status().into()),
            recorded.display()
        )));
    }
    let meta = serde_json::json!({
        "format": "rlharness-cassette/1",
        "scenario": executed.plan.scenario.name,
        "hardware": executed.env.hardware,
        "device": executed.env.device,
        "seed": executed.plan.scenario.seed,
        "steps": executed.plan.scenario.steps,
        "plan_hash": executed.plan.plan_hash,
        "harness_version": executed.manifest.harness_version,
        "git_commit": executed.manifest.git_commit,
        "torch_version": executed.env.torch_version,
        "recorded": executed.ended.to_rfc3339(),
    });
    let text = serde_json::to_string_pretty(&meta).map_err(Failure::RecordMeta)?;
    fsx::write_atomic(&recorded.join(META_FILE), text.as_bytes()).map_err(Failure::RecordWrite)?;
    std::fs::copy(
        executed.run_dir.join("metrics.csv"),
        recorded.join(METRICS_FILE),
    )
    .map_err(Failure::RecordCopy)?;
    // What is installed must read back: every body decompressed and checked.
    let cassette = Cassette::load(&recorded).map_err(Failure::RecordCassette)?;
    let target = opts
        .golden
        .join(&executed.plan.scenario.name)
        .join(&executed.env.hardware)
        .join("cassette");
    let replaced = target.exists();
    if replaced && !args.force {
        return Err(CommandError::invalid(format!(
            "{} already holds a cassette: pass --force to replace it (this recording stays in \
             {})",
            target.display(),
            recorded.display()
        )));
    }
    replay::install_cassette(&recorded, &target).map_err(Failure::RecordInstall)?;
    outln!(
        "{}: recorded {} exchanges ({} steps, {:.1} MiB of bodies) into {}{}",
        executed.plan.scenario.name,
        cassette.exchanges.len(),
        executed.plan.scenario.steps,
        cassette.body_bytes() as f64 / (1024.0 * 1024.0),
        target.display(),
        if replaced {
            " (replacing the cassette there)"
        } else {
            ""
        }
    );
    Ok(ExitStatus::Passed)
}
