//! One function per command, chaining the stages. Errors become exit codes here.

use crate::cli::{Cli, Command};
use crate::error::{CommandError, ExitStatus};

pub fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Run the parsed command line and return the exit status to use.
pub fn main(cli: Cli) -> ExitStatus {
    init_tracing(cli.verbose);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitStatus::RunFailed;
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("error: {e}");
            e.status
        }
    }
}

async fn dispatch(command: Command) -> Result<ExitStatus, CommandError> {
    match command {
        Command::Check { paths } => Ok(check(&paths)),
        Command::List { root } => {
            print!(
                "{}",
                crate::spec::check::render_list(&crate::spec::check::list(&root))
            );
            Ok(ExitStatus::Passed)
        }
        Command::Serve(args) => serve(args).await,
        other => Err(CommandError::invalid(format!(
            "command not available yet: {other:?}"
        ))),
    }
}

/// `rlharness check`: every scenario validated, every backend file linted; exit 2 on any error.
pub fn check(paths: &[std::path::PathBuf]) -> ExitStatus {
    let outcome = crate::spec::check::check(paths);
    print!("{}", crate::spec::check::render_check(&outcome));
    if outcome.is_ok() {
        ExitStatus::Passed
    } else {
        ExitStatus::InvalidInput
    }
}

/// The scenario a `serve` or `proxy` command takes its settings from, if one is named.
fn load_optional_scenario(
    path: Option<&std::path::Path>,
    set: &[String],
) -> Result<Option<crate::spec::Scenario>, CommandError> {
    match path {
        None => Ok(None),
        Some(p) => crate::spec::load_scenario(p, set)
            .map(Some)
            .map_err(|e| CommandError::invalid(e.to_string())),
    }
}

async fn serve(args: crate::cli::ServeArgs) -> Result<ExitStatus, CommandError> {
    let scenario = load_optional_scenario(args.scenario.as_deref(), &args.set)?;
    let seed = scenario.as_ref().map_or(1, |s| s.seed);
    match args.kind {
        crate::cli::ServeKind::Mock => {
            let script = match scenario.map(|s| s.backend) {
                None => crate::backend::MockScript::default(),
                Some(crate::backend::BackendSpec::Mock(script)) => script,
                Some(other) => {
                    return Err(CommandError::invalid(format!(
                        "`serve mock` needs a scenario with a mock backend, not {other:?}"
                    )))
                }
            };
            crate::backend::mock::serve_mock_standalone(&args.host, args.port, script, seed)
                .await
                .map_err(|e| CommandError::run_failed(format!("mock server: {e}")))?;
            Ok(ExitStatus::Passed)
        }
        crate::cli::ServeKind::Torch => serve_torch(args, scenario, seed).await,
    }
}

#[cfg(not(feature = "torch"))]
async fn serve_torch(
    _args: crate::cli::ServeArgs,
    _scenario: Option<crate::spec::Scenario>,
    _seed: u64,
) -> Result<ExitStatus, CommandError> {
    Err(CommandError::invalid(
        "`serve torch` needs a build with the cargo feature `torch`",
    ))
}

#[cfg(feature = "torch")]
async fn serve_torch(
    _args: crate::cli::ServeArgs,
    _scenario: Option<crate::spec::Scenario>,
    _seed: u64,
) -> Result<ExitStatus, CommandError> {
    Err(CommandError::invalid("`serve torch` is not wired yet"))
}
