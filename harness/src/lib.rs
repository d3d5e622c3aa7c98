//! rlharness: reproducible smoke and convergence scenarios for LLM RL training integrations.
//!
//! Data flows one way, and the crate is one folder per floor in that order: [`model`] (the
//! data every floor reads and writes: errors, metric series, rules, goldens, run directories)
//! -> [`scenario`] (scenario files) -> [`run`] (the stages, the plan, the runner: driver ->
//! proxy -> backend) -> [`judge`] (golden rules, expressions, verdicts) -> [`report`] ->
//! [`tools`] (propagation, assets, history, bisect) -> [`app`] (the commands). See
//! `docs/architecture.md`.
//!
//! # Public surface
//!
//! Everything is `pub(crate)` unless a user outside the crate needs it: the `rlharness`
//! binary (`src/main.rs`), the integration tests, the benches and the fuzz targets (the torch
//! backend, `harness/torch`, builds on the Arctic crate alone). What they use:
//!
//! - [`app`]: the command line (`app::cli::Cli`, `app::main`, `run_one`, `compare_command`,
//!   `init_tracing`) and `app::scale::ray` (the Ray client).
//! - [`scenario`], `run::plan`: loading and checking scenario files (`load_scenario`,
//!   `scenario::check`, `scenario::lint`, the stages' blocks `scenario::blocks`), planning a
//!   run (`RunPlan`, `plan::launch`).
//! - `run::runner`, `model::events`: executing a plan (`execute`, `RunOptions`, `Executed`,
//!   `RunEnd`, the `LiveJudge` a caller hands in) and its progress events.
//! - `run::backend`: the scenario's `BackendSpec` (the scenario's, re-exported from
//!   `scenario::blocks`), the replay backend, starting the torch child (`backend::child`). What
//!   the harness shares with the torch engine and Arctic clients (the DSSST1 codec and API
//!   types, `wire`; the task, `task`; file helpers, `fsx`; the `Engine` trait, the mock, the
//!   HTTP server, the torch spec) is the Arctic crate's, and the harness uses it by that
//!   crate's name (`rlharness_arctic::wire`), never through an alias.
//! - `run::driver`, `run::proxy`, `run::capture`: the built-in and command drivers, the
//!   recording proxy, trainer-log parsing.
//! - `model::metrics`, [`judge`], `model::golden`, [`report`], `tools::propagate`: metric
//!   tables, judging (`judge_run`, `judge::expr`, `judge::FailFast`), golden stores, reports,
//!   knob propagation.
//! - `model::rundir`: a run directory's files as data (`RunManifest`, `run.json`;
//!   `RunStatus`).
//! - `model::error`: `CommandError`, and `ExitStatus` (the Arctic crate's, re-exported).
//!
//! `model::checks` (rule and expression types, re-exported through `judge`), `model::slot`,
//! `model::util` and `model::host` are private to the crate.

/// `print!` that never panics: standard output may be a closed pipe (`rlharness run ... | head
/// -1`); what does not reach it is dropped, and the command goes on to write its reports and
/// exit with its own status.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `println!` that never panics (see [`out!`]).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `eprintln!` that never panics: standard error may be a closed pipe (`rlharness run ... 2>&1 |
/// head -1`); what does not reach it is dropped, and the run goes on to write its reports and
/// exit with its own status.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

pub mod app;
pub mod judge;
pub mod model;
pub mod report;
pub mod run;
pub mod scenario;
pub mod tools;
