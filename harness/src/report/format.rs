//! Numbers, statuses and rows as every renderer shows them.

use super::{Report, RunInfo};
use crate::judge::{Band, PointCheck, RuleStatus, RuleVerdict};
use crate::model::golden::Provenance;

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

/// The rules under the headline: how many, and those that did not pass with their index, in
/// rule order (the report's "N rules, M pass; failing: ..." line).
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
// Table contents of the report (`run_doc`) and the terminal: plain, unescaped text; each
// writer escapes it and lays it out in its own format.

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
    /// The evidence's own part: its numbers, without the text its rule kind shares.
    pub(crate) evidence: &'a str,
    /// Whether the evidence had shared text, said once under [`HOW_TITLE`].
    pub(crate) shared: bool,
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
            evidence: split_shared(&x.rule, &e.message).0,
            shared: split_shared(&x.rule, &e.message).1.is_some(),
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

/// The "Run" table: `(key, value)` rows in order.
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
    if let Some(cmd) = &run.trainer_command {
        rows.push(("trainer command", vec![Code(cmd.clone())]));
    }
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
        let seeds = r.verdict.iter().flat_map(|v| v.seed_rules()).count();
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

/// The heading of the two-run overlay: both curves' names.
pub(crate) fn overlay_title(o: &super::Overlay) -> String {
    format!("Overlay: {} and {}", o.run, o.other)
}

/// The section that says once what every rule of a kind shares (how its band is built, how to
/// change it); the rules' evidence links to its heading.
pub(crate) const HOW_TITLE: &str = "How these rules judge";

/// Rule kinds whose evidence ends in text every rule of the kind shares: the id's prefix, and
/// how that text begins (after `; `), as the judge writes it.
const SHARED: &[(&str, &str)] = &[
    (
        "stability:",
        "a default stability rule of a learning scenario",
    ),
    ("weight_sync:", "a default rule of a learning scenario"),
];

/// A rule's evidence message split into its own part and the text its kind shares, if any.
pub(crate) fn split_shared<'a>(rule: &str, message: &'a str) -> (&'a str, Option<&'a str>) {
    SHARED
        .iter()
        .filter(|(kind, _)| rule.starts_with(kind))
        .find_map(|(_, start)| {
            let at = message.find(&format!("; {start}"))?;
            Some((&message[..at], Some(&message[at + 2..])))
        })
        .unwrap_or((message, None))
}

/// Each distinct shared text of the report's rules, once, with the rules (ids) that share it.
pub(crate) fn shared_texts(r: &Report) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for x in r.verdict.iter().flat_map(|v| v.rules.iter()) {
        if let (_, Some(text)) = split_shared(&x.rule, &x.evidence.message) {
            match out.iter_mut().find(|(t, _)| t == text) {
                Some((_, rules)) => rules.push(&x.rule),
                None => out.push((text.to_string(), vec![&x.rule])),
            }
        }
    }
    out
}
