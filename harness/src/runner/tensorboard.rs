//! The run's series as TensorBoard event files, step by step as the steps arrive: into
//! `<run dir>/tensorboard/` when the scenario says `metrics.tensorboard: true`, and into
//! `DIR/<scenario>/<run-id>/` under `run --tensorboard DIR`. A failed write never fails the
//! run: it becomes a warning and a note of the report, and that folder gets nothing more.

use std::path::{Path, PathBuf};

use super::RunOptions;
use crate::metrics::tensorboard::EventWriter;
use crate::metrics::StepMetrics;
use crate::plan::RunPlan;

/// The event files of one run (none, one or two folders).
#[derive(Debug, Default)]
pub struct TensorBoard {
    writers: Vec<EventWriter>,
    /// What failed, for `run.json`'s notes (once per folder).
    pub(crate) notes: Vec<String>,
}

impl TensorBoard {
    /// Open the folders the scenario and the options ask for.
    pub(super) fn open(plan: &RunPlan, opts: &RunOptions, run_dir: &Path) -> TensorBoard {
        let mut dirs = Vec::new();
        if plan.scenario.metrics.tensorboard {
            dirs.push(run_dir.join("tensorboard"));
        }
        if let Some(root) = &opts.tensorboard {
            dirs.push(root.join(sub_run(&opts.out, &plan.scenario.name, run_dir)));
        }
        let mut tb = TensorBoard::default();
        for dir in dirs {
            match EventWriter::create(&dir) {
                Ok(w) => {
                    tracing::info!("TensorBoard event file: {}", w.path().display());
                    tb.writers.push(w);
                }
                Err(e) => tb.failed(&e.to_string()),
            }
        }
        tb
    }

    /// One finished step, every metric a scalar named as the metric.
    pub(crate) fn step(&mut self, m: &StepMetrics) {
        let scalars: Vec<(&str, f64)> = m.values.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        self.write(m.step, &scalars);
    }

    /// Scalars at one step, to every folder; a folder whose write fails is dropped.
    pub(crate) fn write(&mut self, step: u64, scalars: &[(&str, f64)]) {
        let mut failed = Vec::new();
        self.writers.retain_mut(|w| match w.write(step, scalars) {
            Ok(()) => true,
            Err(e) => {
                failed.push(e.to_string());
                false
            }
        });
        for e in failed {
            self.failed(&e);
        }
    }

    fn failed(&mut self, e: &str) {
        let note = format!("TensorBoard export stopped: {e} (the run and its other files go on)");
        tracing::warn!("{note}");
        self.notes.push(note);
    }
}

/// Where a run's events go under `--tensorboard DIR`: its run directory's path below `OUT`
/// (`<scenario>/<run-id>`, a seed's `<scenario>/<run-id>/seed-<S>`), else
/// `<scenario>/<run directory's name>`.
fn sub_run(out: &Path, scenario: &str, run_dir: &Path) -> PathBuf {
    match run_dir.strip_prefix(out) {
        Ok(rel) if rel.components().count() >= 2 => rel.to_path_buf(),
        _ => Path::new(scenario).join(run_dir.file_name().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_goes_under_its_scenario_and_id() {
        let out = Path::new("reports");
        assert_eq!(
            sub_run(out, "s", Path::new("reports/s/20260101T000000-ab")),
            Path::new("s/20260101T000000-ab")
        );
        assert_eq!(
            sub_run(out, "s", Path::new("reports/s/R/seed-3")),
            Path::new("s/R/seed-3")
        );
        assert_eq!(
            sub_run(out, "s", Path::new("/tmp/trial-1")),
            Path::new("s/trial-1")
        );
    }
}
