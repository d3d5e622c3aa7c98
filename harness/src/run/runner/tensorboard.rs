//! The run's series as TensorBoard event files, step by step as the steps arrive: into
//! `<run dir>/tensorboard/` when the scenario says `metrics.tensorboard: true`, and into
//! `DIR/<scenario>/<run-id>/` under `run --tensorboard DIR`. A failed write never fails the
//! run: it becomes a warning and a note of the report, and that folder gets nothing more.

use std::path::{Path, PathBuf};

use super::RunOptions;
use crate::model::metrics::tensorboard::EventWriter;
use crate::model::metrics::{MetricTable, StepMetrics};
use crate::run::plan::RunPlan;

/// The event files of one run (none, one or two folders).
#[derive(Debug, Default)]
pub struct TensorBoard {
    writers: Vec<EventWriter>,
    /// The last step written.
    last: Option<u64>,
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

    /// One finished step, every metric a scalar named as the metric, from the series so far
    /// (`table`, which holds it already). The files hold what `metrics.csv` holds, in step
    /// order, each step once: a step at or before the last one written (a trainer's stdout
    /// and stderr lines cross; a step sent again) starts a new file with the whole series.
    pub(crate) fn step(&mut self, step: u64, table: &MetricTable) {
        if self.writers.is_empty() {
            return;
        }
        let in_order = self.last.is_none_or(|last| step > last);
        self.last = Some(self.last.map_or(step, |last| last.max(step)));
        if in_order {
            if let Some(row) = table.row(step) {
                self.write(step, &scalars(row));
            }
            return;
        }
        self.each(|w| w.restart().map_err(|e| e.to_string()));
        for row in table.rows() {
            self.write(row.step, &scalars(row));
        }
    }

    /// Scalars at one step, to every folder; a folder whose write fails is dropped.
    pub(crate) fn write(&mut self, step: u64, scalars: &[(&str, f64)]) {
        self.each(|w| w.write(step, scalars).map_err(|e| e.to_string()));
    }

    /// `op` on every folder's writer; a writer it fails on is dropped, and the failure noted.
    fn each(&mut self, mut op: impl FnMut(&mut EventWriter) -> Result<(), String>) {
        let mut failed = Vec::new();
        self.writers.retain_mut(|w| match op(w) {
            Ok(()) => true,
            Err(e) => {
                failed.push(e);
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

/// A step's metrics as scalars named as the metrics.
fn scalars(m: &StepMetrics) -> Vec<(&str, f64)> {
    m.values.iter().map(|(k, v)| (k.as_str(), *v)).collect()
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
    use crate::model::metrics::tensorboard::{unframe, Event};
    use prost::Message;

    #[test]
    fn steps_out_of_order_are_written_again_in_step_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut tb = TensorBoard {
            writers: vec![EventWriter::create(dir.path()).unwrap()],
            ..TensorBoard::default()
        };
        let mut table = MetricTable::new();
        for step in [1, 3, 2, 4] {
            let mut m = StepMetrics::new(step);
            m.insert("x", step as f64);
            table.push(m);
            tb.step(step, &table);
        }
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1);
        let path = files[0].as_ref().unwrap().path();
        let steps: Vec<i64> = unframe(&std::fs::read(path).unwrap())
            .unwrap()
            .iter()
            .map(|r| Event::decode(r.as_slice()).unwrap())
            .filter(|e| e.summary.is_some())
            .map(|e| e.step)
            .collect();
        assert_eq!(steps, [1, 2, 3, 4]);
        assert!(tb.notes.is_empty(), "{:?}", tb.notes);
    }

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
