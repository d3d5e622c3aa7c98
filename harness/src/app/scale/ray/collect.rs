//! Collecting what a job brought back: its run directories unpacked under OUT/, its log kept
//! when nothing came, and its entry in the combined verdict.

use std::path::{Path, PathBuf};

use super::job_plan::Planned;
use super::watch::{last_error, last_step, tail, Watched};
use crate::app::scale::bundle;
use crate::app::scale::index::{read_seeds, read_verdict, Entry};
use crate::model::error::ExitStatus;

/// Why a job's run directories could not be put under OUT/.
#[derive(Debug, thiserror::Error)]
enum CollectError {
    #[error("cannot make a folder in {}: {source}", dir.display())]
    Folder {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Unpack(#[from] bundle::BundleError),
    #[error(transparent)]
    Fs(#[from] rlharness_arctic::fsx::FsError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("cannot move the run into {}: {source}", dest.display())]
    Move {
        dest: PathBuf,
        source: std::io::Error,
    },
}

/// Put the run directories a frame carried under OUT/<scenario>/ (a name already there gets a
/// suffix) and point OUT/<scenario>/latest at the newest; returns them.
fn collect(frame: &bundle::Frame, out: &Path) -> Result<Vec<PathBuf>, CollectError> {
    let tmp = tempfile::Builder::new()
        .prefix(".ray-collect-")
        .tempdir_in(out)
        .map_err(|source| CollectError::Folder {
            dir: out.to_path_buf(),
            source,
        })?;
    bundle::unzip(&frame.archive, tmp.path())?;
    let mut moved = Vec::new();
    let Ok(scenarios) = std::fs::read_dir(tmp.path()) else {
        return Ok(moved);
    };
    for s in scenarios.filter_map(Result::ok) {
        if !s.path().is_dir() {
            continue; // the job's own index files
        }
        let base = out.join(s.file_name());
        rlharness_arctic::fsx::create_dir_all(&base)?;
        let mut runs: Vec<_> = std::fs::read_dir(s.path())?
            .filter_map(Result::ok)
            // A hidden `.tmp-*` folder is a run folder a killed harness never finished making.
            .filter(|r| r.path().is_dir() && !r.file_name().to_string_lossy().starts_with('.'))
            .collect();
        runs.sort_by_key(|r| r.file_name());
        for r in runs {
            let name = r.file_name().to_string_lossy().into_owned();
            let mut dest = base.join(&name);
            let mut k = 1;
            while dest.exists() {
                k += 1;
                dest = base.join(format!("{name}-{k}"));
            }
            if let Err(source) = std::fs::rename(r.path(), &dest) {
                return Err(CollectError::Move { dest, source });
            }
            let latest = base.join("latest");
            let _ = std::fs::remove_file(&latest);
            #[cfg(unix)]
            if let Some(n) = dest.file_name() {
                let _ = std::os::unix::fs::symlink(n, &latest);
            }
            moved.push(dest);
        }
    }
    Ok(moved)
}

/// A job's log as kept in the run directory: its frame's lines left out (the frame is the
/// run directory itself).
fn log_without_frame(log: &str) -> String {
    log.lines()
        .filter(|l| !l.starts_with("@@"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Keep a job's log beside the scenario's runs when nothing else came back.
fn keep_log(out: &Path, p: &Planned, w: &Watched) -> Option<PathBuf> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let dir = out.join(&p.name).join(format!("{stamp}-ray-{}", w.id));
    rlharness_arctic::fsx::create_dir_all(&dir).ok()?;
    rlharness_arctic::fsx::write_atomic(&dir.join("job.log"), log_without_frame(&w.log).as_bytes())
        .ok()?;
    Some(dir)
}

/// The entry of a job that ended, from what it brought back (or why nothing came).
pub(super) fn entry_of(p: &Planned, w: &Watched, out: &Path) -> Entry {
    let mut placement = format!("ray job {}", w.id);
    if let Some(s) = w.first_step_s {
        placement.push_str(&format!(" (first step {s:.1} s after submission)"));
    }
    let fail = |summary: String, dir: Option<PathBuf>| Entry {
        file: p.file().display().to_string(),
        scenario: p.name.clone(),
        status: ExitStatus::RunFailed,
        summary,
        run_dir: dir,
        placement: placement.clone(),
        seconds: w.seconds,
        seeds: Vec::new(),
        skipped: false,
        failing: Vec::new(),
        expected_failure: false,
    };
    let state = w
        .info
        .as_ref()
        .map(|i| {
            format!(
                "{}{}",
                i.status,
                i.message
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_else(|| "state unknown".into());
    let frame = bundle::decode_frame(&w.log);
    let frame = match frame {
        Ok(f) => f,
        Err(why) => {
            let dir = keep_log(out, p, w);
            let step = last_step(&w.log)
                .map(|s| format!(" at step {}/{}", s.step, s.total))
                .unwrap_or_default();
            let summary = match &w.gave_up {
                Some(g) => {
                    let mut s = format!("ray job {}{step}: {g}", w.id);
                    match &w.stop_note {
                        Some(n) => s.push_str(&format!("; {n}")),
                        None => s.push_str(&format!("; the job ended {state}")),
                    }
                    s
                }
                None => format!(
                    "ray job {} ended {state}{step}, and its run directory did not come back \
                     ({why}); last log lines:\n{}",
                    w.id,
                    tail(&w.log, 8)
                ),
            };
            return fail(summary, dir);
        }
    };
    let runs = match collect(&frame, out) {
        Ok(r) => r,
        Err(why) => return fail(format!("ray job {}: {why}", w.id), keep_log(out, p, w)),
    };
    let Some(dir) = runs.last().cloned() else {
        // It ran but made no run directory: it could not start the scenario.
        let status = ExitStatus::from_code(frame.exit_code).unwrap_or(ExitStatus::RunFailed);
        let summary = last_error(&w.log).unwrap_or_else(|| format!("exit {}", frame.exit_code));
        return Entry {
            status,
            ..fail(summary, keep_log(out, p, w))
        };
    };
    let _ = rlharness_arctic::fsx::write_atomic(
        &dir.join("job.log"),
        log_without_frame(&w.log).as_bytes(),
    );
    match read_verdict(&dir) {
        Ok((scenario, status, summary)) => {
            let mut status = status;
            let mut summary = summary;
            if let Some(g) = &w.gave_up {
                status = status.worst(ExitStatus::RunFailed);
                summary = format!("{summary}; {g}");
            } else if w.info.as_ref().is_some_and(|i| i.status == "STOPPED") {
                status = status.worst(ExitStatus::RunFailed);
                summary = format!("{summary}; ray job {} was stopped ({state})", w.id);
            }
            let expected_failure =
                status == ExitStatus::Passed && summary.starts_with("expected failure");
            Entry {
                file: p.file().display().to_string(),
                scenario,
                status,
                summary,
                seeds: read_seeds(&dir),
                run_dir: Some(dir),
                placement,
                seconds: w.seconds,
                skipped: false,
                failing: Vec::new(),
                expected_failure,
            }
        }
        Err(why) => fail(format!("ray job {}: {why}", w.id), Some(dir)),
    }
}
