//! `verdict.json`: the verdict, the run and the rules, for machines.

use super::Report;
use crate::judge::budget::BudgetStatement;
use crate::judge::{exact::ExactLane, ExpectedVerdict, Outcome, RuleVerdict};
use crate::model::rundir::RunStatus;

#[derive(serde::Serialize)]
struct VerdictDoc<'a> {
    /// The document's version (bumped when a key changes meaning or goes away).
    schema: u32,
    scenario: &'a str,
    exit_code: i32,
    summary: String,
    outcome: Option<Outcome>,
    run: RunDoc<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected: Option<&'a ExpectedVerdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_match: Option<ExpectedMatchDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grid_mismatch: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exact_lane: Option<&'a ExactLane>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_golden: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<&'a str>,
    /// α_run, the tests sharing it, and the stored audit's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<&'a BudgetStatement>,
    rules: &'a [RuleVerdict],
}

#[derive(serde::Serialize)]
struct ExpectedMatchDoc {
    matched: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

#[derive(serde::Serialize)]
struct RunDoc<'a> {
    dir: &'a str,
    status: Option<RunStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_step: Option<u64>,
    hardware: &'a str,
    seed: Option<u64>,
    steps: Option<u64>,
    steps_recorded: usize,
    harness_version: &'a str,
    git_commit: Option<&'a str>,
    host: &'a str,
    device: &'a str,
    started: Option<&'a str>,
    ended: Option<&'a str>,
}

/// `verdict.json`'s version.
pub(crate) const VERDICT_SCHEMA: u32 = 1;

pub(crate) fn render_verdict_json(r: &Report) -> String {
    let doc = VerdictDoc {
        schema: VERDICT_SCHEMA,
        scenario: &r.scenario,
        exit_code: r.exit_status().code(),
        summary: r.summary(),
        outcome: r.verdict.as_ref().map(|v| v.outcome),
        run: RunDoc {
            dir: &r.run.dir,
            status: r.run.status,
            reason: r.run.reason.as_deref(),
            failed_step: r.run.failed_step,
            hardware: &r.run.hardware,
            seed: r.run.seed,
            steps: r.run.steps,
            steps_recorded: r.metrics.len(),
            harness_version: &r.run.harness_version,
            git_commit: r.run.git_commit.as_deref(),
            host: &r.run.host,
            device: &r.run.device,
            started: r.run.started.as_deref(),
            ended: r.run.ended.as_deref(),
        },
        expected: r.expected.as_ref(),
        expected_match: r.expected_match().map(|m| ExpectedMatchDoc {
            matched: m.is_ok(),
            why: m.err().map(|why| why.0),
        }),
        grid_mismatch: r.verdict.as_ref().and_then(|v| v.grid_mismatch.as_deref()),
        exact_lane: r.verdict.as_ref().and_then(|v| v.exact_lane.as_ref()),
        reference: r.reference.as_ref().map(|g| g.label.as_str()),
        pending_golden: r.pending_golden.as_deref(),
        skipped: r.skipped.as_deref(),
        budget: r.budget.as_ref(),
        rules: r
            .verdict
            .as_ref()
            .map(|v| v.rules.as_slice())
            .unwrap_or(&[]),
    };
    // Serializing plain data to a String cannot fail.
    let mut s =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}
