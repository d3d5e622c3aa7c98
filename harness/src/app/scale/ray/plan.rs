//! Planning: each scenario as a job, and the one package of files every job shares.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::GOLDEN_DIR;
use crate::app::scale::bundle::{self, Files};
use crate::app::scale::index::Entry;
use crate::app::scale::local;
use crate::cli::RunArgs;
use crate::error::CommandError;

/// One scenario as a job.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    /// Its place among the runs asked for.
    pub(super) index: usize,
    pub(super) file: PathBuf,
    /// The seed of this job, when the runs asked for name one each (a calibration's seeds).
    pub(super) seed: Option<u64>,
    /// The scenario file's path inside the package.
    pub(super) in_package: String,
    pub(super) name: String,
    pub(super) gpus: u32,
    pub(super) gpu_name: Option<String>,
    pub(super) queue: Duration,
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

/// The planned jobs, the entries of scenarios that did not load (by file index), and the
/// package's files.
pub(super) type Planning = (Vec<Planned>, Vec<(usize, Entry)>, Files);

/// Plan every run (a scenario file, with a seed of its own or the run's) and build the one
/// package they share. Scenarios that do not load are entries already (exit 2), never
/// submitted.
pub(super) fn plan(
    runs: &[(PathBuf, Option<u64>)],
    args: &RunArgs,
) -> Result<Planning, CommandError> {
    let mut planned = Vec::new();
    let mut invalid = Vec::new();
    let mut files_out: Files = Vec::new();
    let mut roots: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut goldens = std::collections::BTreeSet::new();
    let mut torch = false;
    for (i, (file, seed)) in runs.iter().enumerate() {
        let scenario = match crate::spec::load_scenario(file, &args.common.set) {
            Ok(s) => s,
            Err(e) => {
                let err = CommandError::invalid(e.to_string());
                invalid.push((i, local::error_entry(file, &err, "not submitted", 0.0)));
                continue;
            }
        };
        torch |= matches!(scenario.backend, crate::backend::BackendSpec::Torch(_));
        let root = crate::spec::config::scenarios_root(file);
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
            file: file.clone(),
            seed: *seed,
            in_package: format!("{in_root}/{}", rel.to_string_lossy().replace('\\', "/")),
            name: scenario.name.clone(),
            gpus: scenario.requires.gpus,
            gpu_name: scenario.requires.gpu_name.clone(),
            queue: scenario
                .timeouts
                .queue
                .unwrap_or(crate::spec::DEFAULT_QUEUE_TIMEOUT),
        });
    }
    let pack = |e: bundle::BundleError| CommandError::run_failed(format!("the job package: {e}"));
    if args.ray.remote_bin.is_none() {
        let exe = std::env::current_exe().map_err(|e| {
            CommandError::run_failed(format!("cannot find this executable to ship it: {e}"))
        })?;
        files_out.push(("rlharness".into(), exe));
        if torch {
            files_out.push((
                crate::backend::child::EXE_NAME.into(),
                crate::backend::child::locate()?,
            ));
        }
    }
    for (root, name) in &roots {
        files_out.extend(bundle::files_under(root, name).map_err(pack)?);
    }
    for g in goldens {
        let dir = crate::cli::golden_store(
            args.common.golden.as_deref(),
            args.scenarios.first().map(std::path::PathBuf::as_path),
        )
        .join(&g);
        if dir.is_dir() {
            files_out
                .extend(bundle::files_under(&dir, &format!("{GOLDEN_DIR}/{g}")).map_err(pack)?);
        }
    }
    Ok((planned, invalid, files_out))
}
