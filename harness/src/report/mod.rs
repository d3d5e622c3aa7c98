//! Reports: one `Report` model, pure renderers (Markdown, HTML with inline plots, SVG plots,
//! JUnit, verdict.json), and one place that writes files (`write_reports`).

use std::path::Path;

use crate::compare::{
    exact::ExactLane, Band, ExpectedMismatch, ExpectedVerdict, Judged, Outcome, PointCheck,
    RuleStatus, RuleVerdict, Verdict,
};
use crate::error::ExitStatus;
use crate::fsx;
use crate::golden::{Golden, Provenance};
use crate::metrics::MetricTable;
use crate::rundir::{KnobDiff, RunManifest, RunStatus};
use crate::wire::runtime::Numerics;

pub(crate) mod doc;
mod html;
mod junit;
pub(crate) mod markdown;
mod plots;
pub(crate) use plots::{plot_trend, TrendPlot};
pub(crate) mod seeds;
pub(crate) mod terminal;

pub(crate) use crate::compare::Headline;
/// `run.json`'s model lives in `rundir`; the runner's stages still name it here.
pub(crate) use html::render_html;
pub(crate) use junit::render_junit;
pub(crate) use markdown::render_markdown;
pub(crate) use plots::{render_overlay, render_plots};
pub(crate) use terminal::render_terminal;

/// Facts about the run that the reports show (paths and times are volatile: snapshot tests
/// redact them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunInfo {
    pub(crate) run_id: String,
    pub(crate) dir: String,
    pub(crate) scenario_path: String,
    pub(crate) hardware: String,
    pub(crate) status: Option<RunStatus>,
    pub(crate) reason: Option<String>,
    pub(crate) failed_step: Option<u64>,
    pub(crate) seed: Option<u64>,
    pub(crate) steps: Option<u64>,
    pub(crate) harness_version: String,
    pub(crate) git_commit: Option<String>,
    pub(crate) host: String,
    pub device: String,
    pub(crate) threads: Option<u64>,
    pub torch_version: Option<String>,
    pub numerics: Option<Numerics>,
    pub(crate) started: Option<String>,
    pub(crate) ended: Option<String>,
}

impl RunInfo {
    pub(crate) fn from_manifest(m: &RunManifest, dir: &Path) -> RunInfo {
        RunInfo {
            run_id: RunInfo::id_of(dir),
            dir: dir.display().to_string(),
            scenario_path: m.scenario_path.clone(),
            hardware: m.hardware.clone(),
            status: Some(m.status),
            reason: m.reason.clone(),
            failed_step: m.failed_step,
            seed: Some(m.seed),
            steps: Some(m.steps),
            harness_version: m.harness_version.clone(),
            git_commit: m.git_commit.clone(),
            host: m.host.clone(),
            device: m.device.clone(),
            threads: m.threads,
            torch_version: m.torch_version.clone(),
            numerics: m.numerics.clone(),
            started: Some(m.started.clone()),
            ended: m.ended.clone(),
        }
    }

    /// A run's id: the name of its directory.
    pub(crate) fn id_of(dir: &Path) -> String {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// The series a run was judged against.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// `golden` or the other run's id.
    pub label: String,
    pub(crate) table: MetricTable,
    pub(crate) provenance: Option<Provenance>,
}

impl Reference {
    /// A self-test's reference run (`reference_golden`), labelled as what it is.
    pub(crate) fn from_reference_run(g: &Golden) -> Reference {
        Reference {
            label: "reference run".into(),
            ..Reference::from_golden(g)
        }
    }

    pub(crate) fn from_golden(g: &Golden) -> Reference {
        Reference {
            label: "golden".into(),
            table: g.table.clone(),
            provenance: Some(g.provenance.clone()),
        }
    }
}

/// Everything every renderer needs about one scenario's run.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub(crate) scenario: String,
    pub run: RunInfo,
    /// `None` when the scenario was skipped or never judged.
    pub verdict: Option<Verdict>,
    pub expected: Option<ExpectedVerdict>,
    pub metrics: MetricTable,
    pub reference: Option<Reference>,
    pub(crate) knobs: Vec<KnobDiff>,
    pub(crate) skipped: Option<String>,
    pub trainer_tail: Option<String>,
    /// The pending golden this run wrote, if any.
    pub(crate) pending_golden: Option<String>,
    /// Facts about how the run was observed ("no wire observed: ...").
    pub(crate) notes: Vec<String>,
    /// A multi-seed run's series (its own `metrics` are empty): what its plots draw.
    pub(crate) seed_series: Option<seeds::SeedSeries>,
}

impl Report {
    /// A skipped scenario: its requirements are not met here.
    pub(crate) fn skipped(scenario: &str, reason: &str) -> Report {
        Report {
            scenario: scenario.into(),
            run: RunInfo {
                status: Some(RunStatus::Skipped),
                reason: Some(reason.into()),
                ..RunInfo::default()
            },
            verdict: None,
            expected: None,
            metrics: MetricTable::new(),
            reference: None,
            knobs: Vec::new(),
            skipped: Some(reason.into()),
            trainer_tail: None,
            pending_golden: None,
            notes: Vec::new(),
            seed_series: None,
        }
    }

    /// A judged (or failed) run from its manifest.
    pub(crate) fn from_run(
        dir: &Path,
        manifest: &RunManifest,
        metrics: MetricTable,
        reference: Option<Reference>,
        verdict: Option<Verdict>,
    ) -> Report {
        Report {
            scenario: manifest.scenario.clone(),
            run: RunInfo::from_manifest(manifest, dir),
            verdict,
            expected: manifest.expected_verdict.clone(),
            metrics,
            reference,
            knobs: manifest.knobs.clone(),
            skipped: None,
            trainer_tail: None,
            pending_golden: manifest.pending_golden.clone(),
            notes: manifest.notes.clone(),
            seed_series: None,
        }
    }

    /// What decides the report's headline (see `compare::Judged`).
    pub(crate) fn judged(&self) -> Judged<'_> {
        Judged {
            verdict: self.verdict.as_ref(),
            status: self.run.status,
            reason: self.run.reason.as_deref(),
            failed_step: self.run.failed_step,
            expected: self.expected.as_ref(),
            pending_golden: self.pending_golden.as_deref(),
            skipped: self.skipped.as_deref(),
        }
    }

    /// The strict match against `expected_verdict`, when the scenario declares one.
    pub(crate) fn expected_match(&self) -> Option<Result<(), ExpectedMismatch>> {
        self.judged().expected_match()
    }

    pub(crate) fn headline(&self) -> Headline {
        self.judged().headline()
    }

    /// The scenario's exit status (see `compare::Judged::exit_status`).
    pub fn exit_status(&self) -> ExitStatus {
        self.judged().exit_status()
    }

    /// "passed", "regressed", "run failed: ...": the one-line summary.
    pub fn summary(&self) -> String {
        self.judged().summary()
    }

    /// What the reference series is called in table headers: `golden` or the other run's label.
    pub(crate) fn reference_label(&self) -> &str {
        self.reference
            .as_ref()
            .map_or("golden", |g| g.label.as_str())
    }

    /// The golden rule of one metric, when the verdict has one (a multi-seed verdict's
    /// distribution test of the metric stands in for it).
    pub(crate) fn golden_rule(&self, metric: &str) -> Option<&RuleVerdict> {
        self.verdict.as_ref().and_then(|v| {
            v.rule(&format!("golden:{metric}"))
                .or_else(|| v.rule(&seeds::seeds_rule_id_of(metric)))
        })
    }

    /// Whether this is a multi-seed run's combined report (its series are the seeds').
    pub fn is_multi_seed(&self) -> bool {
        self.verdict
            .as_ref()
            .is_some_and(|v| v.rules.iter().any(|r| r.rule.starts_with("seed:")))
    }

    /// The checked metrics, in rule order (plots and per-metric tables follow it).
    pub(crate) fn checked_metrics(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Some(v) = &self.verdict {
            for r in &v.rules {
                for m in &r.metrics {
                    if !out.contains(m) {
                        out.push(m.clone());
                    }
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Number formatting shared by the renderers.

/// Short, stable text for a value in a table: 4 decimals, or scientific when tiny or huge.
pub(crate) fn num(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞" } else { "-∞" }.into();
    }
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        return format!("{v:.3e}");
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

pub(crate) fn opt_num(v: Option<f64>) -> String {
    v.map(num).unwrap_or_else(|| "–".into())
}

pub(crate) fn band_text(b: &Band) -> String {
    let lo = b.lo.map(num).unwrap_or_else(|| "-∞".into());
    let hi = b.hi.map(num).unwrap_or_else(|| "∞".into());
    format!("[{lo}, {hi}]")
}

pub(crate) fn status_text(s: RuleStatus) -> &'static str {
    match s {
        RuleStatus::Pass => "pass",
        RuleStatus::Regressed => "regressed",
        RuleStatus::Improved => "improved",
        RuleStatus::Missing => "missing",
    }
}

pub(crate) fn status_icon(s: RuleStatus) -> &'static str {
    match s {
        RuleStatus::Pass => "✅",
        RuleStatus::Regressed => "❌",
        RuleStatus::Improved => "⚠️",
        RuleStatus::Missing => "❓",
    }
}

/// "✅ pass", "❌ regressed", ...
pub(crate) fn status_cell(s: RuleStatus) -> String {
    format!("{} {}", status_icon(s), status_text(s))
}

/// The rules under the headline: how many, and those that did not pass with their index, in
/// rule order (the Markdown's and the HTML's "N rules, M pass; failing: ..." line).
pub(crate) fn rule_tally(r: &Report) -> Option<(usize, Vec<(usize, &RuleVerdict)>)> {
    r.verdict.as_ref().map(|v| {
        let failing = v
            .rules
            .iter()
            .enumerate()
            .filter(|(_, x)| x.status != RuleStatus::Pass)
            .collect();
        (v.rules.len(), failing)
    })
}

// ---------------------------------------------------------------------------------------------
// Table contents shared by report.md and report.html: plain, unescaped text; each renderer
// escapes it and lays it out in its own format.

/// One row of the rules table.
pub(crate) struct RuleRow<'a> {
    pub(crate) rule: &'a str,
    pub(crate) status: RuleStatus,
    /// The step or window of the evidence.
    pub(crate) at: &'a str,
    pub(crate) value: String,
    pub(crate) golden: String,
    pub(crate) band: String,
    pub(crate) margin: String,
    pub(crate) evidence: &'a str,
}

impl<'a> RuleRow<'a> {
    pub(crate) fn new(x: &'a RuleVerdict) -> RuleRow<'a> {
        let e = &x.evidence;
        RuleRow {
            rule: &x.rule,
            status: x.status,
            at: e.step_or_window.as_deref().unwrap_or("–"),
            value: opt_num(e.value),
            golden: opt_num(e.golden),
            band: e.band.as_ref().map(band_text).unwrap_or_else(|| "–".into()),
            margin: opt_num(e.margin),
            evidence: &e.message,
        }
    }
}

/// One compared point of a golden rule, in a metric's points table.
pub(crate) struct PointRow {
    pub(crate) at: String,
    pub(crate) value: String,
    pub(crate) golden: String,
    pub(crate) band: String,
    /// Distance to the nearer band edge (negative outside the band).
    pub(crate) margin: String,
    pub(crate) status: RuleStatus,
}

impl PointRow {
    pub(crate) fn new(p: &PointCheck) -> PointRow {
        let v = p.value.unwrap_or(f64::NAN);
        PointRow {
            at: p.at(),
            value: opt_num(p.value),
            golden: opt_num(p.golden),
            band: band_text(&p.band),
            margin: num((v - p.band.lo()).min(p.band.hi() - v)),
            status: p.status,
        }
    }
}

/// Part of a value in the run table: text, or a name (path, device, commit) set as code.
pub(crate) enum Piece {
    Text(String),
    Code(String),
}

/// The "Run" table: `(key, value)` rows in order, the same in both reports.
pub(crate) fn run_rows(r: &Report) -> Vec<(&'static str, Vec<Piece>)> {
    use Piece::{Code, Text};
    let run = &r.run;
    let mut rows = Vec::new();
    if !run.scenario_path.is_empty() {
        rows.push(("scenario", vec![Code(run.scenario_path.clone())]));
    }
    if !run.dir.is_empty() {
        rows.push(("run directory", vec![Code(run.dir.clone())]));
    }
    if let Some(s) = run.status {
        let mut t = s.as_str().to_string();
        if let Some(step) = run.failed_step {
            t.push_str(&format!(" at step {step}"));
        }
        if let Some(reason) = &run.reason {
            t.push_str(&format!(": {reason}"));
        }
        rows.push(("status", vec![Text(t)]));
    }
    rows.push(("steps", vec![Text(steps_text(r))]));
    if let Some(seed) = run.seed {
        rows.push(("seed", vec![Text(seed.to_string())]));
    }
    rows.push(("hardware", hardware_cells(run)));
    if let Some(cells) = numerics_cells(run) {
        rows.push(("numerics", cells));
    }
    let mut harness = vec![Text(run.harness_version.clone())];
    if let Some(c) = &run.git_commit {
        harness.extend([Text(" (".into()), Code(c.clone()), Text(")".into())]);
    }
    rows.push(("harness", harness));
    if !run.host.is_empty() {
        rows.push(("host", vec![Text(run.host.clone())]));
    }
    if let Some(s) = &run.started {
        let ended = run.ended.as_deref().unwrap_or("?");
        rows.push(("time", vec![Text(format!("{s} → {ended}"))]));
    }
    if let Some(p) = r.reference.as_ref().and_then(|g| g.provenance.as_ref()) {
        rows.push(("golden", vec![Text(golden_text(p))]));
    }
    if let Some(p) = &r.pending_golden {
        rows.push(("pending golden", vec![Code(p.clone())]));
    }
    rows
}

/// The "steps" row: steps recorded of those planned, or for a multi-seed run the steps of a
/// seed and the number of seeds.
fn steps_text(r: &Report) -> String {
    let run = &r.run;
    if r.is_multi_seed() {
        let seeds = r
            .verdict
            .iter()
            .flat_map(|v| v.rules.iter())
            .filter(|x| x.rule.starts_with("seed:"))
            .count();
        format!(
            "{} a seed, {seeds} seeds (each in its own directory)",
            run.steps.unwrap_or_default()
        )
    } else {
        let planned = run.steps.map(|s| format!(" of {s} planned"));
        format!(
            "{} recorded{}",
            r.metrics.len(),
            planned.unwrap_or_default()
        )
    }
}

/// The "hardware" row: the hardware, its device, threads and torch version.
fn hardware_cells(run: &RunInfo) -> Vec<Piece> {
    let mut details = String::new();
    if let Some(t) = run.threads {
        details.push_str(&format!(", {t} threads"));
    }
    if let Some(t) = &run.torch_version {
        details.push_str(&format!(", torch {t}"));
    }
    details.push(')');
    vec![
        Piece::Text(format!("{} (device ", run.hardware)),
        Piece::Code(run.device.clone()),
        Piece::Text(details),
    ]
}

/// The "numerics" row, when the run recorded its numerics: the fingerprint and any pinned
/// CPU kernels.
fn numerics_cells(run: &RunInfo) -> Option<Vec<Piece>> {
    use Piece::{Code, Text};
    let n = run.numerics.as_ref()?;
    let mut cells = vec![Text("fingerprint ".into()), Code(n.fingerprint.clone())];
    if let Some(k) = &n.cpu_kernels {
        cells.push(Text(format!(", CPU kernels pinned to {} (", k.isa)));
        cells.push(Code(k.env.join(" ")));
        cells.push(Text(")".into()));
        if let Some(note) = &k.note {
            cells.push(Text(format!("; {note}")));
        }
    }
    Some(cells)
}

/// The "golden" row: where the golden came from.
fn golden_text(p: &Provenance) -> String {
    match &p.source {
        Some(src) => format!("{src} (not a run of this harness)"),
        None => {
            let commit = p
                .git_commit
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default();
            format!(
                "blessed {} with harness {}{commit} on {}, seed {}",
                p.date,
                p.harness_version,
                p.device,
                p.seed.map(|s| s.to_string()).unwrap_or_else(|| "–".into())
            )
        }
    }
}

/// A file name for a metric's plot: `critic/rewards/mean` -> `critic_rewards_mean.svg`.
pub(crate) fn plot_file_name(metric: &str) -> String {
    let mut s: String = metric
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.push_str(".svg");
    s
}

// ---------------------------------------------------------------------------------------------
// verdict.json

#[derive(serde::Serialize)]
struct VerdictDoc<'a> {
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

pub(crate) fn render_verdict_json(r: &Report) -> String {
    let doc = VerdictDoc {
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

// ---------------------------------------------------------------------------------------------
// The one place that writes.

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Fs(#[from] fsx::FsError),
}

/// Write every report of one scenario into `dir`: verdict.json, report.md, report.html,
/// junit.xml and plots/*.svg (atomically, file by file).
pub(crate) fn write_reports(dir: &Path, r: &Report) -> Result<(), ReportError> {
    fsx::write_atomic(&dir.join("verdict.json"), render_verdict_json(r).as_bytes())?;
    fsx::write_atomic(&dir.join("report.md"), render_markdown(r).as_bytes())?;
    fsx::write_atomic(&dir.join("report.html"), render_html(r).as_bytes())?;
    fsx::write_atomic(
        &dir.join("junit.xml"),
        render_junit(std::slice::from_ref(r)).as_bytes(),
    )?;
    for (name, svg) in render_plots(r) {
        fsx::write_atomic(&dir.join("plots").join(name), svg.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::judge_tables;
    use crate::compare::ChecksSpec;
    use crate::util::html_escape;

    fn series(values: &[(&str, &[f64])]) -> MetricTable {
        MetricTable::from_columns(values)
    }

    fn manifest(checks: &str, expected: Option<&str>) -> RunManifest {
        RunManifest {
            judged_against: None,
            label: None,
            trainer_sources: Default::default(),
            scenario: "smoke/mock-gsm8k-grpo".into(),
            scenario_path: "scenarios/smoke/mock-gsm8k-grpo.yaml".into(),
            hardware: "cpu".into(),
            status: RunStatus::Completed,
            reason: None,
            failed_step: None,
            seed: 7,
            steps: 6,
            checks: serde_json::from_str(checks).unwrap(),
            expected_verdict: expected.map(|e| serde_json::from_str(e).unwrap()),
            harness_version: "0.1.0".into(),
            git_commit: Some(format!("{:x}", 0xdead_beef_u32)),
            build_commit: None,
            host: "build-host-17".into(),
            device: "cpu".into(),
            threads: Some(2),
            torch_version: None,
            numerics: None,
            started: chrono::Utc::now().to_rfc3339(),
            ended: Some(chrono::Utc::now().to_rfc3339()),
            plan_hash: "p".into(),
            scenario_hash: "s".into(),
            knobs: vec![KnobDiff {
                key: "config.actor_rollout_ref.actor.optim.lr".into(),
                default: Some("1e-6".into()),
                value: "1e-5".into(),
                origin: "--set".into(),
            }],
            pending_golden: None,
            reference_run: None,
            notes: Vec::new(),
            dropped: Vec::new(),
            replay: None,
            strays: Vec::new(),
        }
    }

    const CHECKS: &str = r#"{"golden": {
        "critic/rewards/mean": {"window": 3, "abs": 0.05, "direction": "higher_is_better"},
        "perf/mfu/actor": {"rel": 0.05, "direction": "higher_is_better", "improvement_limit": 0.2}},
      "expect": ["mean(critic/rewards/mean, last 3) >= mean(critic/rewards/mean, first 3) + 0.2",
                 "all(actor/grad_norm, finite)"]}"#;

    fn golden() -> Reference {
        Reference {
            label: "golden".into(),
            table: series(&[
                ("critic/rewards/mean", &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
                ("perf/mfu/actor", &[0.25; 6]),
            ]),
            provenance: Some(Provenance {
                date: "2026-01-02T03:04:05Z".into(),
                harness_version: "0.1.0".into(),
                git_commit: Some("0123abc".into()),
                device: "cpu".into(),
                seed: Some(7),
                threads: Some(2),
                torch_version: None,
                source: None,
                ..Provenance::default()
            }),
        }
    }

    /// A run whose reward regresses in the second window and whose grad norm goes NaN.
    fn regressed(dir: &Path) -> Report {
        let run = series(&[
            ("critic/rewards/mean", &[0.1, 0.2, 0.3, 0.2, 0.25, 0.3]),
            ("perf/mfu/actor", &[0.25, 0.26, 0.25, 0.255, 0.25, 0.25]),
            ("actor/grad_norm", &[1.0, 0.9, f64::NAN, 0.8, 0.7, 0.7]),
        ]);
        let m = manifest(CHECKS, None);
        let g = golden();
        let verdict = judge_tables(&run, Some(&g.table), &m.checks);
        let mut r = Report::from_run(dir, &m, run, Some(g), Some(verdict));
        r.trainer_tail = Some("(TaskRunner pid=1) step:6 - critic/rewards/mean:0.3\n".into());
        r
    }

    /// Paths, times, host and commit change from run to run: snapshots see placeholders.
    fn redact(text: &str, r: &Report) -> String {
        let mut t = text.to_string();
        // report.html lets a path break after each `/`.
        let mut pairs: Vec<(String, &str)> = vec![
            (r.run.dir.replace('/', "/<wbr>"), "[dir]"),
            (r.run.dir.clone(), "[dir]"),
        ];
        for s in [&r.run.started, &r.run.ended].into_iter().flatten() {
            pairs.push((s.clone(), "[time]"));
        }
        pairs.push((r.run.host.clone(), "[host]"));
        if let Some(c) = &r.run.git_commit {
            pairs.push((c.clone(), "[commit]"));
        }
        for (from, to) in pairs {
            if !from.is_empty() {
                t = t.replace(&from, to);
            }
        }
        t
    }

    fn snapshot(name: &str, text: &str) {
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots"));
        settings.set_prepend_module_to_snapshot(false);
        settings.bind(|| insta::assert_snapshot!(name, text));
    }

    #[test]
    fn regressed_run_reports() {
        let dir = tempfile::tempdir().unwrap();
        let r = regressed(&dir.path().join("20260102-030405-1"));
        assert_eq!(r.exit_status(), ExitStatus::CheckFailed);
        let md = render_markdown(&r);
        assert!(
            md.starts_with("## ❌ smoke/mock-gsm8k-grpo: regressed"),
            "{md}"
        );
        snapshot("report_regressed.md", &redact(&md, &r));
        snapshot(
            "verdict_regressed.json",
            &redact(&render_verdict_json(&r), &r),
        );
        snapshot(
            "junit_regressed.xml",
            &redact(&render_junit(std::slice::from_ref(&r)), &r),
        );
    }

    #[test]
    fn expected_failure_and_skipped_reports() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = regressed(&dir.path().join("run-1"));
        r.expected = Some(
            serde_json::from_str(
                r#"{"outcome": "regressed", "rules": ["golden:critic/rewards/mean",
                    "expect:mean(critic/rewards/mean, last 3) >= mean(critic/rewards/mean, first 3) + 0.2",
                    "expect:all(actor/grad_norm, finite)"]}"#,
            )
            .unwrap(),
        );
        assert_eq!(r.expected_match(), Some(Ok(())));
        assert_eq!(r.exit_status(), ExitStatus::Passed);
        let skipped = Report::skipped("gpu/torch-h200", "needs a CUDA device");
        assert_eq!(skipped.exit_status(), ExitStatus::Passed);
        let md = render_markdown(&r);
        assert!(
            md.contains("expected failure: regressed as declared"),
            "{md}"
        );
        snapshot("report_expected_failure.md", &redact(&md, &r));
        snapshot("report_skipped.md", &render_markdown(&skipped));
        let junit = render_junit(&[r.clone(), skipped.clone()]);
        snapshot("junit_expected_and_skipped.xml", &redact(&junit, &r));

        // Parse the JUnit back: well-formed, one suite per scenario, statuses as intended.
        let back = quick_junit::Report::deserialize_from_str(&junit).unwrap();
        assert_eq!(back.test_suites.len(), 2);
        let s0 = &back.test_suites[0];
        assert_eq!(s0.name.as_str(), "smoke/mock-gsm8k-grpo");
        assert_eq!(s0.failures, 0);
        assert!(s0
            .test_cases
            .iter()
            .any(|c| c.name.as_str() == "expected verdict"));
        let s1 = &back.test_suites[1];
        assert_eq!(s1.test_cases.len(), 1);
        assert!(matches!(
            s1.test_cases[0].status,
            quick_junit::TestCaseStatus::Skipped { .. }
        ));

        // An unexpected pass of a declared failure is a failure.
        let mut passed = regressed(&dir.path().join("run-2"));
        passed.verdict = Some(judge_tables(
            &passed.reference.as_ref().unwrap().table.clone(),
            Some(&passed.reference.as_ref().unwrap().table),
            &ChecksSpec::default(),
        ));
        passed.expected = r.expected.clone();
        assert_eq!(passed.exit_status(), ExitStatus::CheckFailed);
        assert!(render_markdown(&passed).contains("not matched"));
    }

    #[test]
    fn junit_failures_carry_the_evidence() {
        let dir = tempfile::tempdir().unwrap();
        let r = regressed(&dir.path().join("run-1"));
        let junit = render_junit(std::slice::from_ref(&r));
        let back = quick_junit::Report::deserialize_from_str(&junit).unwrap();
        let suite = &back.test_suites[0];
        let case = suite
            .test_cases
            .iter()
            .find(|c| c.name.as_str() == "golden:critic/rewards/mean")
            .unwrap();
        match &case.status {
            quick_junit::TestCaseStatus::NonSuccess { message, .. } => {
                let m = message.as_ref().unwrap().as_str();
                assert!(
                    m.contains("at steps 4..6") && m.contains("band [0.45, 0.6]"),
                    "{m}"
                );
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        assert_eq!(suite.failures, 3);
    }

    #[test]
    fn html_is_self_contained_with_inline_plots() {
        let dir = tempfile::tempdir().unwrap();
        let r = regressed(&dir.path().join("run-1"));
        let html = render_html(&r);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert_eq!(
            html.matches("<figure").count(),
            3,
            "one plot per checked metric"
        );
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
        assert!(!html.contains("<script"));
        assert!(html.contains("config.actor_rollout_ref.actor.optim.lr"));
        assert!(html.contains("&lt;") || !r.scenario.contains('<'));
        // The plots have their own test; the snapshot keeps the page reviewable without them.
        let mut page = String::new();
        let mut rest = html.as_str();
        while let Some(start) = rest.find("<svg width=") {
            page.push_str(&rest[..start]);
            page.push_str("<svg>[plot]</svg>");
            rest = rest[start..]
                .find("</svg>")
                .map(|end| &rest[start + end + "</svg>".len()..])
                .unwrap_or("");
        }
        page.push_str(rest);
        snapshot("report_regressed.html", &redact(&page, &r));
    }

    /// The text between the body's start and the first table: the headline block.
    fn html_head(html: &str) -> &str {
        let body = html.find("<body>").unwrap();
        let table = html.find("<table").unwrap_or(html.len());
        &html[body..table]
    }

    #[test]
    fn html_names_the_failing_rules_before_the_tables() {
        let dir = tempfile::tempdir().unwrap();
        let r = regressed(&dir.path().join("run-1"));
        let html = render_html(&r);
        let head = html_head(&html);
        let total = r.verdict.as_ref().unwrap().rules.len();
        let tally = format!(
            "{total} rules, {} pass; <b class=\"fail\">failing:</b>",
            total - 3
        );
        assert!(head.contains(&tally), "{head}");
        let failing: Vec<&str> = r
            .verdict
            .as_ref()
            .unwrap()
            .failing()
            .map(|x| x.rule.as_str())
            .collect();
        assert_eq!(failing.len(), 3);
        for rule in failing {
            let named = html_escape(rule);
            assert!(head.contains(&named), "{rule} not named on top:\n{head}");
        }
        // The same line as the Markdown's.
        let md = render_markdown(&r);
        assert!(
            md.contains("; failing: `golden:critic/rewards/mean` regressed"),
            "{md}"
        );
    }

    #[test]
    fn html_status_marks_need_no_emoji_font() {
        let dir = tempfile::tempdir().unwrap();
        let r = regressed(&dir.path().join("run-1"));
        let html = render_html(&r);
        let emoji: Vec<char> = html
            .chars()
            .filter(|c| {
                matches!(*c as u32, 0x2600..=0x27BF | 0x2B00..=0x2BFF | 0x23E9..=0x23FA
                    | 0x1F000..=0x1FAFF | 0xFE0F)
            })
            .collect();
        assert!(emoji.is_empty(), "emoji in report.html: {emoji:?}");
        // Each status is an inline SVG mark, named for screen readers, beside its word.
        assert!(html.contains("aria-label=\"regressed\"><circle"), "{html}");
        assert!(
            html.contains("<h1 class=\"fail\"><svg class=\"mark\""),
            "{html}"
        );
    }

    #[test]
    fn html_keeps_numbers_on_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = regressed(&dir.path().join("run-1"));
        let v = r.verdict.as_mut().unwrap();
        v.rules[0].evidence.message = "worst at step 4: 2.000e-6 against 1.5e-6".into();
        let html = render_html(&r);
        // Value, reference, band and margin cells never wrap; nor does a number in the
        // evidence, whose minus sign a browser may break after.
        assert!(html.contains("td.n,td.nw,.nw{white-space:nowrap}"));
        assert!(html.contains("<td class=\"nw\">[0.45, 0.6]</td>"), "{html}");
        assert!(
            html.contains("<span class=\"nw\">2.000e-6</span> against <span class=\"nw\">1.5e-6"),
            "{html}"
        );
    }

    #[test]
    fn plots_shade_the_band_and_mark_failures() {
        let dir = tempfile::tempdir().unwrap();
        let r = regressed(&dir.path().join("run-1"));
        let plots = render_plots(&r);
        let names: Vec<&str> = plots.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "critic_rewards_mean.svg",
                "perf_mfu_actor.svg",
                "actor_grad_norm.svg"
            ]
        );
        let (_, reward) = &plots[0];
        assert!(
            reward.starts_with("<svg"),
            "{}",
            &reward[..80.min(reward.len())]
        );
        // Band rectangles in the band colour, and the failure marks in red.
        assert!(reward.contains("#4285F4"), "band colour");
        assert!(reward.contains("#D62728"), "failure colour");
        // The passing MFU plot has a band but no failure mark.
        assert!(plots[1].1.contains("#4285F4") && !plots[1].1.contains("#D62728"));
        // The NaN step of the grad norm is marked.
        assert!(plots[2].1.contains("#D62728"));
        let overlay = render_overlay(
            &r.metrics,
            &r.reference.as_ref().unwrap().table,
            "critic/rewards/mean",
            "a",
            "b",
        );
        assert!(overlay.contains("<svg") && overlay.contains("critic/rewards/mean"));
    }

    #[test]
    fn write_reports_writes_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("run-1");
        let r = regressed(&run_dir);
        write_reports(&run_dir, &r).unwrap();
        for f in [
            "verdict.json",
            "report.md",
            "report.html",
            "junit.xml",
            "plots/critic_rewards_mean.svg",
            "plots/perf_mfu_actor.svg",
        ] {
            assert!(run_dir.join(f).is_file(), "{f}");
        }
        let v: serde_json::Value =
            serde_json::from_str(&fsx::read_to_string(&run_dir.join("verdict.json")).unwrap())
                .unwrap();
        assert_eq!(v["exit_code"], 1);
        assert_eq!(v["outcome"], "regressed");
    }

    #[test]
    fn exit_status_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = regressed(&dir.path().join("run-1"));
        r.run.status = Some(RunStatus::Failed);
        r.run.reason = Some("backend exited with status 1".into());
        assert_eq!(r.exit_status(), ExitStatus::RunFailed);
        assert!(r.summary().contains("backend exited"));
        r.expected =
            Some(serde_json::from_str(r#"{"outcome": "failed", "reason": "exited"}"#).unwrap());
        assert_eq!(r.exit_status(), ExitStatus::Passed);
        let mut r = regressed(&dir.path().join("run-2"));
        r.pending_golden = Some("golden/x/cpu/metrics.csv.new".into());
        assert_eq!(r.exit_status(), ExitStatus::NoGolden);
        let mut r = regressed(&dir.path().join("run-3"));
        r.run.status = Some(RunStatus::Aborted);
        r.verdict.as_mut().unwrap().outcome = Outcome::Passed;
        assert_eq!(r.exit_status(), ExitStatus::CheckFailed);
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(0.30000000000000004), "0.3");
        assert_eq!(num(1e-6), "1.000e-6");
        assert_eq!(num(-0.00001), "-1.000e-5");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(f64::NAN), "NaN");
        assert_eq!(num(-0.0), "0");
    }
}
