//! `rlharness bisect`: the first commit of a trainer's repository where a scenario regressed.
//!
//! - `git.rs`: the commits between a good and a bad revision, and worktrees of the bisect's
//!   own (never the user's checkout or index), removed when the bisect ends;
//! - `sprt.rs`: Wald's sequential probability ratio test of one commit's seeds against the
//!   calibration (good: the calibrated mean; bad: shifted by the effect), with stated error
//!   rates;
//! - `commit_verdict.rs`: how a commit is judged (the sequential test's settings from the golden
//!   store, or the propagation matrix) and the verdict of its trials;
//! - `search.rs`: which commit to test next (binary search, skipping commits that cannot run,
//!   as `git bisect skip` does);
//! - `walk.rs`: the ends first, then the search, and the answer and exit status they give;
//! - `cache.rs`: each commit's trials, kept per commit, scenario and mode, so a rerun reuses
//!   them;
//! - `page.rs`: `bisect.json` and `bisect.md`.
//!
//! Running a commit is the command layer's (`app/commands/bisect.rs`): it plans, runs and
//! judges the scenario, or its propagation matrix, with the trainer's sources pointed at the
//! commit's worktree, for each commit the walk hands it.

pub(crate) mod cache;
pub(crate) mod commit_verdict;
pub(crate) mod git;
pub(crate) mod page;
pub(crate) mod search;
pub(crate) mod sprt;
pub(crate) mod walk;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use commit_verdict::Judge;

/// Why a bisect could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum BisectError {
    /// A repository or revision that does not fit (invalid input).
    #[error("{0}")]
    Input(String),
    /// git itself failed on a valid input (the host's fault).
    #[error("{0}")]
    Git(String),
    #[error(transparent)]
    Fs(#[from] rlharness_arctic::fsx::FsError),
}

/// One commit of the range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Commit {
    pub(crate) sha: String,
    pub(crate) subject: String,
}

impl Commit {
    pub(crate) fn short(&self) -> &str {
        &self.sha[..self.sha.len().min(9)]
    }
}

/// What a commit was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    Good,
    Bad,
    /// It could not run, or its evidence stayed unclear: the search goes around it.
    Skip,
}

impl Verdict {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Bad => "bad",
            Verdict::Skip => "skip",
        }
    }
}

/// One scenario run at a commit: a seed's value of the judged window (scenario mode), or one
/// propagation matrix (its runs counted in `runs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Trial {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) seed: Option<u64>,
    /// The judged window's value (scenario mode); `None` when the run gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<f64>,
    /// Scenario runs this trial took (a propagation matrix takes several).
    pub(crate) runs: usize,
    /// What the run said: its verdict, its flags, or why it could not run.
    pub(crate) note: String,
    /// It could not run (invalid input at this commit, a crash, an incomplete run).
    #[serde(default)]
    pub(crate) failed: bool,
}

/// A tested commit and its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tested {
    pub(crate) commit: Commit,
    pub(crate) verdict: Verdict,
    /// The evidence in words (the test statistic against its bounds, or the flags).
    pub(crate) evidence: String,
    pub(crate) trials: Vec<Trial>,
    /// Wald's log-likelihood ratio after the last seed (scenario mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) llr: Option<f64>,
    /// Scenario runs taken from the cache rather than run now.
    pub(crate) cached_runs: usize,
}

impl Tested {
    pub(crate) fn runs(&self) -> usize {
        self.trials.iter().map(|t| t.runs).sum()
    }
}

/// The sequential test's settings, as stated in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TestStated {
    pub(crate) metric: String,
    pub(crate) window: (u64, u64),
    pub(crate) median: bool,
    /// The calibrated mean (good), the mean shifted by the effect (bad), the calibrated σ.
    pub(crate) good_mean: f64,
    pub(crate) bad_mean: f64,
    pub(crate) sigma: f64,
    pub(crate) effect: f64,
    pub(crate) effect_from: String,
    pub(crate) alpha: f64,
    pub(crate) beta: f64,
    pub(crate) max_seeds: usize,
    pub(crate) calibration: String,
}

/// The whole bisect: what was asked, each tested commit, the answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BisectReport {
    pub(crate) format: String,
    pub(crate) scenario: String,
    pub(crate) repo: String,
    pub(crate) source_var: String,
    pub(crate) good: Commit,
    pub(crate) bad: Commit,
    /// `scenario` or `propagate KNOBS`.
    pub(crate) mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) test: Option<TestStated>,
    /// Commits between good (excluded) and bad (included), oldest first.
    pub(crate) range: usize,
    pub(crate) tested: Vec<Tested>,
    /// The first bad commit, when found.
    pub(crate) first_bad: Option<Commit>,
    /// When the skipped commits leave it open: the commits it may be, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) could_be: Vec<Commit>,
    /// Why there is no answer (an end that is not what it was said to be).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) problem: Option<String>,
    pub(crate) runs: usize,
    pub(crate) cached_runs: usize,
    pub(crate) seconds: f64,
    pub(crate) cache: String,
}

impl BisectReport {
    /// The report of a bisect about to start: what it was asked, nothing tested yet.
    pub(crate) fn new(
        scenario: &str,
        repo: &Path,
        source_var: &str,
        (good, bad): (&Commit, &Commit),
        judge: &Judge,
        range: usize,
        cache: &Path,
    ) -> BisectReport {
        BisectReport {
            format: "rlharness-bisect/1".into(),
            scenario: scenario.to_string(),
            repo: repo.display().to_string(),
            source_var: source_var.to_string(),
            good: good.clone(),
            bad: bad.clone(),
            mode: judge.mode(),
            test: match judge {
                Judge::Scenario { test, .. } => Some(test.clone()),
                Judge::Propagate(_) => None,
            },
            range,
            tested: Vec::new(),
            first_bad: None,
            could_be: Vec::new(),
            problem: None,
            runs: 0,
            cached_runs: 0,
            seconds: 0.0,
            cache: cache.display().to_string(),
        }
    }

    /// The tally of a bisect that ended after `took`: runs made now and taken from the cache.
    pub(crate) fn finish(&mut self, took: Duration) {
        self.cached_runs = self.tested.iter().map(|t| t.cached_runs).sum();
        self.runs = self.tested.iter().map(Tested::runs).sum::<usize>() - self.cached_runs;
        self.seconds = took.as_secs_f64();
    }

    /// What the bisect prints at its end: the answer, the first bad commit's evidence, each
    /// tested commit, the tally and the report's files (`written`).
    pub(crate) fn summary(&self, written: &[PathBuf]) -> Vec<String> {
        let mut out = vec![self.headline()];
        if let Some(first) = &self.first_bad {
            let evidence = self
                .tested
                .iter()
                .rev()
                .find(|t| t.commit.sha == first.sha)
                .map(|t| t.evidence.clone())
                .unwrap_or_else(|| "its parent is good and it is bad".into());
            out.push(format!(
                "  {} {}\n  evidence: {evidence}",
                first.sha, first.subject
            ));
        }
        for t in &self.tested {
            out.push(format!(
                "  {} {:<4} {} runs{}: {}",
                t.commit.short(),
                t.verdict.word(),
                t.runs(),
                if t.cached_runs > 0 {
                    format!(" ({} cached)", t.cached_runs)
                } else {
                    String::new()
                },
                t.evidence
            ));
        }
        out.push(self.tally());
        out.push(format!(
            "report: {}",
            written
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        out
    }

    /// The one-line answer.
    pub(crate) fn headline(&self) -> String {
        match (&self.first_bad, &self.problem) {
            (_, Some(p)) => format!("no answer: {p}"),
            (Some(c), None) => format!("first bad commit: {} {}", c.short(), c.subject),
            (None, None) => format!(
                "the first bad commit is one of {} (the others could not be told): {}",
                self.could_be.len(),
                self.could_be
                    .iter()
                    .map(|c| c.short().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Scenario runs: run now, and taken from the cache.
    pub(crate) fn tally(&self) -> String {
        format!(
            "{} commits tested of {} in the range, {} scenario runs ({} run now, {} from the cache), {:.0} s",
            self.tested.len(),
            self.range,
            self.runs + self.cached_runs,
            self.runs,
            self.cached_runs,
            self.seconds
        )
    }
}
