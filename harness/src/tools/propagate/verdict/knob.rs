//! A knob's cells combined into its verdict, and its flags matched against the manifest's
//! `known_gaps`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::cell::{Cell, CellVerdict, Problem};
use super::perturbations::{condition_label, Condition};
use crate::tools::propagate::knob_manifest::{
    json_equal, Knob, KnobManifest, KnownGap, ProblemKind,
};
use crate::tools::propagate::observed::{pattern_matches, Change};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KnobVerdict {
    Consumed,
    ConsumedUnderCondition,
    SentNotConsumed,
    NotSent,
    UnexpectedEffect,
    NotObservable,
    NotExercised,
    RunFailed,
}

impl KnobVerdict {
    pub(crate) fn label(self) -> &'static str {
        match self {
            KnobVerdict::Consumed => "consumed",
            KnobVerdict::ConsumedUnderCondition => "consumed under a condition only",
            KnobVerdict::SentNotConsumed => "sent but not consumed",
            KnobVerdict::NotSent => "not sent",
            KnobVerdict::UnexpectedEffect => "unexpected effect",
            KnobVerdict::NotObservable => "not observable here",
            KnobVerdict::NotExercised => "not exercised",
            KnobVerdict::RunFailed => "run failed",
        }
    }
}

/// A knob's row of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct KnobResult {
    pub path: String,
    pub verdict: KnobVerdict,
    /// For a conditional verdict: the assignments under which the server consumed it.
    pub consumed_when: Vec<Condition>,
    pub(crate) allowed_noop: Option<String>,
    pub flagged: bool,
    /// Every reason it is flagged, in words.
    pub problems: Vec<String>,
    /// The same reasons with their kinds and locations (what `known_gaps` entries match).
    pub issues: Vec<Problem>,
    pub cells: Vec<Cell>,
    pub(crate) note: Option<String>,
    /// What the manifest states that no run observes (its YAML default against the server's
    /// default for an absent key): shown, labelled as the manifest's claim, never flagged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) claims: Vec<String>,
    /// The manifest's `known_gaps` entry this flag matches (reason, link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_gap: Option<String>,
}

impl KnobVerdict {
    /// The snake-case name (`propagation.json`, `known_gaps`).
    pub(crate) fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

impl KnobResult {
    /// The verdict in words, with the condition for a conditional one.
    pub(crate) fn verdict_text(&self) -> String {
        match self.verdict {
            KnobVerdict::ConsumedUnderCondition => {
                let when: Vec<String> = self.consumed_when.iter().map(condition_label).collect();
                format!("{} ({})", self.verdict.label(), when.join("; "))
            }
            KnobVerdict::SentNotConsumed | KnobVerdict::NotSent if self.allowed_noop.is_some() => {
                format!("{} (allowed no-op)", self.verdict.label())
            }
            v => v.label().to_string(),
        }
    }

    /// One line per cell: condition, value, verdict, the locations that changed.
    pub fn evidence(&self) -> Vec<String> {
        self.cells
            .iter()
            .map(|c| {
                let mut s = format!(
                    "[{}] {} -> {}",
                    condition_label(&c.condition),
                    c.value,
                    c.verdict.label()
                );
                if !c.consumed_at.is_empty() {
                    s.push_str(&format!(" at {}", c.consumed_at.join(", ")));
                }
                let shown: Vec<String> = c.changes.iter().take(4).map(Change::describe).collect();
                if !shown.is_empty() {
                    s.push_str(&format!("; changed {}", shown.join("; ")));
                    if c.changes.len() > shown.len() {
                        s.push_str(&format!("; +{} more", c.changes.len() - shown.len()));
                    }
                }
                s
            })
            .collect()
    }
}

/// A comparison of two hand-written manifest fields: a claim, not an observation.
fn default_mismatch(k: &Knob) -> Option<String> {
    let sd = k.server_default.as_ref()?;
    let interpolated = k.default.as_str().is_some_and(|s| s.contains("${"));
    if k.default.is_null() || interpolated || json_equal(&k.default, sd) {
        return None;
    }
    Some(format!(
        "manifest only, not observed: the YAML default is {}, and the manifest says the server's default for an absent key is {}",
        k.default, sd
    ))
}

/// Combine a knob's cells into its verdict.
pub(crate) fn judge_knob(k: &Knob, cells: Vec<Cell>, not_exercised: Option<&str>) -> KnobResult {
    let mut problems: Vec<Problem> = Vec::new();
    let claims: Vec<String> = default_mismatch(k).into_iter().collect();
    for c in &cells {
        for p in &c.problems {
            if !problems.iter().any(|q| q.text == p.text) {
                problems.push(p.clone());
            }
        }
    }
    let mut groups: BTreeMap<String, (Condition, Vec<&Cell>)> = BTreeMap::new();
    for c in cells.iter().filter(|c| c.verdict != CellVerdict::RunFailed) {
        groups
            .entry(condition_label(&c.condition))
            .or_insert_with(|| (c.condition.clone(), Vec::new()))
            .1
            .push(c);
    }
    let consumed_when: Vec<Condition> = groups
        .values()
        .filter(|(_, cs)| cs.iter().any(|c| c.verdict == CellVerdict::Consumed))
        .map(|(cond, _)| cond.clone())
        .collect();
    let any = |v: CellVerdict| cells.iter().any(|c| c.verdict == v);
    // A condition whose every cell was not observable at this reach (`--until initialize`)
    // says nothing of whether the server reads the knob there: it neither narrows
    // "consumed" to "under a condition" nor counts as consumed.
    let observed_groups = groups
        .values()
        .filter(|(_, cs)| cs.iter().any(|c| c.verdict != CellVerdict::NotObservable))
        .count();
    let observable = observed_groups > 0;
    let verdict = if let Some(why) = not_exercised {
        problems.push(Problem::new(
            ProblemKind::NotExercised,
            None,
            format!("not exercised: {why}"),
        ));
        KnobVerdict::NotExercised
    } else if groups.is_empty() {
        KnobVerdict::RunFailed
    } else if !observable {
        KnobVerdict::NotObservable
    } else if consumed_when.len() == observed_groups {
        KnobVerdict::Consumed
    } else if !consumed_when.is_empty() {
        KnobVerdict::ConsumedUnderCondition
    } else if any(CellVerdict::UnexpectedEffect) {
        KnobVerdict::UnexpectedEffect
    } else if any(CellVerdict::SentNotConsumed) {
        KnobVerdict::SentNotConsumed
    } else {
        KnobVerdict::NotSent
    };
    let inert = matches!(verdict, KnobVerdict::SentNotConsumed | KnobVerdict::NotSent);
    if inert && k.allowed_noop.is_none() {
        let text = format!(
            "{}: no condition tried makes the server read it{}",
            verdict.label(),
            k.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
        problems.insert(0, Problem::new(ProblemKind::NotConsumed, None, text));
    }
    KnobResult {
        path: k.path.clone(),
        verdict,
        consumed_when: if verdict == KnobVerdict::ConsumedUnderCondition {
            consumed_when
        } else {
            Vec::new()
        },
        allowed_noop: k.allowed_noop.clone(),
        flagged: !problems.is_empty(),
        problems: problems.iter().map(|p| p.text.clone()).collect(),
        issues: problems,
        cells,
        note: k.note.clone(),
        claims,
        known_gap: None,
    }
}

/// Whether a known gap entry accepts one problem of its knob, flagged with `verdict`.
fn gap_accepts(g: &KnownGap, verdict: &str, p: &Problem) -> bool {
    g.verdict == verdict
        && g.problem == p.kind
        && match (&g.at, &p.at) {
            (None, _) => true,
            (Some(pat), Some(at)) => pattern_matches(pat, at),
            (Some(_), None) => false,
        }
}

/// Match the flags against the manifest's `known_gaps`: a flagged knob is a known gap when
/// every problem it shows is accepted by an entry of that knob (same verdict, same problem
/// kind, at the entry's location when it names one); a problem no entry accepts makes it a new
/// flag. An entry that accepts none of its knob's problems no longer holds (returned, each in
/// words), which fails the check until the entry is updated or removed. A knob that was not
/// judged here (not exercised, not observable, a failed run) neither confirms nor closes its
/// entries, nor does an entry at a location that no trial here could show (a consumer whose
/// condition no trial ran, as under `--condition`: the gap is still there, just not looked at).
/// Entries for unlisted keys are matched by [`apply_unlisted_gaps`].
pub(crate) fn apply_known_gaps(m: &KnobManifest, knobs: &mut [KnobResult]) -> Vec<String> {
    let mut closed = Vec::new();
    for k in knobs.iter_mut() {
        let gaps: Vec<&KnownGap> = m
            .known_gaps
            .iter()
            .filter(|g| g.knob == k.path && g.problem != ProblemKind::Unlisted)
            .filter(|g| looked_at(g, k, m.knobs.iter().find(|x| x.path == k.path)))
            .collect();
        if gaps.is_empty()
            || matches!(
                k.verdict,
                KnobVerdict::NotExercised | KnobVerdict::NotObservable | KnobVerdict::RunFailed
            )
        {
            continue;
        }
        let name = k.verdict.name();
        let used: Vec<bool> = gaps
            .iter()
            .map(|g| k.flagged && k.issues.iter().any(|p| gap_accepts(g, &name, p)))
            .collect();
        let all_accepted = k
            .issues
            .iter()
            .all(|p| gaps.iter().any(|g| gap_accepts(g, &name, p)));
        if k.flagged && all_accepted {
            let reasons: Vec<String> = gaps
                .iter()
                .zip(&used)
                .filter(|(_, u)| **u)
                .map(|(g, _)| match &g.link {
                    Some(l) => format!("{} ({l})", g.reason),
                    None => g.reason.clone(),
                })
                .collect();
            k.known_gap = Some(reasons.join("; "));
        }
        for g in gaps.iter().zip(&used).filter(|(_, u)| !**u).map(|(g, _)| g) {
            closed.push(closed_gap(g, k, &name));
        }
    }
    closed
}

/// Whether this matrix looked where the entry points: the entry names no location, or no
/// conditional reader of the knob is there, or a trial had that reader active, changed that
/// location or showed a problem there.
fn looked_at(g: &KnownGap, k: &KnobResult, knob: Option<&Knob>) -> bool {
    let Some(pat) = &g.at else { return true };
    let near = |at: &str| pattern_matches(pat, at) || pattern_matches(at, pat);
    let conditional = knob.is_some_and(|knob| {
        knob.consumers
            .iter()
            .filter(|c| !c.when.is_empty())
            .map(|c| &c.at)
            .chain(knob.to.iter().filter(|d| !d.when.is_empty()).map(|d| &d.at))
            .any(|at| near(at))
    });
    !conditional
        || k.issues
            .iter()
            .filter_map(|p| p.at.as_deref())
            .chain(k.cells.iter().flat_map(|c| {
                c.active
                    .iter()
                    .map(String::as_str)
                    .chain(c.changes.iter().map(|ch| ch.location.as_str()))
            }))
            .any(near)
}

/// Why a known gap entry no longer holds, in words.
fn closed_gap(g: &KnownGap, k: &KnobResult, name: &str) -> String {
    let what = format!(
        "known gap `{}`/`{}`{}",
        g.verdict,
        g.problem.name(),
        g.at.as_ref()
            .map(|a| format!(" at {a}"))
            .unwrap_or_default()
    );
    if k.flagged {
        let kinds: Vec<String> = k
            .issues
            .iter()
            .map(|p| {
                format!(
                    "`{}`{}",
                    p.kind.name(),
                    p.at.as_ref()
                        .map(|a| format!(" at {a}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        format!(
            "`{}`: {what} no longer holds, it is now flagged as `{name}` with {}: update \
             known_gaps",
            g.knob,
            kinds.join(", ")
        )
    } else {
        format!(
            "`{}`: {what} has closed (now `{name}`, not flagged): remove it from known_gaps",
            g.knob
        )
    }
}
