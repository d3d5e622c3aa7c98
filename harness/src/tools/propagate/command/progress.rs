//! The matrix's progress on stderr.

use std::path::Path;

use super::RunResult;

/// The matrix's progress on stderr: a bar on a terminal, one plain line per finished run
/// elsewhere (a CI log, `--no-progress`), nothing under `-q`. The total grows by each round's
/// runs (a split group adds a round).
pub(super) struct MatrixProgress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    done: std::sync::atomic::AtomicUsize,
    total: std::sync::atomic::AtomicUsize,
}

impl MatrixProgress {
    pub(super) fn new(scenario: &str, bar: bool) -> Self {
        use std::io::IsTerminal;
        let quiet = crate::model::util::quiet();
        let bar = (bar && !quiet && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{bar:30}] run {pos}/{len} {wide_msg} ({elapsed})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(format!("propagate {scenario}"));
            b
        });
        MatrixProgress {
            plain: bar.is_none() && !quiet,
            bar,
            done: Default::default(),
            total: Default::default(),
        }
    }

    /// A round of `n` runs starts (`round` from 1).
    pub(super) fn round(&self, round: usize, n: usize, splits: usize) {
        use std::sync::atomic::Ordering;
        let total = self.total.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
        } else if self.plain && round > 1 {
            errln!(
                "propagate: round {round}: {n} more run(s), for {splits} group(s) split so far \
                 that one run could not attribute"
            );
        }
    }

    /// A run's name on the progress line: its overrides, or for a group its size, first
    /// override and folder.
    pub(super) fn shown(overrides: usize, label: &str, dir: &Path) -> String {
        if overrides <= 2 {
            return label.to_string();
        }
        let first: String = label.chars().take(60).collect();
        let folder = dir.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let number = folder.split('-').next().unwrap_or(folder);
        format!("{overrides} knobs ({first}…; run folder {number}-…)")
    }

    pub(super) fn finished(&self, label: &str, r: &RunResult, seconds: f64) {
        use std::sync::atomic::Ordering;
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.total.load(Ordering::Relaxed);
        let what = match r {
            RunResult::Ran { .. } => "recorded".to_string(),
            RunResult::NotObservable(_) => "not observable".to_string(),
            RunResult::Failed(e) => {
                let first = e.lines().next().unwrap_or_default();
                format!("FAILED: {}", first.chars().take(120).collect::<String>())
            }
        };
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
            b.set_message(label.to_string());
        } else if self.plain {
            errln!("propagate: run {done}/{total} {label}: {what} ({seconds:.1} s)");
        }
    }

    pub(super) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
