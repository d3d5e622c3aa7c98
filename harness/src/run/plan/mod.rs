//! The RunPlan: an immutable, fully resolved scenario with the provenance of every value, two
//! hashes, and everything the run's stages need computed once from the config: what the
//! builtin driver sends (its translation, `translate`, which reads the knob table) and the
//! options of a server the harness starts (`server`). A config value neither can use is the
//! scenario's error at its key's line (`PlanError`): `check`, `list` and `run` all get it from
//! here, the one translation. `scenario_hash` changes when any source file changes (so a
//! golden can tell it was recorded against other inputs); `plan_hash` changes only when a
//! resolved value does (moving a knob between files, or setting it to its default, keeps it).

pub mod launch;
mod server;
pub(crate) mod translate;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::model::util::hex;
use crate::run::backend::BackendSpec;
use crate::run::driver::builtin::Translation;
use crate::run::driver::DriverSpec;
use crate::run::knobs::arctic;
use crate::scenario::{Origin, Scenario, SpecError, SpecErrors, Timeouts};
use translate::{translate, TranslateError};

pub(crate) use server::ServerPlan;

#[derive(Debug, Clone)]
pub struct RunPlan {
    pub scenario: Scenario,
    /// sha256 over the bytes of the scenario file, the defaults file and every included file.
    pub scenario_hash: String,
    /// sha256 of the canonical (key-sorted) resolved plan JSON, without origins.
    pub plan_hash: String,
    /// Origins of the values outside `config` (`seed`, `steps`, `backend.url`, ...). `--seed`
    /// and `--steps` show as `--set seed=N` / `--set steps=N`.
    pub origins: BTreeMap<String, Origin>,
    /// What the builtin driver sends; `None` for a command trainer, which reads the config
    /// itself (its launch is made at the start of the run: `launch`).
    pub(crate) translation: Option<Translation>,
    /// How the harness starts a server of its own (mock, torch child); `None` for any other
    /// backend.
    pub(crate) server: Option<ServerPlan>,
}

/// A config value the run cannot use (a wrong type, a model missing): the scenario's error at
/// the key's line (`file:line:col: config.KEY: why`), as `check` shows it and `run` refuses it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub SpecError);

impl PlanError {
    /// `e` at the line of the config key it names (the scenario's first key when the resolved
    /// config does not hold it).
    fn at_key(s: &Scenario, e: TranslateError) -> Self {
        let pos = s.config.node(&e.key).map_or(&s.pos, |n| &n.pos);
        PlanError(SpecError::at(pos, format!("config.{}", e.key), e.message))
    }
}

impl From<PlanError> for SpecErrors {
    fn from(e: PlanError) -> Self {
        e.0.into()
    }
}

/// Whether `s` can be planned (its translation, the options of a server the harness starts):
/// the errors `run` gives when it plans, for a command that reads a scenario without running it
/// (`check`, `list`, ...).
pub fn check(s: &Scenario) -> Result<(), SpecErrors> {
    RunPlan::new(s.clone(), None, None)?;
    Ok(())
}

/// The scenario file `path` loaded (`--set` `overrides` applied) and checked as the plan will
/// take it (`check`): the loader's errors, else the plan's. A run loads and plans instead, so
/// it translates the config once.
pub(crate) fn load_checked(path: &Path, overrides: &[String]) -> Result<Scenario, SpecErrors> {
    let s = crate::scenario::load_scenario(path, overrides)?;
    check(&s)?;
    Ok(s)
}

/// JSON with every object's keys sorted, so the hash does not depend on file order.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_else(|e| json!({ "unserializable": e.to_string() }))
}

/// What the stages need from the resolved config: the builtin driver's translation and the
/// options of a server the harness starts.
fn stages(s: &Scenario) -> Result<(Option<Translation>, Option<ServerPlan>), TranslateError> {
    let config = s.config.to_json();
    let translation = match &s.driver {
        DriverSpec::Builtin(_) => Some(translate(&config, s.steps)?),
        DriverSpec::Command(_) => None,
    };
    let server = match &s.backend {
        BackendSpec::Mock(_) | BackendSpec::Torch(_) => {
            let table = arctic().map_err(|e| TranslateError {
                key: String::new(),
                message: e.to_string(),
            })?;
            Some(server::server_plan(table, &config)?)
        }
        _ => None,
    };
    Ok((translation, server))
}

impl RunPlan {
    pub fn new(
        mut scenario: Scenario,
        seed_override: Option<u64>,
        steps_override: Option<u64>,
    ) -> Result<Self, PlanError> {
        let mut origins = scenario.origins.clone();
        if let Some(seed) = seed_override {
            scenario.seed = seed;
            origins.insert(
                "seed".into(),
                Origin::Set {
                    arg: format!("seed={seed}"),
                },
            );
        }
        if let Some(steps) = steps_override {
            scenario.steps = steps;
            origins.insert(
                "steps".into(),
                Origin::Set {
                    arg: format!("steps={steps}"),
                },
            );
        }
        let mut hasher = Sha256::new();
        for source in &scenario.sources {
            // Length-prefixed so two files cannot trade bytes and keep the hash.
            let bytes = std::fs::read(source)
                .ok()
                .or_else(|| crate::scenario::builtin_text(source).map(|t| t.as_bytes().to_vec()))
                .unwrap_or_default();
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(&bytes);
        }
        let scenario_hash = hex(&hasher.finalize());
        let (translation, server) =
            stages(&scenario).map_err(|e| PlanError::at_key(&scenario, e))?;
        let mut plan = RunPlan {
            scenario,
            scenario_hash,
            plan_hash: String::new(),
            origins,
            translation,
            server,
        };
        let canonical_json = canonical(&plan.values_json());
        let bytes = serde_json::to_vec(&canonical_json).unwrap_or_default();
        plan.plan_hash = hex(&Sha256::digest(&bytes));
        Ok(plan)
    }

    /// The resolved values only (what `plan_hash` covers).
    fn values_json(&self) -> Value {
        let s = &self.scenario;
        json!({
            "name": s.name,
            "description": s.description,
            "tags": s.tags,
            "requires": to_value(&s.requires),
            "seed": s.seed,
            "steps": s.steps,
            "driver": to_value(&s.driver),
            "backend": to_value(&s.backend),
            "metrics": to_value(&s.metrics),
            "checks": to_value(&s.checks),
            // Where a job waits for the cluster (`timeouts.queue`) is not what it computes.
            "timeouts": to_value(&Timeouts {
                queue: None,
                ..s.timeouts.clone()
            }),
            "expected_verdict": to_value(&s.expected_verdict),
            "config": s.config.to_json(),
        })
    }

    /// The whole plan for `run.json` and the propagation report: resolved values, then
    /// `origins` (top-level values) and `config` as `{"a.b.c": {"value", "origin", "default"}}`
    /// per leaf (`default` only where it differs from the value).
    pub fn to_json(&self) -> Value {
        let s = &self.scenario;
        let mut config = Map::new();
        for (path, r) in s.config.leaves() {
            let mut entry = Map::new();
            entry.insert("value".into(), r.value.clone());
            entry.insert("origin".into(), Value::String(r.origin.to_string()));
            if let Some(d) = s.config.default_of(&path) {
                if *d != r.value {
                    entry.insert("default".into(), d.clone());
                }
            }
            config.insert(path, Value::Object(entry));
        }
        let origins: Map<String, Value> = self
            .origins
            .iter()
            .map(|(k, o)| (k.clone(), Value::String(o.to_string())))
            .collect();
        let mut v = self.values_json();
        if let Value::Object(m) = &mut v {
            m.insert("path".into(), Value::String(s.path.display().to_string()));
            m.insert("config".into(), Value::Object(config));
            m.insert("origins".into(), Value::Object(origins));
            m.insert(
                "sources".into(),
                Value::Array(
                    s.sources
                        .iter()
                        .map(|p| Value::String(p.display().to_string()))
                        .collect(),
                ),
            );
            m.insert(
                "overrides".into(),
                Value::Array(s.overrides.iter().cloned().map(Value::String).collect()),
            );
            m.insert(
                "scenario_hash".into(),
                Value::String(self.scenario_hash.clone()),
            );
            m.insert("plan_hash".into(), Value::String(self.plan_hash.clone()));
        }
        v
    }

    /// Config leaves whose resolved value differs from the defaults (defaults file plus
    /// included files): `(path, default, resolved, origin)`. A leaf no default layer defines
    /// (added with `+key=`) has a `null` default.
    pub fn knobs_differing_from_defaults(&self) -> Vec<(String, Value, Value, Origin)> {
        self.scenario
            .config
            .leaves()
            .into_iter()
            .filter_map(|(path, r)| {
                let default = self
                    .scenario
                    .config
                    .default_of(&path)
                    .cloned()
                    .unwrap_or(Value::Null);
                (default != r.value).then(|| (path, default, r.value.clone(), r.origin.clone()))
            })
            .collect()
    }
}
