//! A scenario's verdict in one line: its headline, exit status and summary, from its verdict,
//! how its run ended and what it declared (`expected_verdict`). The judge decides it once
//! (`Judged::decide`) and hands the `Decision` to the scenario's report, which renders it; the
//! combined judge of a multi-seed run reads its seeds' headlines the same way.

use super::tables::{match_expected, ExpectedMismatch};
use super::verdict::{Outcome, RunOutcome, Verdict};
use crate::model::checks::{ExpectedOutcome, ExpectedVerdict};
use crate::model::error::ExitStatus;
use crate::model::rundir::{RunManifest, RunStatus};

/// The verdict in one line, shared by every renderer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Headline {
    Passed,
    ExpectedFailure,
    Failed,
    RunFailed,
    NoGolden,
    Skipped,
}

/// What decides a scenario's headline.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Judged<'a> {
    /// `None` when the scenario was skipped or never judged.
    pub(crate) verdict: Option<&'a Verdict>,
    pub(crate) status: Option<RunStatus>,
    pub(crate) reason: Option<&'a str>,
    pub(crate) failed_step: Option<u64>,
    pub(crate) expected: Option<&'a ExpectedVerdict>,
    /// The pending golden the run wrote, if any.
    pub(crate) pending_golden: Option<&'a str>,
    /// Why the scenario was skipped, if it was.
    pub(crate) skipped: Option<&'a str>,
}

/// What the judge decided of a scenario: its headline, exit status, one-line summary and the
/// strict match against its declared verdict. Made once from what decides it
/// (`Judged::decide`) and handed to the scenario's report as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) headline: Headline,
    pub(crate) exit_status: ExitStatus,
    pub(crate) summary: String,
    /// `None` when the scenario declares no verdict.
    pub(crate) expected_match: Option<Result<(), ExpectedMismatch>>,
}

impl<'a> Judged<'a> {
    /// What decides a run's headline from its manifest (`run.json`) and its verdict: how it
    /// ended, what it declared and the pending golden it wrote.
    pub(crate) fn of_run(manifest: &'a RunManifest, verdict: Option<&'a Verdict>) -> Judged<'a> {
        Judged {
            verdict,
            status: Some(manifest.status),
            reason: manifest.reason.as_deref(),
            failed_step: manifest.failed_step,
            expected: manifest.expected_verdict.as_ref(),
            pending_golden: manifest.pending_golden.as_deref(),
            skipped: None,
        }
    }

    /// A scenario skipped for `reason` (its requirements are not met here).
    pub(crate) fn skipped(reason: &'a str) -> Judged<'a> {
        Judged {
            status: Some(RunStatus::Skipped),
            reason: Some(reason),
            skipped: Some(reason),
            ..Judged::default()
        }
    }
}

impl Judged<'_> {
    /// The decision, for the scenario's report.
    pub(crate) fn decide(&self) -> Decision {
        Decision {
            headline: self.headline(),
            exit_status: self.exit_status(),
            summary: self.summary(),
            expected_match: self.expected_match(),
        }
    }

    fn run_outcome(&self) -> RunOutcome {
        RunOutcome {
            status: self.status.unwrap_or(RunStatus::Completed),
            reason: self.reason.map(str::to_string),
            step: self.failed_step,
        }
    }

    /// The strict match against `expected_verdict`, when the scenario declares one.
    pub(crate) fn expected_match(&self) -> Option<Result<(), ExpectedMismatch>> {
        let e = self.expected?;
        Some(match_expected(self.verdict, &self.run_outcome(), e))
    }

    fn run_broke(&self) -> bool {
        matches!(
            self.status,
            Some(RunStatus::Failed | RunStatus::TimedOut | RunStatus::Interrupted)
        )
    }

    pub(crate) fn headline(&self) -> Headline {
        if self.skipped.is_some() {
            return Headline::Skipped;
        }
        if let Some(m) = self.expected_match() {
            return match m {
                Ok(()) => {
                    if self
                        .expected
                        .is_some_and(|e| e.outcome == ExpectedOutcome::Passed)
                    {
                        Headline::Passed
                    } else {
                        Headline::ExpectedFailure
                    }
                }
                Err(_) if self.run_broke() => Headline::RunFailed,
                Err(_) if self.is_no_golden() => Headline::NoGolden,
                Err(_) => Headline::Failed,
            };
        }
        if self.run_broke() {
            return Headline::RunFailed;
        }
        if self.is_no_golden() {
            return Headline::NoGolden;
        }
        match (self.verdict, self.status) {
            (_, Some(RunStatus::Aborted)) => Headline::Failed,
            (Some(v), _) if v.outcome == Outcome::Passed => Headline::Passed,
            (Some(_), _) => Headline::Failed,
            (None, _) => Headline::Failed,
        }
    }

    fn is_no_golden(&self) -> bool {
        self.pending_golden.is_some()
            || self.verdict.is_some_and(|v| v.outcome == Outcome::NoGolden)
    }

    /// The scenario's exit status: skipped 0; a broken run 3 (unless the scenario expects the
    /// failure); a pending golden 4; a declared verdict 0 when matched, else 1; otherwise the
    /// verdict's own status (an aborted run is at least 1).
    pub(crate) fn exit_status(&self) -> ExitStatus {
        match self.headline() {
            Headline::Skipped | Headline::Passed | Headline::ExpectedFailure => ExitStatus::Passed,
            Headline::RunFailed => ExitStatus::RunFailed,
            Headline::NoGolden => ExitStatus::NoGolden,
            Headline::Failed => ExitStatus::CheckFailed,
        }
    }

    /// "passed", "regressed", "run failed: ...": the one-line summary.
    pub(crate) fn summary(&self) -> String {
        let status = self.status.map(RunStatus::as_str);
        match self.headline() {
            Headline::Skipped => format!(
                "skipped: {}",
                self.skipped.unwrap_or("requirements not met")
            ),
            Headline::RunFailed => format!(
                "run {}{}",
                status.unwrap_or("failed"),
                self.reason.map(|r| format!(": {r}")).unwrap_or_default()
            ),
            Headline::NoGolden => match self.pending_golden {
                // `--update-golden` over an accepted golden: there was one.
                Some(p) if self.verdict.is_some_and(|v| v.outcome != Outcome::NoGolden) => {
                    format!(
                        "pending golden written to {p} (--update-golden); review it with \
                         `rlharness golden status`"
                    )
                }
                Some(p) => format!(
                    "no golden yet: pending golden written to {p}; review it and run \
                     `rlharness golden accept`"
                ),
                None => "no golden yet".into(),
            },
            Headline::ExpectedFailure => format!(
                "expected failure: {} as declared",
                self.verdict
                    .map(|v| v.outcome.as_str())
                    .unwrap_or_else(|| status.unwrap_or("failed"))
            ),
            Headline::Passed => "passed".into(),
            Headline::Failed => self.failed_summary(),
        }
    }

    fn failed_summary(&self) -> String {
        if let Some(Err(why)) = self.expected_match() {
            return format!("verdict does not match the declared one: {why}");
        }
        let outcome = self
            .verdict
            .map(|v| v.outcome.as_str())
            .unwrap_or("not judged");
        if self.status == Some(RunStatus::Aborted) {
            format!(
                "aborted{}: {outcome}",
                self.reason.map(|r| format!(" ({r})")).unwrap_or_default()
            )
        } else {
            outcome.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(outcome: Outcome) -> Verdict {
        Verdict {
            outcome,
            rules: Vec::new(),
            grid_mismatch: None,
            exact_lane: None,
            not_judged: None,
        }
    }

    /// A broken run first (unless the scenario expects the failure), then a pending golden,
    /// then the verdict; an aborted run is at least a failed check.
    #[test]
    fn exit_status_precedence() {
        let regressed = verdict(Outcome::Regressed);
        let failed = Judged {
            verdict: Some(&regressed),
            status: Some(RunStatus::Failed),
            reason: Some("backend exited with status 1"),
            ..Judged::default()
        };
        let d = failed.decide();
        assert_eq!(d.exit_status, ExitStatus::RunFailed);
        assert_eq!(d.headline, Headline::RunFailed);
        assert!(d.summary.contains("backend exited"), "{}", d.summary);
        assert_eq!(d.expected_match, None);
        let expected: ExpectedVerdict =
            serde_json::from_str(r#"{"outcome": "failed", "reason": "exited"}"#).unwrap();
        let declared = Judged {
            expected: Some(&expected),
            ..failed
        }
        .decide();
        assert_eq!(declared.exit_status, ExitStatus::Passed);
        assert_eq!(declared.expected_match, Some(Ok(())));
        let pending = Judged {
            verdict: Some(&regressed),
            status: Some(RunStatus::Completed),
            pending_golden: Some("golden/x/cpu/metrics.csv.new"),
            ..Judged::default()
        };
        assert_eq!(pending.decide().exit_status, ExitStatus::NoGolden);
        let passed = verdict(Outcome::Passed);
        let aborted = Judged {
            verdict: Some(&passed),
            status: Some(RunStatus::Aborted),
            ..Judged::default()
        };
        assert_eq!(aborted.decide().exit_status, ExitStatus::CheckFailed);
        let skipped = Judged::skipped("needs a CUDA device").decide();
        assert_eq!(skipped.exit_status, ExitStatus::Passed);
        assert_eq!(skipped.summary, "skipped: needs a CUDA device");
    }
}
