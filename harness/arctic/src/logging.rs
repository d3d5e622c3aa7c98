//! The log subscriber of both executables (`rlharness`, `rlharness-torch`): logs go to stderr,
//! filtered by `RUST_LOG` when it is set, else by the `-v` count.

use std::io::IsTerminal;

/// Install the subscriber (a second call does nothing). `-v` and `-vv` raise the project's own
/// logs only; the HTTP and runtime libraries stay at warnings until `-vvv` (at `-vv` they wrote
/// thousands of lines per run). `quiet` (`-q`): errors only. `ansi`: colours.
pub fn init_tracing(verbose: u8, quiet: bool, ansi: bool) {
    let default = match verbose {
        0 if quiet => "error",
        0 => "warn",
        1 => "warn,rlharness=info,rlharness_arctic=info,rlharness_torch=info",
        2 => "warn,rlharness=debug,rlharness_arctic=debug,rlharness_torch=debug",
        3 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Colours on stderr by default: on a terminal, unless `NO_COLOR` is set to a non-empty value
/// (no-color.org), so a CI log or a file gets plain text.
pub fn stderr_color_default() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
