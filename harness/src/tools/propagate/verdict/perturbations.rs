//! The matrix's plan: one trial per knob, `try` value and assignment of its conditions, and
//! the knobs that have no perturbation left.

use std::collections::BTreeMap;

use serde_json::Value;

use super::lookup;
use crate::tools::propagate::knob_manifest::KnobManifest;

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

/// The override that sets a knob in a run: a config key, or for an environment knob
/// (`env.<NAME>`) the variable in the command driver's `env`, as a string.
pub(crate) fn knob_override(path: &str, v: &Value) -> String {
    match path.strip_prefix(ENV_PREFIX) {
        Some(name) => {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("++driver.env.{name}={}", set_value(&Value::String(text)))
        }
        None => format!("++config.{path}={}", set_value(v)),
    }
}

pub(crate) use crate::tools::propagate::knob_manifest::ENV_PREFIX;

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
        o.push(knob_override(&m.knobs[self.knob].path, &self.value));
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

/// `--condition KEY=VALUE`: keep only the trials that assign each named condition knob the
/// value given (trials of knobs without that condition stay). A knob left with no trial is not
/// exercised, saying so. A KEY that is no condition of any knob tried is an input error naming
/// the conditions there are.
pub(crate) fn keep_conditions(
    plan: &mut MatrixPlan,
    m: &KnobManifest,
    only: &[(String, Value)],
) -> Result<(), ConditionError> {
    if only.is_empty() {
        return Ok(());
    }
    let known: std::collections::BTreeSet<&str> = m
        .knobs
        .iter()
        .flat_map(|k| k.conditions.keys().map(String::as_str))
        .collect();
    if let Some((k, _)) = only.iter().find(|(k, _)| !known.contains(k.as_str())) {
        return Err(ConditionError::Unknown {
            key: k.clone(),
            known: if known.is_empty() {
                "none".to_string()
            } else {
                known.into_iter().collect::<Vec<_>>().join(", ")
            },
        });
    }
    let before: std::collections::BTreeSet<usize> = plan.trials.iter().map(|t| t.knob).collect();
    plan.trials.retain(|t| {
        only.iter()
            .all(|(k, v)| t.condition.get(k).is_none_or(|c| c == v))
    });
    let label = only
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ");
    for knob in before {
        if !plan.trials.iter().any(|t| t.knob == knob) {
            plan.not_exercised
                .push((knob, format!("--condition {label} leaves it no trial")));
        }
    }
    Ok(())
}

/// `KEY=VALUE` of `--condition`, the value read as `--set` reads it (a YAML flow value).
pub(crate) fn parse_condition(s: &str) -> Result<(String, Value), ConditionError> {
    let o =
        crate::scenario::config::Override::parse(s).map_err(|source| ConditionError::Syntax {
            arg: s.to_string(),
            source,
        })?;
    Ok((o.segments.join("."), o.value.to_json()))
}

/// Why a `--condition` does not select trials.
#[derive(Debug, thiserror::Error)]
pub enum ConditionError {
    #[error("--condition {arg:?}: {source}")]
    Syntax {
        arg: String,
        source: crate::scenario::SpecError,
    },
    #[error("--condition {key}: no knob tried here has that condition; their conditions: {known}")]
    Unknown { key: String, known: String },
}
