//! The command driver: an external trainer (verl's launcher, or anything that prints like it)
//! started in its own process group, its config passed as Hydra overrides, its metrics read
//! from verl's file logger or console logger, its output kept in the run directory.
//!
//! The trainer is never trusted to end: the runner's watchdog stops it through
//! [`Trainer::terminate`], which signals the whole process group (Ray spawns workers that
//! outlive a killed launcher), TERM first and KILL after a grace period.
//!
//! `hydra` writes the overrides, `trainer` starts and supervises the trainer, `group` signals
//! and watches its process group.

pub(crate) mod envwatch;
mod group;
mod hydra;
mod trainer;

pub use group::group_alive;
pub(crate) use hydra::{hydra_quote, hydra_value, HARNESS_KEYS};
pub(crate) use trainer::{start, Trainer};

pub use crate::scenario::blocks::CommandDriverSpec;
pub(crate) use crate::scenario::blocks::MetricsSource;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Lines of trainer output a failure report keeps.
pub(crate) const TAIL_LINES: usize = 50;
/// The address the Arctic client uses (`localhost:7000`): where the recording proxy listens by
/// default, so the client reaches the proxy without any change to the trainer.
pub(crate) const ARCTIC_CLIENT_ADDR: &str = "127.0.0.1:7000";
/// The file verl's file logger writes, inside the run directory.
pub(crate) const JSONL_FILE: &str = "verl_metrics.jsonl";
/// verl's step-0 validation record (`val-*` keys), kept apart from `metrics.csv`.
pub(crate) const VALIDATION_FILE: &str = "val_before_train.json";
/// How often the JSONL file is polled for new lines.
const JSONL_POLL: Duration = Duration::from_millis(200);
/// How often the trainer's processes are read for the watched variables ([`envwatch`]).
const ENV_POLL: Duration = Duration::from_millis(500);
/// How long the trainer's pipes may stay open after it exited (a grandchild holding them).
const PIPE_DRAIN: Duration = Duration::from_secs(2);

impl CommandDriverSpec {
    /// The program to start: a relative path with a `/` is relative to the scenario file's
    /// folder; a bare name is looked up on PATH when it starts.
    pub(crate) fn program(&self, scenario_file: &Path) -> PathBuf {
        let arg = self.command.first().cloned().unwrap_or_default();
        if arg.contains('/') && Path::new(&arg).is_relative() {
            scenario_file.parent().unwrap_or(Path::new("")).join(&arg)
        } else {
            PathBuf::from(&arg)
        }
    }

    /// The program as it would start here: an executable file at its path, or on the PATH the
    /// trainer gets (the scenario's `env.PATH`, else this process's); or why not.
    pub(crate) fn resolve_program(&self, scenario_file: &Path) -> Result<PathBuf, ProgramError> {
        use std::os::unix::fs::PermissionsExt;
        let program = self.program(scenario_file);
        let executable = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if program.components().count() > 1 || program.is_absolute() {
            return match std::fs::metadata(&program) {
                Err(source) => Err(ProgramError::Missing { program, source }),
                Ok(_) if !executable(&program) => Err(ProgramError::NotExecutable(program)),
                Ok(_) => Ok(program),
            };
        }
        let path = match self.env.get("PATH") {
            Some(p) => std::ffi::OsString::from(p),
            None => std::env::var_os("PATH").unwrap_or_default(),
        };
        std::env::split_paths(&path)
            .map(|d| d.join(&program))
            .find(|p| executable(p))
            .ok_or(ProgramError::NotOnPath(program))
    }
}

/// Why the trainer program would not start here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProgramError {
    #[error(
        "the trainer program {} does not exist ({source}); a relative path is relative to the \
         scenario file's folder",
        program.display()
    )]
    Missing {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("the trainer program {} is not an executable file", .0.display())]
    NotExecutable(PathBuf),
    #[error("no program `{}` on PATH: install it, or give its path", .0.display())]
    NotOnPath(PathBuf),
}

// ---------------------------------------------------------------------------------------------
// Launching.

/// Everything needed to start the trainer, decided before anything starts (tests read it).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerLaunch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub(crate) metrics_from: MetricsSource,
    /// Absolute: verl's file logger runs in a Ray actor with another working directory.
    pub(crate) jsonl_path: PathBuf,
    pub(crate) run_dir: PathBuf,
    /// The steps asked of it (`trainer.total_training_steps`): one that exits 0 before the
    /// last of them fails the run.
    pub(crate) steps: u64,
    /// The variables whose values in the trainer's processes are recorded
    /// ([`envwatch`]), and the values the scenario asked for.
    pub(crate) watch_env: Vec<String>,
    pub(crate) asked_env: BTreeMap<String, String>,
}

impl TrainerLaunch {
    /// What `run.json` records of the start: the argv, and the variables the harness set (a
    /// secret's value as a digest).
    pub(crate) fn recorded(&self) -> crate::model::rundir::TrainerCommand {
        crate::model::rundir::TrainerCommand {
            argv: std::iter::once(self.program.display().to_string())
                .chain(self.args.iter().cloned())
                .collect(),
            env: self
                .env
                .iter()
                .map(|(k, v)| (k.clone(), envwatch::shown(k, v)))
                .collect(),
        }
    }
}

/// Replace the experiment name the harness passes (`trainer.experiment_name=...`).
pub(crate) fn set_experiment_name(launch: &mut TrainerLaunch, name: &str) {
    for a in launch.args.iter_mut() {
        if a.starts_with("trainer.experiment_name=") {
            *a = format!("trainer.experiment_name={}", hydra_quote(name));
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandDriverError {
    #[error("cannot start the trainer `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests;
