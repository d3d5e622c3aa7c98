//! Finding a history's runs: every run directory under the folders given (a local `reports/`,
//! CI artifacts unpacked, a `--jobs` or Ray output), each judged as `compare RUN` judges it,
//! grouped by scenario and hardware and put in the order they ran.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::judge::{judge_combined, StoredRun};
use crate::model::error::ExitStatus;
use crate::model::golden::{GoldenError, GoldenStore};
use crate::model::rundir::{is_combined, RecordedVerdict, RunManifest, MANIFEST_FILE};

use super::blesses::bless_dates;
use super::trend::{analyse, RunPoint, Trend};

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{}: {source}", path.display())]
    Walk {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no run directory (a folder with a run.json) under {0}")]
    NoRuns(String),
    #[error(transparent)]
    Golden(#[from] GoldenError),
}

/// Every directory under `root` (itself included) that holds a `run.json`, or the
/// `seeds.json` of a multi-seed run (whose seeds' folders are then part of it, not runs of
/// their own). Links are not followed (a `latest` link would count a run twice), nor are
/// folders a run is still being created in (`.tmp-*`).
pub fn run_dirs(root: &Path) -> Result<Vec<PathBuf>, HistoryError> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if is_combined(&dir) {
            out.push(dir);
            continue;
        }
        if dir.join(MANIFEST_FILE).is_file() {
            out.push(dir.clone());
        }
        let entries = std::fs::read_dir(&dir).map_err(|source| HistoryError::Walk {
            path: dir.clone(),
            source,
        })?;
        for e in entries.flatten() {
            let hidden = e.file_name().to_string_lossy().starts_with(".tmp-");
            if e.file_type().is_ok_and(|t| t.is_dir()) && !hidden {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A history's group of runs: scenario and hardware.
type GroupKey = (String, String);

/// What the history read: each scenario's trend, and the run directories it could not judge.
pub struct Collected {
    pub trends: Vec<Trend>,
    pub unreadable: Vec<(PathBuf, String)>,
    /// Runs of `golden calibrate` found and left out: they measure the noise, they are not
    /// runs of the scenario.
    pub calibrations: usize,
}

/// Read, judge, group and order every run under `roots`, against the goldens of `golden_root`;
/// report change points of at least `min_change` (a fraction of the level before).
pub fn collect(
    roots: &[PathBuf],
    golden_root: &Path,
    min_change: f64,
) -> Result<Collected, HistoryError> {
    let mut dirs = Vec::new();
    for r in roots {
        dirs.extend(run_dirs(r)?);
    }
    if dirs.is_empty() {
        let names: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(HistoryError::NoRuns(names.join(", ")));
    }
    dirs.dedup();
    let mut groups: BTreeMap<GroupKey, Vec<RunPoint>> = BTreeMap::new();
    let mut unreadable = Vec::new();
    let mut calibrations = 0;
    for dir in dirs {
        if RunManifest::read(&dir).is_ok_and(|m| m.calibration) {
            calibrations += 1;
            continue;
        }
        match point_of(&dir, golden_root) {
            Ok(Some((key, point))) => groups.entry(key).or_default().push(point),
            Ok(None) => unreadable.push((dir, "a multi-seed run without a seed".into())),
            Err(e) => unreadable.push((dir, e)),
        }
    }
    let store = GoldenStore::new(golden_root);
    let mut trends = Vec::new();
    for ((scenario, hardware), mut runs) in groups {
        runs.sort_by(|a, b| (&a.started, &a.dir).cmp(&(&b.started, &b.dir)));
        let golden = store.load(&scenario, &hardware)?;
        let blesses = bless_dates(golden_root, &scenario, &hardware, golden.as_ref());
        trends.push(analyse(
            &scenario,
            &hardware,
            runs,
            golden.as_ref(),
            blesses,
            min_change,
        ));
    }
    Ok(Collected {
        trends,
        unreadable,
        calibrations,
    })
}

/// A run directory (or a multi-seed run's) judged as `compare DIR` judges it: its scenario and
/// hardware, and its point. `None` for a multi-seed run none of whose seeds ran.
fn point_of(dir: &Path, golden_root: &Path) -> Result<Option<(GroupKey, RunPoint)>, String> {
    let at_the_time = RecordedVerdict::read(dir)
        .ok()
        .map(|v| ExitStatus::from_code(v.exit_code).map_or(v.summary, |s| s.word().to_string()));
    let point = |m: &RunManifest, started: &str, status: ExitStatus, changed, tables| RunPoint {
        dir: dir.display().to_string(),
        started: started.to_string(),
        commit: m.git_commit.clone(),
        trainer: m.code_version(),
        verdict: status.word().to_string(),
        passed: status == ExitStatus::Passed,
        at_the_time: at_the_time.clone(),
        golden_changed: changed,
        tables,
    };
    if is_combined(dir) {
        let c = judge_combined(dir, golden_root).map_err(|e| e.to_string())?;
        let status = c.judged().exit_status();
        let Some((_, first)) = c.seeds.first() else {
            return Ok(None);
        };
        let key = (c.manifest.scenario.clone(), first.manifest.hardware.clone());
        let tables = c.seeds.iter().map(|(_, r)| r.metrics.clone()).collect();
        // A multi-seed run made before `seeds.json` recorded what it was judged against says
        // nothing here (its seeds' notes are the report's business).
        let changed = (c.manifest.judged_against.as_ref())
            .and_then(|then| then.changes_to(c.judged_against.as_ref()));
        let p = point(
            &first.manifest,
            &c.manifest.started,
            status,
            changed,
            tables,
        );
        return Ok(Some((key, p)));
    }
    let run = StoredRun::judge(dir, golden_root).map_err(|e| e.to_string())?;
    let m = &run.manifest;
    let key = (m.scenario.clone(), m.hardware.clone());
    let status = run.judged().exit_status();
    let p = point(
        m,
        &m.started,
        status,
        run.changed_since(),
        vec![run.metrics.clone()],
    );
    Ok(Some((key, p)))
}
