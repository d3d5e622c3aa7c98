//! The order a bisect tests its commits in: the two ends first (the bad end must be bad and
//! the good end good, or there is nothing to search for), then the search (`search.rs`). The
//! command layer runs each commit it is handed and records what the commit was found to be;
//! the walk keeps the answer in the report.

use super::search::{Next, Search};
use super::{BisectReport, Commit, Tested, Verdict};
use crate::model::error::ExitStatus;

/// What the commit under test is.
#[derive(Debug, Clone, Copy)]
enum Testing {
    /// An end, said to be `said`.
    End {
        index: usize,
        said: Verdict,
        label: &'static str,
    },
    /// A commit of the search.
    Search(usize),
}

/// A bisect's walk over the line `good, c1, …, bad` (indices 0 to n).
#[derive(Debug, Clone)]
pub(crate) struct Walk {
    search: Search,
    /// The ends still to test, the last first.
    ends: Vec<Testing>,
    testing: Option<Testing>,
    status: ExitStatus,
}

impl Walk {
    pub(crate) fn new(n: usize) -> Walk {
        let end = |index, said, label| Testing::End { index, said, label };
        Walk {
            search: Search::new(n),
            ends: vec![end(0, Verdict::Good, "good"), end(n, Verdict::Bad, "bad")],
            testing: None,
            status: ExitStatus::Passed,
        }
    }

    /// The next commit to test, with the line that announces it; `None` once `report` holds
    /// the answer (the first bad commit, the commits it may be, or the problem with an end).
    pub(crate) fn next(
        &mut self,
        line: &[Commit],
        report: &mut BisectReport,
    ) -> Option<(usize, String)> {
        if report.problem.is_some() {
            return None;
        }
        if let Some(end) = self.ends.pop() {
            let Testing::End { index, label, .. } = end else {
                return None;
            };
            self.testing = Some(end);
            return Some((
                index,
                format!("testing the {label} end {}", line[index].short()),
            ));
        }
        match self.search.next() {
            Next::Test(i) => {
                self.testing = Some(Testing::Search(i));
                Some((
                    i,
                    format!(
                        "testing {} (commit {} of {}; steps left: about {}): {}",
                        line[i].short(),
                        i,
                        line.len() - 1,
                        self.search.steps_left(),
                        line[i].subject
                    ),
                ))
            }
            Next::Found(i) => {
                report.first_bad = Some(line[i].clone());
                None
            }
            Next::Among(v) => {
                report.could_be = v.into_iter().map(|i| line[i].clone()).collect();
                self.status = ExitStatus::RunFailed;
                None
            }
        }
    }

    /// What the commit `next` handed out was found to be.
    pub(crate) fn record(&mut self, line: &[Commit], report: &mut BisectReport, t: Tested) {
        let verdict = t.verdict;
        report.tested.push(t);
        match self.testing.take() {
            Some(Testing::End { index, said, label }) if verdict != said => {
                let (what, code) = match verdict {
                    Verdict::Skip => ("could not be told", ExitStatus::RunFailed),
                    _ => ("is not", ExitStatus::CheckFailed),
                };
                report.problem = Some(format!(
                    "the {label} commit {} {what} {label}",
                    line[index].short()
                ));
                self.status = code;
            }
            Some(Testing::Search(i)) => self.search.record(i, verdict),
            _ => {}
        }
    }

    /// The bisect's exit status: 0 with an answer, 1 when an end is not what it was said to
    /// be, 3 when an end could not be told or skipped commits leave a set.
    pub(crate) fn status(&self) -> ExitStatus {
        self.status
    }
}
