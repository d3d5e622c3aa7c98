//! Planning: each run as a job, and the one package of files every job shares.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{GOLDEN_DIR, SOURCES_DIR};
use crate::app::cli::RunArgs;
use crate::app::errors::Failure;
use crate::app::scale::bundle::{self, Files};
use crate::app::scale::index::Entry;
use crate::app::scale::local;
use crate::model::error::CommandError;
use crate::run::runner::StopAt;

/// One run submitted as one Ray job: a scenario file, and what this run sets on top of the
/// invocation's own options (`RunArgs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JobRun {
    pub(crate) file: PathBuf,
    /// Its seed, in place of `--seed` (one seed of a calibration or of a bisect's commit).
    pub(crate) seed: Option<u64>,
    /// `--set` values after the invocation's own (a propagation trial's overrides).
    pub(crate) set: Vec<String>,
    /// Its steps, in place of `--steps`.
    pub(crate) steps: Option<u64>,
    /// Where it stops on purpose (a propagation trial's reach).
    pub(crate) stop_at: Option<StopAt>,
    /// The experiment name a command trainer gets (a propagation matrix's, shared by its trials).
    pub(crate) experiment_name: Option<String>,
    /// Its name in the lines printed; default: the scenario's, with its own seed.
    pub(crate) label: Option<String>,
}

impl JobRun {
    /// A run of `file` with the invocation's options, at `seed` when given.
    pub(crate) fn of(file: &Path, seed: Option<u64>) -> JobRun {
        JobRun {
            file: file.to_path_buf(),
            seed,
            ..JobRun::default()
        }
    }
}

/// Told of each run as its job ends: its index among the runs asked for, and its entry.
pub(crate) type OnDone = Arc<dyn Fn(usize, &Entry) + Send + Sync>;

/// How one call's jobs run, besides their options.
#[derive(Clone, Default)]
pub(crate) struct JobBatch {
    /// At most this many jobs in flight (submitted and not yet ended); 0: every job at once.
    pub(crate) in_flight: usize,
    /// Trainer source checkouts shipped in the package: (variable, folder here). Each job's run
    /// gets `--set driver.env.VAR=<the folder's place in the job's working directory>` (a
    /// bisect's worktree of one commit, which no other machine can see).
    pub(crate) sources: Vec<(String, PathBuf)>,
    /// In place of printing each run's entry and showing each job's progress: another
    /// command's matrix (propagation trials), which shows its own progress.
    pub(crate) on_done: Option<OnDone>,
    /// Set on Ctrl-C, and shared by a command's calls (a matrix's rounds, a bisect's commits):
    /// once set, a call submits nothing more.
    pub(crate) interrupted: Arc<std::sync::atomic::AtomicBool>,
}

/// One run as a job.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    /// Its place among the runs asked for.
    pub(crate) index: usize,
    pub(crate) run: JobRun,
    /// The scenario file's path inside the package.
    pub(crate) in_package: String,
    pub(crate) name: String,
    pub(crate) gpus: u32,
    pub(crate) gpu_name: Option<String>,
    pub(crate) queue: Duration,
}

impl Planned {
    pub(crate) fn file(&self) -> &Path {
        &self.run.file
    }
}

/// The package every job of a call shares: its files, those of them to mark executable (a
/// `working_dir` unpacked by Ray loses the bit), and where the shipped sources are.
#[derive(Debug, Clone, Default)]
pub(crate) struct Package {
    pub(crate) files: Files,
    pub(crate) executables: Vec<String>,
    /// The shipped source checkouts: (variable, the folder's path inside the package, its
    /// `git describe` here, which its copy cannot tell).
    pub(crate) sources: Vec<(String, String, Option<String>)>,
}

/// The package's path of a scenarios folder (kept as given when it is a relative path inside
/// the current directory, so `run.json` names the same file as a local run).
pub(super) fn package_root(root: &Path, k: usize) -> String {
    let rel = if root.is_absolute() {
        std::env::current_dir()
            .ok()
            .and_then(|cwd| root.strip_prefix(cwd).ok().map(Path::to_path_buf))
    } else {
        Some(root.to_path_buf())
    };
    match rel.filter(|r| {
        !r.as_os_str().is_empty()
            && r.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
    }) {
        Some(r) => r.to_string_lossy().replace('\\', "/"),
        None => format!("roots/{k}"),
    }
}

/// The planned jobs, the entries of scenarios that did not load (by run index), and the
/// package.
pub(super) type Planning = (Vec<Planned>, Vec<(usize, Entry)>, Package);

/// Plan every run and build the one package they share. Scenarios that do not load are
/// entries already (exit 2), never submitted.
pub(super) fn plan(
    runs: &[JobRun],
    args: &RunArgs,
    batch: &JobBatch,
) -> Result<Planning, CommandError> {
    let mut planned = Vec::new();
    let mut invalid = Vec::new();
    let mut files_out: Files = Vec::new();
    let mut roots: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut goldens = std::collections::BTreeSet::new();
    let mut torch = false;
    for (i, run) in runs.iter().enumerate() {
        let file = &run.file;
        let mut set = args.common.set.clone();
        set.extend(run.set.iter().cloned());
        let scenario = match crate::run::plan::load_checked(file, &set) {
            Ok(s) => s,
            Err(e) => {
                let err = CommandError::from(e);
                invalid.push((i, local::error_entry(file, &err, "not submitted", 0.0)));
                continue;
            }
        };
        torch |= matches!(scenario.backend, crate::run::backend::BackendSpec::Torch(_));
        let root = crate::scenario::config::scenarios_root(file);
        let n = roots.len();
        let in_root = roots
            .entry(root.clone())
            .or_insert_with(|| package_root(&root, n))
            .clone();
        let rel = file.strip_prefix(&root).unwrap_or(file);
        goldens.insert(scenario.name.clone());
        if let Some(g) = scenario.selftest.as_ref().and_then(|s| s.golden.clone()) {
            goldens.insert(g);
        }
        planned.push(Planned {
            index: i,
            run: run.clone(),
            in_package: format!("{in_root}/{}", rel.to_string_lossy().replace('\\', "/")),
            name: scenario.name.clone(),
            gpus: scenario.requires.gpus,
            gpu_name: scenario.requires.gpu_name.clone(),
            queue: scenario
                .timeouts
                .queue
                .unwrap_or(crate::scenario::DEFAULT_QUEUE_TIMEOUT),
        });
    }
    let pack = Failure::Package;
    if args.ray.remote_bin.is_none() {
        let exe = std::env::current_exe().map_err(Failure::NoExecutable)?;
        files_out.push(("rlharness".into(), exe));
        if torch {
            files_out.push((
                rlharness_arctic::child::EXE_NAME.into(),
                crate::run::backend::child::locate()?,
            ));
        }
    }
    for (root, name) in &roots {
        files_out.extend(bundle::files_under(root, name).map_err(pack)?);
    }
    for g in goldens {
        let dir = crate::app::cli::golden_store(
            args.common.golden.as_deref(),
            args.scenarios.first().map(std::path::PathBuf::as_path),
        )
        .join(&g);
        if dir.is_dir() {
            files_out
                .extend(bundle::files_under(&dir, &format!("{GOLDEN_DIR}/{g}")).map_err(pack)?);
        }
    }
    let mut sources = Vec::new();
    for (var, dir) in &batch.sources {
        let in_package = source_place(var)?;
        files_out.extend(
            bundle::files_under(dir, &in_package)
                .map_err(pack)?
                .into_iter()
                // A worktree's `.git` names the repository here, which the job cannot see.
                .filter(|(n, _)| {
                    let rel = &n[in_package.len() + 1..];
                    rel != ".git" && !rel.starts_with(".git/")
                }),
        );
        let described = crate::run::runner::env::describe_checkout(dir);
        sources.push((var.clone(), in_package, described));
    }
    let executables = executables(&files_out);
    Ok((
        planned,
        invalid,
        Package {
            files: files_out,
            executables,
            sources,
        },
    ))
}

/// Where the package puts the sources `var` names: `sources/VAR`; a variable name is the
/// only thing the job's shell line takes from it unquoted.
fn source_place(var: &str) -> Result<String, CommandError> {
    if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(CommandError::invalid(format!(
            "the source setting {var:?} is not an environment variable name (letters, digits, \
             `_`)"
        )));
    }
    Ok(format!("{SOURCES_DIR}/{var}"))
}

/// The package's files that are executable here (the executables shipped, a trainer's
/// launcher scripts).
fn executables(files: &Files) -> Vec<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        files
            .iter()
            .filter(|(_, p)| {
                std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
            })
            .map(|(n, _)| n.clone())
            .collect()
    }
    #[cfg(not(unix))]
    {
        let _ = files;
        Vec::new()
    }
}
