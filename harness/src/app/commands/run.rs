//! `rlharness run`: every scenario, here or on Ray, with one combined verdict.

use std::path::{Path, PathBuf};

use crate::app::ci_env;
use crate::app::cli::{Executor, RunArgs};
use crate::app::errors::Failure;
use crate::app::scale::local::{self, LocalMatrix};
use crate::app::scale::{index, ray};
use crate::judge::seeds::parse_seed_range;
use crate::model::error::{CommandError, ExitStatus};
use crate::model::util;
use crate::run::runner::RunOptions;
use rlharness_arctic::fsx;

/// The options of `rlharness run` that apply to every scenario.
/// The golden store is found from `first`, the first scenario selected.
fn run_options(args: &RunArgs, first: Option<&Path>) -> RunOptions {
    RunOptions {
        update_golden: args.update_golden,
        ci: ci_env(),
        direct: args.direct,
        label: args.label.clone(),
        stop_at: args.stop_at,
        experiment_name: args.experiment_name.clone(),
        tensorboard: args.tensorboard.clone(),
        ..args.common.options(first.unwrap_or(Path::new("")))
    }
}

/// `rlharness run`: every scenario, side by side up to `--jobs` here or as Ray jobs
/// (`--executor ray`); one combined verdict in OUT/index.md, index.html and junit.xml; the
/// worst exit status wins.
pub(crate) async fn run(args: RunArgs) -> Result<ExitStatus, CommandError> {
    if args.format == crate::app::cli::OutputFormat::Json {
        util::put_results_on_stderr();
    }
    let files = if args.rerun_failed {
        let failed = index::failed_files(&args.common.out)?;
        if failed.is_empty() {
            util::note!(
                "run --rerun-failed: every scenario of the last run into {} passed: nothing to run",
                args.common.out.display()
            );
            return Ok(ExitStatus::Passed);
        }
        super::select::select(&failed, &[], None)?
    } else {
        super::select::select(&args.scenarios, &args.tag, args.filter.as_deref())?
    };
    let opts = run_options(&args, files.first().map(PathBuf::as_path));
    if files.is_empty() {
        return Err(CommandError::invalid("no scenario files given"));
    }
    let seeds = match &args.seeds {
        Some(r) => {
            let list = parse_seed_range(r)?;
            if list.len() < 2 {
                return Err(CommandError::invalid(format!(
                    "--seeds {r}: a multi-seed verdict needs at least 2 seeds (use --seed for one)"
                )));
            }
            Some(list)
        }
        None => None,
    };
    if args.tensorboard.is_some() && args.ray.executor == Executor::Ray {
        return Err(CommandError::invalid(
            "--tensorboard writes on this host: with --executor ray set `metrics.tensorboard: \
             true` in the scenario instead (RUN/tensorboard/ comes back with the run directory)",
        ));
    }
    if args.jobs == 0 {
        return Err(CommandError::invalid("--jobs 0: at least one job"));
    }
    if !opts.golden.is_dir() {
        util::note!(
            "note: no golden store at {} yet{}: every scenario with golden rules will have no \
             golden (exit 4)",
            opts.golden.display(),
            if args.common.golden.is_some() {
                " (check --golden)"
            } else {
                ""
            }
        );
    }
    let mut entries = match args.ray.executor {
        Executor::Local => {
            let matrix = LocalMatrix {
                jobs: args.jobs,
                seeds,
                seed_jobs: args.jobs,
            };
            local::run_matrix(&files, &opts, &matrix).await
        }
        Executor::Ray => ray::run_matrix(&files, &args).await?,
    };
    if args.fail_on_skip {
        // The index and JUnit say what the exit status says: a skip is a failed check here.
        for e in entries.iter_mut().filter(|e| e.skipped) {
            e.status = e.status.worst(ExitStatus::CheckFailed);
            e.summary = format!("skipped, a failure under --fail-on-skip: {}", e.summary);
        }
    }
    fsx::create_dir_all(&args.common.out)?;
    // The combined index and JUnit of `--out` keep what earlier runs into it ran; the exit
    // status and the printed verdict are this run's.
    let merged = index::merged_with_earlier(&args.common.out, &entries);
    index::write_index(&args.common.out, &merged).map_err(Failure::CombinedVerdict)?;
    if merged.len() > entries.len() {
        util::note!(
            "{}: the combined index and junit.xml also list {} scenario(s) of earlier runs into \
             it (this run's exit status is its own)",
            args.common.out.display(),
            merged.len() - entries.len()
        );
    }
    match args.format {
        crate::app::cli::OutputFormat::Text => {
            outln!("{}", index::tally(&args.common.out, &entries))
        }
        crate::app::cli::OutputFormat::Json => {
            errln!("{}", index::tally(&args.common.out, &entries));
            outln!("{:#}", index::json_document(&args.common.out, &entries));
        }
    }
    let skipped: Vec<String> = entries
        .iter()
        .filter(|e| e.skipped)
        .map(|e| e.scenario.clone())
        .collect();
    Ok(fail_on_skip(
        index::worst(&entries),
        &skipped,
        args.fail_on_skip,
    ))
}

/// `--fail-on-skip`: a skipped scenario is a failed check (exit 1), so a run where nothing ran
/// cannot be green. Worse statuses (2, 3, 4) keep winning.
pub(crate) fn fail_on_skip(worst: ExitStatus, skipped: &[String], enabled: bool) -> ExitStatus {
    if !enabled || skipped.is_empty() {
        return worst;
    }
    errln!(
        "error: --fail-on-skip: {} scenario(s) skipped: {}",
        skipped.len(),
        skipped.join(", ")
    );
    worst.worst(ExitStatus::CheckFailed)
}
