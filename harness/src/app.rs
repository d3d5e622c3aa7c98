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
    Err(CommandError::invalid(format!(
        "command not available yet: {command:?}"
    )))
}
