//! rlharness: reproducible smoke and convergence scenarios for LLM RL training integrations.
//!
//! Data flows one way: `spec` (scenario files) -> `plan` (RunPlan with provenance) -> `run`
//! (driver -> proxy -> backend) -> `metrics` -> `compare` (golden rules, expressions) -> `report`.
//! See `docs/architecture.md`.
//!
//! # Public surface
//!
//! Everything is `pub(crate)` unless a user outside the crate needs it: the `rlharness`
//! binary (`src/main.rs`), the torch backend (`harness/torch`), the integration tests, the
//! benches and the fuzz targets. What they use:
//!
//! - [`cli`], [`app`]: the command line (`Cli`, `app::main`, `run_one`, `compare_command`,
//!   `init_tracing`) and `app::scale::ray` (the Ray client).
//! - [`spec`], [`plan`]: loading and checking scenario files (`load_scenario`, `spec::check`,
//!   `spec::lint`, the stages' blocks `spec::blocks`), planning a run (`RunPlan`,
//!   `plan::load_checked`, `plan::launch`).
//! - [`runner`], [`events`]: executing a plan (`execute`, `RunOptions`, `Executed`, `RunEnd`,
//!   the `LiveJudge` a caller hands in) and its progress events.
//! - [`backend`]: the scenario's `BackendSpec` (the scenario's, re-exported from
//!   `spec::blocks`), the replay backend, starting the torch child (`backend::child`). What the
//!   harness shares with the torch engine and Arctic clients (the DSSST1 codec and API types,
//!   `wire`; the task, `task`; file helpers, `fsx`; the `Engine` trait, the mock, the HTTP
//!   server, the torch spec) is the Arctic crate's, and the harness uses it by that crate's
//!   name (`rlharness_arctic::wire`), never through an alias.
//! - [`driver`], [`proxy`], [`capture`]: the built-in and command drivers, the recording
//!   proxy, trainer-log parsing.
//! - [`metrics`], [`compare`], [`golden`], [`report`], [`propagate`]: metric tables, judging
//!   (`judge_run`, `compare::expr`, `compare::FailFast`), golden stores, reports, knob
//!   propagation.
//! - [`rundir`]: a run directory's files as data (`RunManifest`, `run.json`; `RunStatus`).
//! - [`error`]: `CommandError`, and `ExitStatus` (the Arctic crate's, re-exported).
//!
//! `checks` (rule and expression types, re-exported through `compare`), `slot` and `util` are
//! private.

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
pub mod assets;
pub mod backend;
mod bisect;
pub mod capture;
mod checks;
pub mod cli;
pub mod compare;
pub mod driver;
pub mod error;
pub mod events;
pub mod golden;
pub mod history;
mod host;
mod knobs;
pub mod metrics;
mod netns;
pub mod plan;
pub mod propagate;
pub mod proxy;
pub mod report;
pub mod rundir;
pub mod runner;
mod slot;
pub mod spec;
mod util;
