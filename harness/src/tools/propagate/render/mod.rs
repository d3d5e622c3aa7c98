//! The propagation matrix in Markdown, HTML and JUnit: pure functions of one report value.

use serde::Serialize;

use super::resolved::Unlisted;
use super::verdict::{KnobResult, KnobVerdict};
use crate::report::junit::{self, Case, CaseStatus, Junit, Problem, Suite};

mod document;

/// Everything the renderers show.
#[derive(Debug, Clone, Serialize)]
pub struct PropagationReport {
    pub(crate) scenario: String,
    pub(crate) backend: String,
    /// Distinct runs executed (baselines included).
    pub runs: usize,
    pub(crate) seconds: f64,
    /// Who drove the trials: `the builtin driver (rlharness's own adapter)` or the command.
    #[serde(default)]
    pub driver: String,
    /// The knob manifest the claims come from (where the server reads each location).
    #[serde(default)]
    pub(crate) manifest: String,
    /// How far each trial ran (`--until`).
    #[serde(default)]
    pub until: String,
    pub knobs: Vec<KnobResult>,
    /// Known gaps of the manifest that no longer hold (each fails the check).
    #[serde(default)]
    pub(crate) closed_gaps: Vec<String>,
    /// Whether knobs shared runs (`--group`, the default).
    pub grouping: bool,
    /// Runs the plan needs one knob per trial, and grouped (before any split).
    pub planned_solo: usize,
    pub planned_grouped: usize,
    /// Groups split because their run could not be attributed.
    pub splits: usize,
    /// Keys of the trainer's resolved backend block that the manifest does not list.
    pub unlisted: Unlisted,
    /// Keys of the scenario's resolved config the manifest accounts for neither as a knob nor
    /// as not sent (each fails the check).
    #[serde(default)]
    pub unaccounted: Vec<super::accounted::Unaccounted>,
    /// `--require-observed`: a knob not observed fails the check.
    pub require_observed: bool,
    /// The variables the scenario's `driver.env` and the launcher set, as the baselines' trainer
    /// processes got them (a command trainer's matrix; a `driver.env` value a process missed
    /// fails the check).
    #[serde(default)]
    pub environment: super::environ::Environment,
}

/// The message for a run whose trainer's resolved config was not seen.
pub(crate) const UNLISTED_UNSEEN: &str =
    "the trainer's resolved config was not seen; unlisted knobs could not be checked";

impl PropagationReport {
    /// Flagged knobs and flagged environment variables.
    pub fn flagged(&self) -> usize {
        self.knobs.iter().filter(|k| k.flagged).count() + self.environment.flagged().count()
    }
    /// Flags that are not known gaps.
    pub fn new_flags(&self) -> usize {
        self.knobs
            .iter()
            .filter(|k| k.flagged && k.known_gap.is_none())
            .count()
            + self.environment.flagged().count()
    }
    /// Knobs no trial observed: not observable here, or not exercised.
    pub fn unobserved(&self) -> usize {
        self.unobserved_paths().len()
    }
    pub fn unobserved_paths(&self) -> Vec<&str> {
        self.knobs
            .iter()
            .filter(|k| {
                matches!(
                    k.verdict,
                    KnobVerdict::NotObservable | KnobVerdict::NotExercised
                )
            })
            .map(|k| k.path.as_str())
            .collect()
    }
    /// 0 when every flag is a known gap, no known gap has closed, every unlisted key is a
    /// known gap and (with `--require-observed`) every knob was observed; else 1.
    pub fn passed(&self) -> bool {
        self.new_flags() == 0
            && self.unaccounted.is_empty()
            && self.closed_gaps.is_empty()
            && self.unlisted.new_flags() == 0
            && !(self.require_observed && self.unobserved() > 0)
    }
    /// What `propagate` prints when it is done: the summary line, each new flag, known gap,
    /// closed known gap and unlisted key on a line of its own. The whole matrix is in the reports, not on the terminal.
    pub fn terminal_summary(&self) -> String {
        const WIDTH: usize = 160;
        let clip = |s: &str| {
            let s = s.replace('\n', " ");
            if s.chars().count() <= WIDTH {
                s
            } else {
                format!("{}…", s.chars().take(WIDTH - 1).collect::<String>())
            }
        };
        let mut out = format!("{}: {}", self.scenario, self.summary());
        for k in &self.unaccounted {
            out.push_str(&format!("\n  UNACCOUNTED {} ({})", k.path, k.origin));
        }
        if !self.unaccounted.is_empty() {
            out.push_str(&format!(
                "\n  ({})",
                super::accounted::advice(&self.manifest)
            ));
        }
        for p in self.environment.flagged() {
            out.push_str(&format!(
                "\n  FLAGGED env.{}: {}",
                p.name,
                clip(&p.describe())
            ));
        }
        for k in self
            .knobs
            .iter()
            .filter(|k| k.flagged && k.known_gap.is_none())
        {
            let why = k.problems.first().map(String::as_str).unwrap_or("");
            out.push_str(&format!(
                "\n  FLAGGED {}: {}",
                k.path,
                clip(&format!("{}: {why}", k.verdict_text()))
            ));
        }
        // A flag the manifest accepts is still a finding (a vendor's bug, say): named with the
        // reason, which points at the line of code that causes it.
        for k in self.knobs.iter().filter(|k| k.flagged) {
            if let Some(why) = &k.known_gap {
                out.push_str(&format!(
                    "\n  known gap {} ({}): {}",
                    k.path,
                    k.verdict_text(),
                    clip(why)
                ));
            }
        }
        for g in &self.closed_gaps {
            out.push_str(&format!("\n  known gap closed: {}", clip(g)));
        }
        for k in self.unlisted.knobs.iter().filter(|k| k.known_gap.is_none()) {
            out.push_str(&format!(
                "\n  UNLISTED {} = {}: add it to the manifest",
                k.path, k.value
            ));
        }
        if self.require_observed && self.unobserved() > 0 {
            out.push_str(&format!(
                "\n  --require-observed: not observed: {}",
                clip(&self.unobserved_paths().join(", "))
            ));
        }
        out
    }
    fn summary(&self) -> String {
        let unlisted = match &self.unlisted.seen_in {
            Some(_) => format!(
                "{} unlisted ({} new)",
                self.unlisted.knobs.len(),
                self.unlisted.new_flags()
            ),
            None => "unlisted not checked".to_string(),
        };
        format!(
            "{}{} knobs, {} runs ({} planned one knob per trial, {} grouped{}, {} groups split), \
             {:.1} s; {} flagged ({} known gaps, {} new); {} unobserved{}; {}; {} known gaps closed.",
            match self.unaccounted.len() {
                0 => String::new(),
                n => format!("{n} unaccounted; "),
            },
            self.knobs.len(),
            self.runs,
            self.planned_solo,
            self.planned_grouped,
            if self.grouping { "" } else { " but grouping off" },
            self.splits,
            self.seconds,
            self.flagged(),
            self.flagged() - self.new_flags(),
            self.new_flags(),
            self.unobserved(),
            if self.require_observed { " (required)" } else { "" },
            unlisted,
            self.closed_gaps.len()
        )
    }
    /// What is observed and what is claimed, in words, for the report's header.
    fn provenance(&self) -> String {
        format!(
            "Driven by {}; each trial ran until {}. **Observed**: what each trial's recorded \
             wire shows (`wire.jsonl`, the JobConfigs in `server_config.json`; server start-up \
             flags only where the run recorded how it started the server). **Claimed**: where \
             the server reads each location and which defaults it has, from the knob manifest \
             `{}`; a verdict of `consumed` means the value was observed at a location the \
             manifest claims the server reads.",
            if self.driver.is_empty() {
                "the scenario's driver"
            } else {
                &self.driver
            },
            if self.until.is_empty() {
                "the first update"
            } else {
                &self.until
            },
            self.manifest
        )
    }
}

fn flag_text(k: &KnobResult) -> &'static str {
    match (k.flagged, &k.known_gap) {
        (false, _) => "ok",
        (true, Some(_)) => "known gap",
        (true, None) => "**FLAGGED**",
    }
}

/// The longest first problem a table row shows; the knob's own section has the whole text
/// (a failed run's problem carries the trainer's last lines).
const HEADLINE_CHARS: usize = 240;

/// The short evidence of a row: the first reason it is flagged, else where it was consumed.
fn headline(k: &KnobResult) -> String {
    if let Some(p) = k.problems.first() {
        let more = k.problems.len() - 1;
        let p = match p.char_indices().nth(HEADLINE_CHARS) {
            Some((cut, _)) => format!("{}… (the whole text in its section)", &p[..cut]),
            None => p.clone(),
        };
        return if more > 0 {
            format!("{p} (+{more} more)")
        } else {
            p
        };
    }
    if k.verdict == KnobVerdict::NotObservable {
        if let Some(why) = k.cells.iter().find_map(|c| c.unobservable.clone()) {
            return why;
        }
    }
    if let Some(r) = &k.allowed_noop {
        return format!("allowed no-op: {r}");
    }
    let mut at: Vec<String> = Vec::new();
    for c in &k.cells {
        for a in &c.consumed_at {
            if !at.contains(a) {
                at.push(a.clone());
            }
        }
    }
    match k.verdict {
        KnobVerdict::Consumed | KnobVerdict::ConsumedUnderCondition => {
            format!(
                "observed at {}; claimed (manifest): the server reads it there",
                at.join(", ")
            )
        }
        KnobVerdict::NotObservable => k
            .cells
            .iter()
            .find_map(|c| c.unobservable.clone())
            .unwrap_or_default(),
        _ => k.evidence().first().cloned().unwrap_or_default(),
    }
}

/// `propagation.md`: the report's [`document`] in Markdown.
pub fn markdown(r: &PropagationReport) -> String {
    crate::report::doc::to_markdown(&document::document(r))
}

/// `propagation.html`: the same document as a self-contained page.
pub(crate) fn html(r: &PropagationReport) -> String {
    crate::report::doc::to_html(&document::document(r))
}

/// One test case per knob; a flagged knob is a failure whose text holds the evidence, a knob
/// not observed is skipped (a failure with `--require-observed`); one case per unlisted key (a
/// failure unless a known gap), or one skipped case saying the resolved config was not seen.
pub(crate) fn junit(r: &PropagationReport) -> String {
    let class = format!("propagate.{}", r.backend);
    let mut cases = Vec::new();
    for k in &r.knobs {
        let mut case = Case::new(k.path.clone(), class.clone(), knob_status(r, k));
        if let Some(g) = k.known_gap.as_ref().filter(|_| k.flagged) {
            case.out = Some(format!("known gap ({}): {g}", k.verdict.name()));
        }
        cases.push(case);
    }
    let failure = |message: String, kind: &str| {
        CaseStatus::Fail(Problem {
            message,
            kind: Some(kind.to_string()),
            text: None,
        })
    };
    for c in &r.closed_gaps {
        cases.push(Case::new(
            format!("known_gaps: {c}"),
            class.clone(),
            failure(c.clone(), "known gap closed"),
        ));
    }
    for p in &r.environment.variables {
        let status = if p.flagged {
            failure(p.describe(), "environment variable dropped")
        } else {
            CaseStatus::Pass
        };
        cases.push(Case::new(
            format!("env.{}", p.name),
            format!("{class}.environment"),
            status,
        ));
    }
    let unlisted_class = format!("{class}.unlisted");
    if r.unlisted.seen_in.is_none() {
        let skip = CaseStatus::Skip {
            message: Some(UNLISTED_UNSEEN.to_string()),
        };
        cases.push(Case::new("unlisted knobs", unlisted_class.clone(), skip));
    }
    for k in &r.unlisted.knobs {
        let status = match &k.known_gap {
            Some(_) => CaseStatus::Pass,
            None => failure(
                format!(
                    "the trainer's config carries {} = {}, which the manifest does not list",
                    k.path, k.value
                ),
                "unlisted",
            ),
        };
        let mut case = Case::new(k.path.clone(), unlisted_class.clone(), status);
        if let Some(g) = &k.known_gap {
            case.out = Some(format!("known gap (unlisted): {g}"));
        }
        cases.push(case);
    }
    junit::to_xml(&Junit {
        name: "rlharness-propagate".into(),
        time: Some(std::time::Duration::from_secs_f64(r.seconds.max(0.0))),
        suites: vec![Suite {
            name: format!("propagate.{}", r.scenario),
            cases,
        }],
    })
}

/// A knob's JUnit status: a failure when flagged (and not a known gap) or unobserved under
/// `--require-observed`, skipped when unobserved, else a success.
fn knob_status(r: &PropagationReport, k: &KnobResult) -> CaseStatus {
    let unobserved = matches!(
        k.verdict,
        KnobVerdict::NotObservable | KnobVerdict::NotExercised
    );
    let message = || format!("{}: {}", k.verdict_text(), headline(k));
    if (k.flagged && k.known_gap.is_none()) || (unobserved && r.require_observed) {
        let mut text: Vec<String> = k.problems.clone();
        text.extend(k.evidence().into_iter().map(|e| format!("evidence: {e}")));
        CaseStatus::Fail(Problem {
            message: message(),
            kind: Some(k.verdict.label().to_string()),
            text: Some(text.join("\n")),
        })
    } else if unobserved {
        CaseStatus::Skip {
            message: Some(message()),
        }
    } else {
        CaseStatus::Pass
    }
}

#[cfg(test)]
mod tests;
