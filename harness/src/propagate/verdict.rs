//! From wire diffs to verdicts. A trial is one perturbed run: one knob set to one value under
//! one assignment of its conditions, compared with the baseline run under the same assignment.
//!
//! Rules, per trial (a "cell"):
//! - the changed locations are those whose values differ from the baseline, minus the
//!   manifest's volatile ones;
//! - a consumer is active when every `when` holds in the perturbed run (config paths in its
//!   resolved config, wire locations in its wire);
//! - **consumed**: an active consumer's location changed; **sent but not consumed**: locations
//!   changed, all of them named by the manifest, none read by an active consumer; **unexpected
//!   effect**: something changed that the manifest does not name; **not sent**: nothing changed.
//!
//! Per knob, over its cells: **consumed** when every condition consumed it, **consumed under a
//! condition only** when some did, else the strongest of unexpected effect, sent but not
//! consumed, not sent. A knob is flagged when it is not consumed (unless the manifest allows a
//! no-op, with a reason), or when any cell shows a problem: an active consumer that did not get
//! the value, an unexpected effect, a type the consumer does not declare, a consumer reading a
//! value other than the one tried, a failed run; or when the YAML default differs from the
//! server's default for an absent key.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::manifest::{is_wire_location, json_equal, type_name, Knob, KnobManifest, ProblemKind};
use super::wire::{diff, pattern_matches, show, Change, WireSnapshot};

/// An assignment of condition knobs (config path -> value).
pub(crate) type Condition = BTreeMap<String, Value>;

/// `a=1, b=true`, or `-` for none.
pub(crate) fn condition_label(c: &Condition) -> String {
    if c.is_empty() {
        return "-".into();
    }
    c.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The value of a `--set` override: a YAML flow value (JSON is one).
pub(crate) fn set_value(v: &Value) -> String {
    v.to_string()
}

/// One perturbed run of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Trial {
    /// Index into `KnobManifest::knobs`.
    pub(crate) knob: usize,
    pub(crate) value: Value,
    pub(crate) condition: Condition,
}

impl Trial {
    /// The overrides of its baseline (the condition only), sorted.
    pub(crate) fn baseline_overrides(&self) -> Vec<String> {
        condition_overrides(&self.condition)
    }
    /// The overrides of the perturbed run, sorted.
    pub(crate) fn overrides(&self, m: &KnobManifest) -> Vec<String> {
        let mut o = condition_overrides(&self.condition);
        o.push(format!(
            "++config.{}={}",
            m.knobs[self.knob].path,
            set_value(&self.value)
        ));
        o.sort();
        o
    }
}

pub(crate) fn condition_overrides(c: &Condition) -> Vec<String> {
    let mut o: Vec<String> = c
        .iter()
        .map(|(k, v)| format!("++config.{k}={}", set_value(v)))
        .collect();
    o.sort();
    o
}

/// What the matrix runs: the trials, and the knobs that have no perturbation left.
#[derive(Debug, Clone, Default)]
pub(crate) struct MatrixPlan {
    pub(crate) trials: Vec<Trial>,
    /// (knob index, why nothing runs for it).
    pub(crate) not_exercised: Vec<(usize, String)>,
    /// (knob index, why): knobs the scenario's `propagate.skip` leaves out, judged not
    /// observable here (unobserved, not a flag).
    pub(crate) skipped: Vec<(usize, String)>,
}

fn lookup<'a>(tree: &'a Value, path: &str) -> Option<&'a Value> {
    crate::driver::translate::lookup(tree, path)
}

/// The trials for a scenario whose resolved config is `config`: each knob, under each
/// combination of its condition values, with each `try` value that differs from the
/// scenario's own value (strictly: `4.0` differs from `4`).
pub(crate) fn plan_matrix(m: &KnobManifest, config: &Value) -> MatrixPlan {
    let mut plan = MatrixPlan::default();
    for (i, k) in m.knobs.iter().enumerate() {
        let current = lookup(config, &k.path).cloned().unwrap_or(Value::Null);
        let values: Vec<&Value> = k.tries.iter().filter(|t| **t != current).collect();
        if values.is_empty() {
            plan.not_exercised.push((
                i,
                format!("every `try` value equals the scenario's value {current}"),
            ));
            continue;
        }
        for cond in assignments(&k.conditions) {
            for v in &values {
                plan.trials.push(Trial {
                    knob: i,
                    value: (*v).clone(),
                    condition: cond.clone(),
                });
            }
        }
    }
    plan
}

/// Cartesian product of the condition values; one empty assignment without conditions.
fn assignments(conds: &BTreeMap<String, Vec<Value>>) -> Vec<Condition> {
    let mut out = vec![Condition::new()];
    for (k, values) in conds {
        let mut next = Vec::new();
        for a in &out {
            for v in values {
                let mut b = a.clone();
                b.insert(k.clone(), v.clone());
                next.push(b);
            }
        }
        out = next;
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CellVerdict {
    Consumed,
    SentNotConsumed,
    NotSent,
    UnexpectedEffect,
    /// Where the knob would show cannot be seen in this run: a server start-up flag when the
    /// trainer did not start the server, any location when the trainer talks over Ray.
    NotObservable,
    RunFailed,
}

impl CellVerdict {
    pub(crate) fn label(self) -> &'static str {
        match self {
            CellVerdict::Consumed => "consumed",
            CellVerdict::SentNotConsumed => "sent but not consumed",
            CellVerdict::NotSent => "not sent",
            CellVerdict::UnexpectedEffect => "unexpected effect",
            CellVerdict::NotObservable => "not observable",
            CellVerdict::RunFailed => "run failed",
        }
    }
}

/// One reason a knob is flagged: its kind, the wire location it is about (when it has one) and
/// the words of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    pub text: String,
}

impl Problem {
    pub(crate) fn new(kind: ProblemKind, at: Option<&str>, text: String) -> Problem {
        Problem {
            kind,
            at: at.map(str::to_string),
            text,
        }
    }
}

/// One trial, judged.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub value: Value,
    pub condition: Condition,
    pub verdict: CellVerdict,
    pub(crate) changes: Vec<Change>,
    /// Active consumers (the manifest expects a read here).
    pub(crate) active: Vec<String>,
    /// Active consumers whose location changed.
    pub consumed_at: Vec<String>,
    /// Problems this trial shows (each flags the knob).
    pub(crate) problems: Vec<Problem>,
    /// Why this trial could not be observed (a `not observable` cell).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unobservable: Option<String>,
}

/// The perturbed run of a trial, as the judge needs it.
pub(crate) enum Observed<'a> {
    Ran {
        wire: &'a WireSnapshot,
        /// The perturbed run's resolved config (for config-path conditions).
        config: &'a Value,
    },
    /// The run cannot show the wire (e.g. the trainer talked over Ray): why.
    NotObservable(String),
    Failed(String),
}

fn condition_holds(
    m: &KnobManifest,
    key: &str,
    want: &Value,
    wire: &WireSnapshot,
    config: &Value,
) -> bool {
    if is_wire_location(key) {
        return wire.single(key).is_some_and(|v| json_equal(v, want));
    }
    let actual = lookup(config, key).cloned().or_else(|| {
        m.knobs
            .iter()
            .find(|k| k.path == key)
            .map(|k| k.default.clone())
    });
    actual.is_some_and(|v| json_equal(&v, want))
}

/// Whether every reader the trials' knobs may have in their one run is in a JobConfig
/// (`job.*`, all on the wire once the jobs are initialized). A reader is ruled out only by a
/// config condition the run is known not to meet: the trials' condition, else the scenario's
/// value, else the knob's default, unless a knob of the run is that key. A wire condition may
/// hold. A knob that no reader may read is not: where it goes is the question, which the whole
/// first update answers.
pub(crate) fn read_only_in_jobs(m: &KnobManifest, trials: &[&Trial], config: &Value) -> bool {
    read_only_at(m, trials, config, |at| {
        at == "job" || at.starts_with("job.")
    })
}

/// Whether an active reader of the trial's knob is past initialization: neither a JobConfig
/// nor a server start-up flag, so a run cut after `/initialize` cannot show it.
pub(crate) fn read_past_initialization(m: &KnobManifest, trial: &Trial, config: &Value) -> bool {
    let at_start =
        |at: &str| at == "job" || at.starts_with("job.") || at == "srv" || at.starts_with("srv.");
    !m.knobs[trial.knob].consumers.is_empty() && !read_only_at(m, &[trial], config, at_start)
}

/// Whether every active reader (its `when` may hold under the trials' conditions and the
/// config) of each trial's knob is at a location `ok` accepts, and there is one.
fn read_only_at(
    m: &KnobManifest,
    trials: &[&Trial],
    config: &Value,
    ok: impl Fn(&str) -> bool,
) -> bool {
    let mut cond = Condition::new();
    for t in trials {
        cond.extend(t.condition.clone());
    }
    let perturbed = |key: &str| trials.iter().any(|t| m.knobs[t.knob].path == key);
    let may_hold = |key: &str, want: &Value| {
        if is_wire_location(key) || perturbed(key) {
            return true;
        }
        let known = cond
            .get(key)
            .cloned()
            .or_else(|| lookup(config, key).cloned())
            .or_else(|| {
                m.knobs
                    .iter()
                    .find(|k| k.path == key)
                    .map(|k| k.default.clone())
            });
        known.is_none_or(|v| json_equal(&v, want))
    };
    trials.iter().all(|t| {
        let mut readers = m.knobs[t.knob]
            .consumers
            .iter()
            .filter(|c| c.when.iter().all(|(k, v)| may_hold(k, v)))
            .peekable();
        readers.peek().is_some() && readers.all(|c| ok(&c.at))
    })
}

/// A cell whose run shows nothing to compare (it failed, or its wire cannot be seen).
/// The cell of a knob the scenario skips: not observable here, with the scenario's reason.
pub(crate) fn skipped_cell(why: &str) -> Cell {
    Cell {
        value: Value::Null,
        condition: Condition::new(),
        verdict: CellVerdict::NotObservable,
        changes: Vec::new(),
        active: Vec::new(),
        consumed_at: Vec::new(),
        problems: Vec::new(),
        unobservable: Some(format!("the scenario skips it: {why}")),
    }
}

/// A trial the run cannot observe, with the reason (not a flag: nothing was tried).
pub(crate) fn not_observable(trial: &Trial, why: String) -> Cell {
    unjudged(trial, CellVerdict::NotObservable, Vec::new(), Some(why))
}

fn unjudged(
    trial: &Trial,
    verdict: CellVerdict,
    problems: Vec<Problem>,
    unobservable: Option<String>,
) -> Cell {
    Cell {
        value: trial.value.clone(),
        condition: trial.condition.clone(),
        verdict,
        changes: Vec::new(),
        active: Vec::new(),
        consumed_at: Vec::new(),
        problems,
        unobservable,
    }
}

/// What is wrong with one judged trial: every active reader that saw no change (a start-up
/// flag only where the run recorded the flags), effects nobody named, a value of the wrong type
/// where the server reads it, a consumer that reads another value.
fn cell_problems(
    knob: &super::manifest::Knob,
    trial: &Trial,
    verdict: CellVerdict,
    active: &[&super::manifest::Consumer],
    consumed: &[&super::manifest::Consumer],
    unexpected: &[&Change],
    wire: &WireSnapshot,
) -> Vec<Problem> {
    let cond = condition_label(&trial.condition);
    let tried = format!("{}={} ({cond})", knob.path, trial.value);
    let mut problems = Vec::new();
    let srv_seen = wire.locations.keys().any(|l| l.starts_with("srv."));
    let unchanged = active
        .iter()
        .filter(|c| !consumed.iter().any(|d| d.at == c.at))
        .filter(|c| srv_seen || !c.at.starts_with("srv."));
    for c in unchanged {
        problems.push(Problem::new(
            ProblemKind::UnchangedConsumer,
            Some(&c.at),
            format!(
                "{tried}: the server reads {} here{}, but it did not change ({})",
                c.at,
                when_label(c),
                verdict.label()
            ),
        ));
    }
    for u in unexpected {
        problems.push(Problem::new(
            ProblemKind::UnexpectedEffect,
            Some(&u.location),
            format!("{tried}: unexpected effect {}", u.describe()),
        ));
    }
    for c in active {
        if let (Some(t), Some(values)) = (c.value_type, wire.locations.get(&c.at)) {
            for v in values.iter().filter(|v| !t.matches(v)) {
                problems.push(Problem::new(
                    ProblemKind::TypeMismatch,
                    Some(&c.at),
                    format!(
                        "type mismatch at {}: the server declares {}, the wire holds {} {v} ({}={}, {cond})",
                        c.at,
                        t.name(),
                        type_name(v),
                        knob.path,
                        trial.value
                    ),
                ));
            }
        }
    }
    for c in consumed.iter().filter(|c| !c.derived) {
        if let Some(values) = wire.locations.get(&c.at) {
            if !values.iter().any(|v| json_equal(v, &trial.value)) {
                problems.push(Problem::new(
                    ProblemKind::WrongValue,
                    Some(&c.at),
                    format!(
                        "{tried}: the server reads {} at {}, not the value tried",
                        show(Some(values)),
                        c.at
                    ),
                ));
            }
        }
    }
    problems
}

/// ` (when a=1, b=2)` for a conditional consumer, else nothing.
fn when_label(c: &super::manifest::Consumer) -> String {
    if c.when.is_empty() {
        return String::new();
    }
    let w: Vec<String> = c.when.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(" (when {})", w.join(", "))
}

/// Judge one trial against its baseline.
pub(crate) fn judge_cell(
    m: &KnobManifest,
    trial: &Trial,
    baseline: &WireSnapshot,
    observed: Observed<'_>,
) -> Cell {
    let knob = &m.knobs[trial.knob];
    let (wire, config) = match observed {
        Observed::Ran { wire, config } => (wire, config),
        Observed::NotObservable(why) => {
            return unjudged(trial, CellVerdict::NotObservable, Vec::new(), Some(why))
        }
        Observed::Failed(reason) => {
            let why = format!(
                "the run with {}={} ({}) failed: {reason}",
                knob.path,
                trial.value,
                condition_label(&trial.condition)
            );
            let p = Problem::new(ProblemKind::RunFailed, None, why);
            return unjudged(trial, CellVerdict::RunFailed, vec![p], None);
        }
    };
    let changes = diff(baseline, wire, &m.volatile);
    let active: Vec<&super::manifest::Consumer> = knob
        .consumers
        .iter()
        .filter(|c| {
            c.when
                .iter()
                .all(|(k, v)| condition_holds(m, k, v, wire, config))
        })
        .collect();
    let changed = |pattern: &str| {
        changes
            .iter()
            .any(|ch| pattern_matches(pattern, &ch.location))
    };
    let consumed: Vec<&super::manifest::Consumer> =
        active.iter().copied().filter(|c| changed(&c.at)).collect();
    let named = |loc: &str| {
        knob.sent_locations()
            .chain(&knob.effects)
            .chain(knob.consumers.iter().map(|c| &c.at))
            .any(|p| pattern_matches(p, loc))
    };
    let unexpected: Vec<&Change> = changes.iter().filter(|c| !named(&c.location)).collect();
    // Server start-up flags are observed only when the run recorded how the server was started
    // (`server_flags.json`, written where the harness itself launched it with them); without
    // that record a knob read only there cannot be seen, which is not the same as "not sent".
    let srv_unseen = changes.is_empty()
        && !active.is_empty()
        && active.iter().all(|c| c.at.starts_with("srv."))
        && !wire.locations.keys().any(|l| l.starts_with("srv."));
    if srv_unseen {
        return Cell {
            value: trial.value.clone(),
            condition: trial.condition.clone(),
            verdict: CellVerdict::NotObservable,
            changes,
            active: active.iter().map(|c| c.at.clone()).collect(),
            consumed_at: Vec::new(),
            problems: Vec::new(),
            unobservable: Some(
                "the server reads it only as a start-up flag, and this run did not start the \
                 server with the trainer's flags (the harness started the backend)"
                    .into(),
            ),
        };
    }
    let verdict = if !consumed.is_empty() {
        CellVerdict::Consumed
    } else if changes.is_empty() {
        CellVerdict::NotSent
    } else if unexpected.is_empty() {
        CellVerdict::SentNotConsumed
    } else {
        CellVerdict::UnexpectedEffect
    };
    let problems = cell_problems(knob, trial, verdict, &active, &consumed, &unexpected, wire);
    Cell {
        value: trial.value.clone(),
        condition: trial.condition.clone(),
        verdict,
        active: active.iter().map(|c| c.at.clone()).collect(),
        consumed_at: consumed.iter().map(|c| c.at.clone()).collect(),
        changes,
        problems,
        unobservable: None,
    }
}

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
fn gap_accepts(g: &super::manifest::KnownGap, verdict: &str, p: &Problem) -> bool {
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
/// entries. Entries for unlisted keys are matched by [`apply_unlisted_gaps`].
pub(crate) fn apply_known_gaps(m: &KnobManifest, knobs: &mut [KnobResult]) -> Vec<String> {
    let mut closed = Vec::new();
    for k in knobs.iter_mut() {
        let gaps: Vec<&super::manifest::KnownGap> = m
            .known_gaps
            .iter()
            .filter(|g| g.knob == k.path && g.problem != ProblemKind::Unlisted)
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

/// Why a known gap entry no longer holds, in words.
fn closed_gap(g: &super::manifest::KnownGap, k: &KnobResult, name: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::manifest;
    use super::*;
    use serde_json::json;
    use std::path::Path;

    const MANIFEST: &str = r#"
backend: arctic
backend_yaml: backends/arctic.yaml
backend_prefix: remote_backend
volatile: [meta.batch_num_tokens]
knobs:
  - path: remote_backend.train.logits.compute_in_fp32
    default: false
    try: [true]
    sent_to: [meta.logits_compute_in_fp32, job.training.ds_worker_config.logits_compute_in_fp32]
    consumers:
      - at: job.training.ds_worker_config.logits_compute_in_fp32
        when: {remote_backend.train.zorro_train.enable: true}
        type: bool
      - at: meta.logits_compute_in_fp32
        when: {remote_backend.train.zorro_train.enable: false}
    server_default: false
    conditions: {remote_backend.train.zorro_train.enable: [true, false]}
  - path: remote_backend.train.logits.optimization_peak_mem_size_in_gib
    default: 4
    try: [8, 2.5]
    sent_to: [meta.logits_optimization_peak_mem_size_in_gib]
    consumers:
      - at: job.training.ds_worker_config.logits_optimization_peak_mem_size_in_gib
        type: int
    server_default: 4
  - path: actor_rollout_ref.actor.clip_ratio
    default: 0.2
    try: [0.3]
    sent_to: [meta.actor_config.clip_ratio]
    note: parsed, but the loss uses a fixed 0.2
  - path: actor_rollout_ref.rollout.max_num_batched_tokens
    default: 8192
    try: [4096]
    note: the adapter does not forward it
  - path: remote_backend.train.determinism.seed
    default: 42
    try: [7]
    sent_to: [job.*.seed]
    consumers:
      - at: job.training.seed
        when: {job.training.full_determinism: true}
        type: int
    conditions: {remote_backend.train.determinism.full: [true, false]}
  - path: remote_backend.train.load_balancer
    default: true
    try: [false]
    sent_to: [meta.load_balancer]
    consumers: [{at: meta.load_balancer, type: bool}]
    server_default: false
  - path: remote_backend.rollout.speculative_decoding.model
    default: ""
    try: [draft]
    allowed_noop: reserved for a later server
  - path: actor_rollout_ref.rollout.temperature
    default: 1.0
    try: [0.7]
    sent_to: [meta.temperature]
    consumers:
      - at: generate.sampling_params.temperature
        type: number
      - at: job.training.ds_worker_config.temperature
        when: {remote_backend.train.zorro_train.enable: true}
        type: number
"#;

    fn manifest() -> KnobManifest {
        let m = manifest::parse(MANIFEST, Path::new("t.yaml")).unwrap();
        assert!(
            manifest::validate(&m).is_empty(),
            "{:?}",
            manifest::validate(&m)
        );
        m
    }

    fn snap(pairs: &[(&str, Value)]) -> WireSnapshot {
        let mut w = WireSnapshot::default();
        for (k, v) in pairs {
            w.locations.insert(k.to_string(), vec![v.clone()]);
        }
        w
    }

    fn trial(knob: usize, value: Value, cond: &[(&str, Value)]) -> Trial {
        Trial {
            knob,
            value,
            condition: cond
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    fn cfg(zorro: bool) -> Value {
        json!({"remote_backend": {"train": {"zorro_train": {"enable": zorro}}}})
    }

    /// [`judge_cell`] of `trial` against `base` on a run that sent `wire`, with ZoRRo training
    /// `zorro`.
    fn judge_ran(
        m: &KnobManifest,
        trial: &Trial,
        base: &WireSnapshot,
        wire: &WireSnapshot,
        zorro: bool,
    ) -> Cell {
        judge_cell(
            m,
            trial,
            base,
            Observed::Ran {
                wire,
                config: &cfg(zorro),
            },
        )
    }

    #[test]
    fn a_run_stops_at_initialization_only_when_every_possible_reader_is_in_a_jobconfig() {
        let m = manifest();
        let config = json!({"remote_backend": {"train": {"zorro_train": {"enable": true}}}});
        let only = |ts: &[Trial]| read_only_in_jobs(&m, &ts.iter().collect::<Vec<_>>(), &config);
        let zorro = |on: bool| [("remote_backend.train.zorro_train.enable", json!(on))];
        // ZoRRo on: the logits knob is read in ds_worker_config only.
        assert!(only(&[trial(0, json!(true), &zorro(true))]));
        // ZoRRo off: in the update's meta.
        assert!(!only(&[trial(0, json!(true), &zorro(false))]));
        // No condition: the scenario's value (on) decides.
        assert!(only(&[trial(0, json!(true), &[])]));
        // A reader without a condition in the JobConfig.
        assert!(only(&[trial(1, json!(8), &[])]));
        // One knob of the run with a reader outside a JobConfig sends the whole run further.
        assert!(!only(&[
            trial(0, json!(true), &zorro(true)),
            trial(5, json!(false), &[])
        ]));
        // No reader at all: where it goes is the question.
        assert!(!only(&[trial(2, json!(0.3), &[])]));
        // A wire condition may hold: the seed's reader counts.
        assert!(only(&[trial(4, json!(7), &[])]));
        // The run's own knob is the condition's key: it may hold whatever the config says.
        let cfg_off = json!({"remote_backend": {"train": {"zorro_train": {"enable": false}}}});
        let mut m2 = m.clone();
        m2.knobs[0].consumers[0].when = [(
            "remote_backend.train.logits.optimization_peak_mem_size_in_gib".to_string(),
            json!(8),
        )]
        .into();
        m2.knobs[0].consumers.truncate(1);
        let t = [trial(0, json!(true), &[]), trial(1, json!(8), &[])];
        assert!(read_only_in_jobs(
            &m2,
            &t.iter().collect::<Vec<_>>(),
            &cfg_off
        ));
        // Without it, the knob's default (4) rules the reader out: no reader left.
        assert!(!read_only_in_jobs(&m2, &[&t[0]], &cfg_off));
    }

    #[test]
    fn plans_conditions_and_skips_values_equal_to_the_scenario() {
        let m = manifest();
        let config = json!({"remote_backend": {"train": {"load_balancer": false}}});
        let plan = plan_matrix(&m, &config);
        let fp32: Vec<_> = plan.trials.iter().filter(|t| t.knob == 0).collect();
        assert_eq!(fp32.len(), 2);
        assert_eq!(
            fp32[1].overrides(&m),
            vec![
                "++config.remote_backend.train.logits.compute_in_fp32=true".to_string(),
                "++config.remote_backend.train.zorro_train.enable=false".to_string()
            ]
        );
        assert_eq!(
            fp32[0].condition["remote_backend.train.zorro_train.enable"],
            json!(true)
        );
        assert_eq!(
            fp32[1].baseline_overrides(),
            vec!["++config.remote_backend.train.zorro_train.enable=false".to_string()]
        );
        assert_eq!(plan.trials.iter().filter(|t| t.knob == 1).count(), 2);
        assert_eq!(plan.not_exercised.len(), 1);
        assert_eq!(plan.not_exercised[0].0, 5);
    }

    #[test]
    fn consumed_under_a_condition_only_is_not_flagged() {
        let m = manifest();
        let base_on = snap(&[
            (
                "job.training.ds_worker_config.logits_compute_in_fp32",
                json!(false),
            ),
            ("meta.logits_compute_in_fp32", json!(false)),
        ]);
        let pert_on = snap(&[
            (
                "job.training.ds_worker_config.logits_compute_in_fp32",
                json!(true),
            ),
            ("meta.logits_compute_in_fp32", json!(true)),
        ]);
        let base_off = snap(&[("meta.logits_compute_in_fp32", json!(false))]);
        let pert_off = snap(&[("meta.logits_compute_in_fp32", json!(true))]);
        let key = "remote_backend.train.zorro_train.enable";
        let c_on = judge_ran(
            &m,
            &trial(0, json!(true), &[(key, json!(true))]),
            &base_on,
            &pert_on,
            true,
        );
        let c_off = judge_ran(
            &m,
            &trial(0, json!(true), &[(key, json!(false))]),
            &base_off,
            &pert_off,
            false,
        );
        assert_eq!(c_on.verdict, CellVerdict::Consumed);
        assert_eq!(
            c_on.consumed_at,
            vec!["job.training.ds_worker_config.logits_compute_in_fp32"]
        );
        assert_eq!(c_off.verdict, CellVerdict::Consumed);
        let r = judge_knob(&m.knobs[0], vec![c_on, c_off], None);
        assert_eq!(r.verdict, KnobVerdict::Consumed);
        assert!(!r.flagged, "{:?}", r.problems);
    }

    #[test]
    fn a_condition_not_observable_at_this_reach_does_not_narrow_consumed() {
        // `--until initialize`: under zorro the JobConfig shows the knob; without zorro only a
        // later call's meta could, which the cut run never reaches.
        let m = manifest();
        let key = "remote_backend.train.zorro_train.enable";
        let at = "job.training.ds_worker_config.logits_compute_in_fp32";
        let on = judge_ran(
            &m,
            &trial(0, json!(true), &[(key, json!(true))]),
            &snap(&[(at, json!(false))]),
            &snap(&[(at, json!(true))]),
            true,
        );
        let off = not_observable(
            &trial(0, json!(true), &[(key, json!(false))]),
            "past initialization".into(),
        );
        let r = judge_knob(&m.knobs[0], vec![on.clone(), off.clone()], None);
        assert_eq!(r.verdict, KnobVerdict::Consumed);
        assert!(r.consumed_when.is_empty());
        // Observed and not consumed under the other condition, it is narrowed as before.
        let sent_not_read = judge_ran(
            &m,
            &trial(0, json!(true), &[(key, json!(false))]),
            &snap(&[("meta.logits_compute_in_fp32", json!(false))]),
            &snap(&[("meta.logits_compute_in_fp32", json!(false))]),
            false,
        );
        let r = judge_knob(&m.knobs[0], vec![on, off, sent_not_read], None);
        assert_eq!(r.verdict, KnobVerdict::ConsumedUnderCondition);
    }

    #[test]
    fn the_planted_bug_is_sent_but_not_consumed_under_zorro() {
        let m = manifest();
        let key = "remote_backend.train.zorro_train.enable";
        // The DWC copy is missing: only meta changes.
        let base = snap(&[("meta.logits_compute_in_fp32", json!(false))]);
        let pert = snap(&[("meta.logits_compute_in_fp32", json!(true))]);
        let on = judge_ran(
            &m,
            &trial(0, json!(true), &[(key, json!(true))]),
            &base,
            &pert,
            true,
        );
        assert_eq!(on.verdict, CellVerdict::SentNotConsumed);
        assert!(
            on.problems[0].text.contains("did not change"),
            "{:?}",
            on.problems
        );
        let off = judge_ran(
            &m,
            &trial(0, json!(true), &[(key, json!(false))]),
            &base,
            &pert,
            false,
        );
        assert_eq!(off.verdict, CellVerdict::Consumed);
        let r = judge_knob(&m.knobs[0], vec![on, off], None);
        assert_eq!(r.verdict, KnobVerdict::ConsumedUnderCondition);
        assert_eq!(
            r.verdict_text(),
            format!("consumed under a condition only ({key}=false)")
        );
        assert!(r.flagged);
    }

    #[test]
    fn type_and_value_mismatches_are_flagged() {
        let m = manifest();
        let at = "job.training.ds_worker_config.logits_optimization_peak_mem_size_in_gib";
        let base = snap(&[(at, json!(4))]);
        let ok = judge_ran(
            &m,
            &trial(1, json!(8), &[]),
            &base,
            &snap(&[(at, json!(8))]),
            true,
        );
        assert!(ok.problems.is_empty(), "{:?}", ok.problems);
        let float = judge_ran(
            &m,
            &trial(1, json!(2.5), &[]),
            &base,
            &snap(&[(at, json!(2.5))]),
            true,
        );
        assert_eq!(float.verdict, CellVerdict::Consumed);
        assert!(
            float
                .problems
                .iter()
                .any(|p| p.text.contains("type mismatch")
                    && p.text.contains("declares int")
                    && p.text.contains("float 2.5")),
            "{:?}",
            float.problems
        );
        let wrong = judge_ran(
            &m,
            &trial(1, json!(8), &[]),
            &base,
            &snap(&[(at, json!(9))]),
            true,
        );
        assert!(
            wrong
                .problems
                .iter()
                .any(|p| p.text.contains("not the value tried")),
            "{:?}",
            wrong.problems
        );
        let r = judge_knob(&m.knobs[1], vec![ok, float], None);
        assert_eq!(r.verdict, KnobVerdict::Consumed);
        assert!(r.flagged);
    }

    #[test]
    fn sent_but_not_consumed_not_sent_and_unexpected() {
        let m = manifest();
        let base = snap(&[
            ("meta.actor_config.clip_ratio", json!(0.2)),
            ("meta.batch_num_tokens", json!(10)),
        ]);
        let pert = snap(&[
            ("meta.actor_config.clip_ratio", json!(0.3)),
            ("meta.batch_num_tokens", json!(11)),
        ]);
        let c = judge_ran(&m, &trial(2, json!(0.3), &[]), &base, &pert, true);
        assert_eq!(c.verdict, CellVerdict::SentNotConsumed);
        assert_eq!(c.changes.len(), 1, "volatile batch_num_tokens is ignored");
        let r = judge_knob(&m.knobs[2], vec![c], None);
        assert_eq!(r.verdict, KnobVerdict::SentNotConsumed);
        assert!(
            r.flagged && r.problems[0].contains("fixed 0.2"),
            "{:?}",
            r.problems
        );

        let c = judge_ran(&m, &trial(3, json!(4096), &[]), &base, &base, true);
        assert_eq!(c.verdict, CellVerdict::NotSent);
        let r = judge_knob(&m.knobs[3], vec![c], None);
        assert_eq!((r.verdict, r.flagged), (KnobVerdict::NotSent, true));

        let odd = snap(&[
            ("meta.actor_config.clip_ratio", json!(0.2)),
            ("route./step", json!(2)),
        ]);
        let c = judge_ran(&m, &trial(3, json!(4096), &[]), &base, &odd, true);
        assert_eq!(c.verdict, CellVerdict::UnexpectedEffect);
        assert!(
            c.problems
                .iter()
                .any(|p| p.text.contains("route./step: absent -> 2")),
            "{:?}",
            c.problems
        );
    }

    #[test]
    fn a_wire_condition_gates_the_seed() {
        let m = manifest();
        let key = "remote_backend.train.determinism.full";
        let base_on = snap(&[
            ("job.training.seed", json!(42)),
            ("job.training.full_determinism", json!(true)),
        ]);
        let pert_on = snap(&[
            ("job.training.seed", json!(7)),
            ("job.training.full_determinism", json!(true)),
        ]);
        let base_off = snap(&[
            ("job.training.seed", json!(42)),
            ("job.sampling.seed", json!(42)),
            ("job.training.full_determinism", json!(false)),
        ]);
        let pert_off = snap(&[
            ("job.training.seed", json!(7)),
            ("job.sampling.seed", json!(7)),
            ("job.training.full_determinism", json!(false)),
        ]);
        let on = judge_ran(
            &m,
            &trial(4, json!(7), &[(key, json!(true))]),
            &base_on,
            &pert_on,
            true,
        );
        let off = judge_ran(
            &m,
            &trial(4, json!(7), &[(key, json!(false))]),
            &base_off,
            &pert_off,
            true,
        );
        assert_eq!(on.verdict, CellVerdict::Consumed);
        assert_eq!(off.verdict, CellVerdict::SentNotConsumed);
        assert!(off.problems.is_empty(), "{:?}", off.problems);
        let r = judge_knob(&m.knobs[4], vec![on, off], None);
        assert_eq!(r.verdict, KnobVerdict::ConsumedUnderCondition);
        assert!(!r.flagged, "{:?}", r.problems);
        assert_eq!(r.consumed_when.len(), 1);
    }

    #[test]
    fn default_mismatch_allowed_noop_failures_and_not_exercised() {
        let m = manifest();
        let base = snap(&[("meta.load_balancer", json!(true))]);
        let pert = snap(&[("meta.load_balancer", json!(false))]);
        let c = judge_ran(&m, &trial(5, json!(false), &[]), &base, &pert, true);
        let r = judge_knob(&m.knobs[5], vec![c], None);
        assert_eq!(r.verdict, KnobVerdict::Consumed);
        // The defaults are two hand-written manifest fields: shown as a claim, never a flag.
        assert!(!r.flagged, "{:?}", r.problems);
        assert!(
            r.claims.len() == 1 && r.claims[0].starts_with("manifest only, not observed"),
            "{:?}",
            r.claims
        );

        let c = judge_ran(&m, &trial(6, json!("draft"), &[]), &base, &base, true);
        let r = judge_knob(&m.knobs[6], vec![c], None);
        assert_eq!(r.verdict_text(), "not sent (allowed no-op)");
        assert!(!r.flagged, "{:?}", r.problems);

        let c = judge_cell(
            &m,
            &trial(2, json!(0.3), &[]),
            &base,
            Observed::Failed("step 1: /step 500".into()),
        );
        let r = judge_knob(&m.knobs[2], vec![c], None);
        assert_eq!(r.verdict, KnobVerdict::RunFailed);
        assert!(r.flagged && r.problems.iter().any(|p| p.contains("/step 500")));

        let r = judge_knob(
            &m.knobs[6],
            vec![],
            Some("every `try` value equals the scenario's value"),
        );
        assert_eq!((r.verdict, r.flagged), (KnobVerdict::NotExercised, true));
    }

    #[test]
    fn a_reader_seen_only_as_a_start_up_flag_is_not_observable_without_the_flags() {
        let m = manifest::parse(
            "backend: arctic\nbackend_yaml: b.yaml\nbackend_prefix: remote_backend\nknobs:\n  - {path: remote_backend.sampling_gpus, default: 1, try: [2], consumers: [{at: srv.sampling_gpus}]}\n",
            Path::new("k.yaml"),
        )
        .unwrap();
        let t = Trial {
            knob: 0,
            value: json!(2),
            condition: Condition::new(),
        };
        // Runs with no configuration recorded.
        let ran = |base: &WireSnapshot, wire: &WireSnapshot| {
            judge_cell(
                &m,
                &t,
                base,
                Observed::Ran {
                    wire,
                    config: &json!({}),
                },
            )
        };
        let empty = snap(&[("meta.x", json!(1))]);
        let c = ran(&empty, &empty);
        assert_eq!(c.verdict, CellVerdict::NotObservable);
        assert!(c.unobservable.as_deref().unwrap().contains("start-up flag"));
        let r = judge_knob(&m.knobs[0], vec![c], None);
        assert_eq!((r.verdict, r.flagged), (KnobVerdict::NotObservable, false));

        // With the flags recorded (the harness started the server with them), it is judged.
        let base = snap(&[("srv.sampling_gpus", json!(1))]);
        let pert = snap(&[("srv.sampling_gpus", json!(2))]);
        let c = ran(&base, &pert);
        assert_eq!(c.verdict, CellVerdict::Consumed);
        let c = judge_cell(&m, &t, &base, Observed::NotObservable("over Ray".into()));
        assert_eq!(c.verdict, CellVerdict::NotObservable);
    }

    #[test]
    fn known_gaps_pass_their_flags_and_fail_when_they_close_or_change() {
        let mut m = manifest();
        let base = snap(&[("meta.load_balancer", json!(true))]);
        let judge = |m: &KnobManifest, knob: usize, value: Value, wire: &WireSnapshot| {
            let c = judge_ran(m, &trial(knob, value, &[]), &base, wire, true);
            judge_knob(&m.knobs[knob], vec![c], None)
        };
        let path = m.knobs[2].path.clone();
        m.known_gaps = vec![manifest::KnownGap {
            knob: path.clone(),
            verdict: "not_sent".into(),
            problem: ProblemKind::NotConsumed,
            at: None,
            reason: "known".into(),
            link: Some("#1".into()),
        }];
        // Still not sent: a known gap, not a new flag.
        let mut knobs = vec![judge(&m, 2, json!(0.3), &base)];
        assert!(knobs[0].flagged);
        let closed = apply_known_gaps(&m, &mut knobs);
        assert!(closed.is_empty(), "{closed:?}");
        assert_eq!(knobs[0].known_gap.as_deref(), Some("known (#1)"));
        // Flagged with another verdict: the entry no longer holds.
        m.known_gaps[0].verdict = "sent_not_consumed".into();
        let mut knobs = vec![judge(&m, 2, json!(0.3), &base)];
        let closed = apply_known_gaps(&m, &mut knobs);
        assert!(knobs[0].known_gap.is_none());
        assert!(closed[0].contains("no longer holds"), "{closed:?}");
        // Not flagged any more: closed, remove it.
        let path5 = m.knobs[5].path.clone();
        m.known_gaps[0].knob = path5;
        let pert = snap(&[("meta.load_balancer", json!(false))]);
        let mut knobs = vec![judge(&m, 5, json!(false), &pert)];
        assert!(!knobs[0].flagged);
        let closed = apply_known_gaps(&m, &mut knobs);
        assert!(
            closed[0].contains("remove it from known_gaps"),
            "{closed:?}"
        );
        // A gap naming no knob, or an unknown verdict, is a manifest error.
        m.known_gaps[0].knob = "no.such.knob".into();
        m.known_gaps[0].verdict = "broken".into();
        let problems = manifest::validate(&m);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("no knob of this manifest"))
                && problems
                    .iter()
                    .any(|p| p.contains("`broken` is not one of")),
            "{problems:?}"
        );
    }

    /// Two active readers, one of which changed: the one that did not is a flag (the seed's
    /// bug shape: a dropped ds_worker_config key while the sampling params still change).
    #[test]
    fn an_active_reader_that_did_not_change_is_flagged_beside_one_that_did() {
        let m = manifest();
        let dwc = "job.training.ds_worker_config.temperature";
        let sp = "generate.sampling_params.temperature";
        let base = snap(&[(sp, json!(1.0)), (dwc, json!(1.0))]);
        let pert = snap(&[(sp, json!(0.7)), (dwc, json!(1.0))]);
        let c = judge_ran(&m, &trial(7, json!(0.7), &[]), &base, &pert, true);
        assert_eq!(c.verdict, CellVerdict::Consumed);
        assert_eq!(c.consumed_at, vec![sp]);
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert_eq!(c.problems[0].kind, ProblemKind::UnchangedConsumer);
        assert_eq!(c.problems[0].at.as_deref(), Some(dwc));
        assert!(
            c.problems[0].text.contains("did not change")
                && c.problems[0]
                    .text
                    .contains("when remote_backend.train.zorro_train.enable=true")
        );
        let r = judge_knob(&m.knobs[7], vec![c], None);
        assert_eq!(r.verdict, KnobVerdict::Consumed);
        assert!(r.flagged);
        // Without ZoRRo only the sampling params read it: not flagged.
        let c = judge_ran(&m, &trial(7, json!(0.7), &[]), &base, &pert, false);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        // Both changed: not flagged.
        let both = snap(&[(sp, json!(0.7)), (dwc, json!(0.7))]);
        let c = judge_ran(&m, &trial(7, json!(0.7), &[]), &base, &both, true);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
    }

    /// A known gap accepts its kind of problem (at its location), not every flag of its knob.
    #[test]
    fn a_known_gap_excuses_only_its_kind_of_problem() {
        let mut m = manifest();
        let dwc = "job.training.ds_worker_config.temperature";
        let sp = "generate.sampling_params.temperature";
        let base = snap(&[(sp, json!(1.0)), (dwc, json!(1.0))]);
        let pert = snap(&[(sp, json!(0.7)), (dwc, json!(1.0)), ("meta.odd", json!(1))]);
        let judge = |m: &KnobManifest| {
            let c = judge_ran(m, &trial(7, json!(0.7), &[]), &base, &pert, true);
            vec![judge_knob(&m.knobs[7], vec![c], None)]
        };
        let gap = |problem: ProblemKind, at: Option<&str>| manifest::KnownGap {
            knob: "actor_rollout_ref.rollout.temperature".into(),
            verdict: "consumed".into(),
            problem,
            at: at.map(str::to_string),
            reason: "known".into(),
            link: None,
        };
        // Only the unexpected effect is known: the unchanged reader is a new flag, and the
        // entry still holds (it accepted a problem).
        m.known_gaps = vec![gap(ProblemKind::UnexpectedEffect, Some("meta.odd"))];
        let mut knobs = judge(&m);
        assert!(apply_known_gaps(&m, &mut knobs).is_empty());
        assert!(knobs[0].flagged && knobs[0].known_gap.is_none());
        // Both known: a known gap.
        m.known_gaps
            .push(gap(ProblemKind::UnchangedConsumer, Some(dwc)));
        let mut knobs = judge(&m);
        assert!(apply_known_gaps(&m, &mut knobs).is_empty());
        assert!(knobs[0].known_gap.is_some());
        // The right kind at another location accepts nothing: a new flag, and that entry no
        // longer holds.
        m.known_gaps[1].at = Some("job.training.ds_worker_config.other".into());
        let mut knobs = judge(&m);
        let closed = apply_known_gaps(&m, &mut knobs);
        assert!(knobs[0].known_gap.is_none());
        assert!(
            closed.len() == 1
                && closed[0].contains("no longer holds")
                && closed[0].contains("unchanged_consumer"),
            "{closed:?}"
        );
        // `at` must be a wire location.
        m.known_gaps[1].at = Some("nowhere.x".into());
        assert!(manifest::validate(&m)
            .iter()
            .any(|p| p.contains("`at: nowhere.x`")));
    }
}
