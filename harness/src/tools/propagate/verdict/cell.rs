//! One trial judged against its baseline: what changed, which active consumers saw it, and
//! the problems the trial shows.

use serde::Serialize;
use serde_json::Value;

use super::lookup;
use super::perturbations::{condition_label, Condition, Trial, ENV_PREFIX};
use crate::tools::propagate::knob_manifest::{
    is_wire_location, json_equal, type_name, Consumer, Knob, KnobManifest, ProblemKind,
};
use crate::tools::propagate::observed::{diff, pattern_matches, show, Change, WireSnapshot};

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
    knob: &Knob,
    trial: &Trial,
    verdict: CellVerdict,
    active: &[&Consumer],
    consumed: &[&Consumer],
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
        let Some(values) = wire.locations.get(&c.at) else {
            continue;
        };
        if c.at.starts_with(ENV_PREFIX) {
            // Every process of the trainer must have been started with the value tried (a
            // variable's value is text).
            let want = Value::String(match &trial.value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            if !values.iter().all(|v| json_equal(v, &want)) {
                // `label=value` (or `label` alone, without it) of each kind of process.
                let by_process = wire
                    .locations
                    .get(&format!("{}.processes", c.at))
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let had = format!("={}", want.as_str().unwrap_or_default());
                let (ok, other): (Vec<&Value>, Vec<&Value>) = by_process
                    .iter()
                    .partition(|p| p.as_str().is_some_and(|p| p.ends_with(&had)));
                let other: Vec<String> = other
                    .iter()
                    .map(|p| p.as_str().unwrap_or_default().to_string())
                    .map(|p| {
                        if p.contains('=') {
                            p
                        } else {
                            format!("{p} (unset)")
                        }
                    })
                    .collect();
                problems.push(Problem::new(
                    ProblemKind::WrongValue,
                    Some(&c.at),
                    format!(
                        "{tried}: not every process of the trainer was started with the value \
                         tried: {} (it reached {} other kinds of process)",
                        other.join(", "),
                        ok.len()
                    ),
                ));
            }
        } else if !values.iter().any(|v| json_equal(v, &trial.value)) {
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
    problems
}

/// ` (when a=1, b=2)` for a conditional consumer, else nothing.
fn when_label(c: &Consumer) -> String {
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
    let mut changes = diff(baseline, wire, &m.volatile);
    // Which processes a run had started when it stopped, and what each was called when it was
    // read, depend on timing: a watched variable is evidence for its own knob only.
    changes.retain(|c| {
        !c.location.starts_with(ENV_PREFIX) || pattern_matches(&knob.path, &c.location)
    });
    let active: Vec<&Consumer> = knob
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
    let consumed: Vec<&Consumer> = active.iter().copied().filter(|c| changed(&c.at)).collect();
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
