//! The command layer: the CLI's dispatch, tracing, and one file per command under `commands/`
//! (each a short chain of calls into the layers below). Errors become exit codes here, and only
//! here: the lower layers' own error types map to an exit status in `errors.rs`.

pub mod cli;

mod commands;
mod errors;
mod judged;
mod pipeline;
mod preflight;
pub mod scale;

use crate::app::cli::{AssetsTarget, Cli, Command, GoldenAction};
use crate::model::error::{CommandError, ExitStatus};
use crate::model::util;
use crate::tools::propagate::command::MatrixOptions;

pub use commands::compare::compare_command;
pub use pipeline::run_one;

/// `rlharness check`'s outcome for `paths` (default `scenarios/`): every scenario loaded,
/// planned and refused as `run` would refuse it (the preflight), and its rules linted by the
/// judge.
pub fn check(paths: &[std::path::PathBuf]) -> crate::scenario::check::CheckOutcome {
    crate::scenario::check::check(paths, &crate::run::plan::check, &preflight::problems)
}

/// `rlharness list`'s scenarios under `root`, and whether each can run here (one that does not
/// load or plan cannot).
pub fn list(root: &std::path::Path) -> Vec<crate::scenario::check::ListEntry> {
    crate::scenario::check::list(root, &crate::run::plan::check)
}

pub fn init_tracing(verbose: u8) {
    // `--color`: by default colours only on a terminal, and never with `NO_COLOR` set
    // (no-color.org): a CI log or a file gets plain text.
    rlharness_arctic::logging::init_tracing(verbose, util::quiet(), util::stderr_color());
}

/// Run the parsed command line and return the exit status to use.
pub fn main(cli: Cli) -> ExitStatus {
    // The trainer's side of a network namespace: no runtime, no logging of its own; it ends as
    // the trainer ended.
    if let Command::NetnsExec {
        listen,
        bridge,
        command,
    } = &cli.command
    {
        let carry = listen.as_deref().zip(bridge.as_deref());
        match crate::run::netns::exec_inside(carry, command) {
            Ok(code) => std::process::exit(code),
            Err(e) => {
                errln!("error: {e}");
                return ExitStatus::RunFailed;
            }
        }
    }
    util::Ui::from_env(cli.quiet, cli.color).install();
    init_tracing(cli.verbose);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: failed to start the async runtime: {e}");
            return ExitStatus::RunFailed;
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(status) => status,
        Err(e) => {
            errln!("error: {e}");
            util::annotate_message("rlharness", &e.message);
            e.status
        }
    }
}

async fn dispatch(command: Command) -> Result<ExitStatus, CommandError> {
    match command {
        Command::Check { paths, format } => Ok(commands::check::check(&paths, format)),
        Command::List {
            root,
            tag,
            filter,
            format,
        } => commands::list::list(&root, &tag, filter.as_deref(), format),
        Command::Serve(args) => commands::serve::serve(args).await,
        Command::Run(args) => commands::run::run(args).await,
        Command::JobEntry(args) => commands::job_entry::job_entry(args).await,
        Command::Record(args) => commands::record::record(args).await,
        Command::Golden {
            action: GoldenAction::Calibrate(args),
            golden,
        } => commands::calibrate::calibrate(*args, golden.as_deref()).await,
        Command::Golden {
            action: GoldenAction::Audit(args),
            golden,
        } => commands::audit::audit(&args, golden.as_deref()),
        Command::Golden { action, golden } => commands::golden::golden(action, golden.as_deref()),
        Command::Compare {
            run,
            run2,
            golden,
            format,
        } => commands::compare::compare(&run, run2.as_deref(), golden.as_deref(), format),
        Command::History {
            dirs,
            golden,
            out,
            min_change,
            overlay,
            format,
        } => commands::history::history(
            &dirs,
            golden.as_deref(),
            &out,
            min_change / 100.0,
            overlay,
            format,
        ),
        Command::Bisect(args) => commands::bisect::bisect(args).await,
        Command::Proxy(args) => commands::proxy::proxy(args).await,
        Command::NetnsExec { .. } => Err(CommandError::invalid(
            "internal: netns-exec runs before the runtime starts",
        )),
        Command::Assets {
            target: AssetsTarget::Verl(args),
        } => commands::assets::verl(&args),
        Command::Propagate {
            scenario,
            out,
            set,
            until,
            jobs,
            group: _,
            no_group,
            require_observed,
            knobs,
            conditions,
            no_progress,
            ray,
        } => {
            let options = MatrixOptions {
                until,
                jobs,
                group: !no_group,
                require_observed,
                knobs,
                conditions,
                progress: !no_progress,
            };
            commands::propagate::propagate(&scenario, &out, &set, &options, ray).await
        }
    }
}

/// `CI=true` (or `1`): the harness never writes the golden store.
pub(crate) fn ci_env() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
