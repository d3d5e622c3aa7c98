//! The Arctic knob table, built into the binary from the knob manifest and read once.

use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

use super::Knob;

/// The Arctic knob manifest, as shipped (the same file `rlharness propagate` reads from a
/// scenarios root).
const ARCTIC_MANIFEST: &str = include_str!("../../../../scenarios/backends/arctic.knobs.yaml");

/// The backend whose manifest is built in, its text, and the name it goes by in messages.
pub(crate) const BUILTIN_BACKEND: &str = "arctic";
pub(crate) const BUILTIN_MANIFEST: &str = ARCTIC_MANIFEST;
pub(crate) const BUILTIN_MANIFEST_NAME: &str = "<built-in>/backends/arctic.knobs.yaml";

/// The rows of a knob manifest (its other fields are the propagation check's).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct KnobTable {
    pub(crate) knobs: Vec<Knob>,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("the built-in Arctic knob manifest: {0}")]
pub(crate) struct TableError(String);

static ARCTIC: LazyLock<Result<KnobTable, TableError>> = LazyLock::new(|| parse(ARCTIC_MANIFEST));

/// The Arctic knob table.
pub(crate) fn arctic() -> Result<&'static KnobTable, TableError> {
    ARCTIC.as_ref().map_err(Clone::clone)
}

fn parse(text: &str) -> Result<KnobTable, TableError> {
    let docs = YamlLoader::load_from_str(text).map_err(|e| TableError(e.to_string()))?;
    let doc = docs.first().ok_or_else(|| TableError("empty".into()))?;
    serde_json::from_value(to_json(doc)?).map_err(|e| TableError(e.to_string()))
}

/// A YAML document as JSON, numbers as the YAML writes them (`4` an integer, `4.0` a float).
fn to_json(y: &Yaml) -> Result<Value, TableError> {
    Ok(match y {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(s) => y
            .as_f64()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| TableError(format!("`{s}` is not a finite number")))?,
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect::<Result<_, _>>()?),
        Yaml::Hash(h) => {
            let mut m = Map::new();
            for (k, v) in h {
                let key = k
                    .as_str()
                    .ok_or_else(|| TableError(format!("a mapping key {k:?} is not a string")))?;
                m.insert(key.to_string(), to_json(v)?);
            }
            Value::Object(m)
        }
        Yaml::Alias(_) | Yaml::BadValue => {
            return Err(TableError(format!("unsupported YAML node {y:?}")))
        }
    })
}

impl KnobTable {
    pub(crate) fn knob(&self, path: &str) -> Option<&Knob> {
        self.knobs.iter().find(|k| k.path == path)
    }

    /// The value of the knob at `path` in `config`: the config's own when set (not `null`),
    /// else the row's default, its `${other.knob}` references resolved the same way. `None`
    /// when the config does not set it and the table has no row for it.
    pub(crate) fn value(&self, config: &Value, path: &str) -> Option<Value> {
        if let Some(v) = lookup(config, path).filter(|v| !v.is_null()) {
            return Some(v.clone());
        }
        let default = &self.knob(path)?.default;
        Some(match default.as_str() {
            Some(s) if s.contains("${") => self.interpolate(config, s, path),
            _ => default.clone(),
        })
    }

    /// A default that refers to other knobs: a whole `${path}` takes that knob's value (of any
    /// type); references inside a longer string are replaced by their text.
    fn interpolate(&self, config: &Value, s: &str, own: &str) -> Value {
        let resolve = |p: &str| (p != own).then(|| self.value(config, p)).flatten();
        if let Some(p) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
            if !p.contains('}') {
                return resolve(p).unwrap_or_else(|| Value::String(s.to_string()));
            }
        }
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("${") {
            let Some(j) = rest[i..].find('}') else { break };
            out.push_str(&rest[..i]);
            let p = &rest[i + 2..i + j];
            match resolve(p) {
                Some(Value::String(v)) => out.push_str(&v),
                Some(v) => out.push_str(&v.to_string()),
                None => out.push_str(&rest[i..=i + j]),
            }
            rest = &rest[i + j + 1..];
        }
        out.push_str(rest);
        Value::String(out)
    }
}

/// Read a dotted path from a JSON tree.
pub(crate) fn lookup<'a>(tree: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = tree;
    for part in path.split('.') {
        cur = cur.as_object()?.get(part)?;
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_built_in_table_parses_with_the_manifests_numbers() {
        let t = arctic().unwrap();
        let k = t.knob("remote_backend.train.logits.optimization").unwrap();
        assert_eq!(k.default, json!("none"));
        assert_eq!(k.to.len(), 2);
        let lr = t.knob("actor_rollout_ref.actor.optim.lr").unwrap();
        assert_eq!(lr.default, json!(1e-6));
        let peak = "remote_backend.train.logits.optimization_peak_mem_size_in_gib";
        assert_eq!(t.knob(peak).unwrap().default, json!(4));
    }

    #[test]
    fn defaults_fill_what_the_config_leaves_out_and_resolve_references() {
        let t = arctic().unwrap();
        let cfg = json!({"actor_rollout_ref": {"rollout": {"n": 6}},
            "trainer": {"project_name": "p", "experiment_name": null},
            "remote_backend": {"train": {"logits": {"optimization": null}}}});
        let v = |p: &str| t.value(&cfg, p);
        assert_eq!(
            v("remote_backend.train.logits.optimization"),
            Some(json!("none"))
        );
        assert_eq!(
            v("remote_backend.train.zorro_train.max_rollouts"),
            Some(json!(6))
        );
        assert_eq!(
            v("trainer.default_local_dir"),
            Some(json!("checkpoints/p/${trainer.experiment_name}"))
        );
        assert_eq!(v("no.such.knob"), None);
    }
}
