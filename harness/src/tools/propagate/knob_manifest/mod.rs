//! Knob manifests: for each knob of a backend block (and each trainer knob its adapter
//! translates), where the adapter writes it and where the server reads it, under which
//! condition. The manifest is the expectation the propagation matrix is judged against, so it
//! is data, validated as strictly as a scenario: unknown keys, a knob without a perturbation, a
//! consumer whose wire location has no known family, are all errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use crate::run::knobs::{Consumer, Knob};

/// A whole manifest file (`scenarios/backends/<backend>.knobs.yaml`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KnobManifest {
    /// The backend this manifest describes (`arctic`).
    pub(crate) backend: String,
    /// The backend YAML whose every leaf must have an entry (relative to the scenarios root).
    pub(crate) backend_yaml: String,
    /// Where the backend block sits in a scenario's `config` (`remote_backend`).
    pub(crate) backend_prefix: String,
    /// Wire locations that carry data rather than configuration (token counts, ...): a change
    /// there is never evidence for or against a knob.
    #[serde(default)]
    pub(crate) volatile: Vec<String>,
    pub(crate) knobs: Vec<Knob>,
    /// Flags already known and accepted for now: `propagate` exits 0 when every flagged knob
    /// is one of these with the same verdict, and 1 when one of them is no longer flagged (the
    /// gap closed: remove it here, so the list stays true).
    #[serde(default)]
    pub(crate) known_gaps: Vec<KnownGap>,
    /// Config keys that never reach the backend, each with the reason (verl's own bookkeeping:
    /// data files, logging, its validation pass). With `knobs`, they account for every leaf of a
    /// scenario's resolved config: `check` refuses a key in neither, and `propagate` lists it
    /// first, as unaccounted. A path may name a subtree.
    #[serde(default)]
    pub(crate) not_sent: Vec<NotSent>,
}

/// A config key declared not sent to the backend, and why.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotSent {
    pub(crate) path: String,
    pub(crate) reason: String,
}

/// One accepted flag: the knob, the verdict it is flagged with, the kind of problem (and
/// where), why, and where it is tracked. An entry excuses only the problems of its kind (at
/// its location, when `at` is given): a knob flagged for another problem is a new flag.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KnownGap {
    pub(crate) knob: String,
    /// The knob verdict's snake-case name (`sent_not_consumed`, `not_sent`,
    /// `unexpected_effect`, `consumed`, ...), as in `propagation.json`; `unlisted` for a key
    /// of the trainer's config that the manifest does not list.
    pub(crate) verdict: String,
    /// The kind of problem this entry accepts.
    pub(crate) problem: ProblemKind,
    /// The wire location (a pattern) of the problem; absent: any location of that kind.
    #[serde(default)]
    pub(crate) at: Option<String>,
    pub(crate) reason: String,
    /// An issue, a line of the reference, a pull request.
    #[serde(default)]
    pub(crate) link: Option<String>,
}

/// What is wrong with a knob, by kind (`known_gaps` name one; `propagation.json` carries them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// No condition tried makes the server read it (sent but not consumed, not sent).
    NotConsumed,
    /// An active consumer's location did not change.
    UnchangedConsumer,
    /// A location changed that the manifest does not name for the knob.
    UnexpectedEffect,
    /// The wire holds a type the consumer does not declare.
    TypeMismatch,
    /// The consumer reads a value other than the one tried.
    WrongValue,
    /// A perturbed run failed.
    RunFailed,
    /// Every `try` value equals the scenario's value.
    NotExercised,
    /// The trainer's resolved config carries a key of the backend block the manifest lacks.
    Unlisted,
}

impl ProblemKind {
    /// The snake-case name, as in the manifest.
    pub(crate) fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// The JSON type name of a value, in the words of a consumer's declared type.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// The families of wire locations the recorded wire is read into (see `wire.rs`).
pub(crate) const LOCATION_FAMILIES: &[&str] = &[
    "job",
    "meta",
    "batch",
    "processing",
    "generate",
    "log_probs",
    "route",
    "routes",
    "status",
    "srv",
    "http_errors",
    "env",
];

/// How a manifest names an environment variable as a knob (`env.<NAME>`).
pub(crate) const ENV_PREFIX: &str = "env.";

/// Whether a condition key names a wire location rather than a config path.
pub(crate) fn is_wire_location(key: &str) -> bool {
    let first = key.split('.').next().unwrap_or(key);
    LOCATION_FAMILIES.contains(&first)
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    #[error("failed to read knob manifest {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("knob manifest {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("knob manifest {path}: {}", problems.join("; "))]
    Invalid {
        path: PathBuf,
        problems: Vec<String>,
    },
}

/// Read, parse and validate a manifest file.
pub(crate) fn load(path: &Path) -> Result<KnobManifest, ManifestError> {
    let text = rlharness_arctic::fsx::read_to_string(path).map_err(|e| ManifestError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let manifest = parse(&text, path)?;
    let problems = validate(&manifest);
    if problems.is_empty() {
        Ok(manifest)
    } else {
        Err(ManifestError::Invalid {
            path: path.to_path_buf(),
            problems,
        })
    }
}

/// Parse manifest text (no semantic validation) through the scenario loader's spanned
/// deserializer, so an unknown key or a wrong type is reported with its file, line and column.
pub(crate) fn parse(text: &str, path: &Path) -> Result<KnobManifest, ManifestError> {
    let err = |e: crate::scenario::SpecError| ManifestError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let node = crate::scenario::yaml::parse(text, path).map_err(err)?;
    crate::scenario::de::from_node::<KnobManifest>(&node, "").map_err(err)
}

fn known_location(loc: &str) -> bool {
    let first = loc.split('.').next().unwrap_or(loc);
    LOCATION_FAMILIES.contains(&first)
}

/// The knob verdicts a known gap may name (`KnobVerdict`'s snake-case names).
pub(crate) const GAP_VERDICTS: &[&str] = &[
    "consumed",
    "consumed_under_condition",
    "sent_not_consumed",
    "not_sent",
    "unexpected_effect",
    "not_observable",
    "unlisted",
];

/// Semantic checks: what serde cannot see. Every problem names the knob.
pub(crate) fn validate(m: &KnobManifest) -> Vec<String> {
    let mut problems = Vec::new();
    validate_gaps(m, &mut problems);
    let mut declared = BTreeMap::new();
    for (i, n) in m.not_sent.iter().enumerate() {
        if n.reason.trim().is_empty() {
            problems.push(format!("not_sent `{}`: give the reason", n.path));
        }
        if m.knobs.iter().any(|k| k.path == n.path) {
            problems.push(format!(
                "not_sent `{}`: also a knob of the manifest (a key is one or the other)",
                n.path
            ));
        }
        if let Some(first) = declared.insert(n.path.clone(), i) {
            problems.push(format!(
                "not_sent `{}`: listed twice (entries {} and {})",
                n.path,
                first + 1,
                i + 1
            ));
        }
    }
    let mut seen = BTreeMap::new();
    let families = LOCATION_FAMILIES.join(", ");
    for v in &m.volatile {
        if !known_location(v) {
            problems.push(format!(
                "volatile `{v}`: not a wire location (families: {families})"
            ));
        }
    }
    for (i, k) in m.knobs.iter().enumerate() {
        if let Some(first) = seen.insert(k.path.clone(), i) {
            problems.push(format!(
                "knob `{}`: listed twice (entries {} and {})",
                k.path,
                first + 1,
                i + 1
            ));
        }
        validate_knob(k, &mut problems);
    }
    problems
}

/// The known gaps: each names a knob of the manifest (an unlisted key: a config path the
/// manifest lacks), a knob verdict, a problem kind and a location that is one, gives a reason
/// and is listed once.
fn validate_gaps(m: &KnobManifest, problems: &mut Vec<String>) {
    let mut gaps = BTreeMap::new();
    for g in &m.known_gaps {
        let listed = m.knobs.iter().any(|k| k.path == g.knob);
        let unlisted = g.problem == ProblemKind::Unlisted;
        if unlisted && listed {
            problems.push(format!(
                "known gap `{}`: problem `unlisted`, but the manifest lists the knob",
                g.knob
            ));
        } else if !unlisted && !listed {
            problems.push(format!(
                "known gap `{}`: no knob of this manifest has that path",
                g.knob
            ));
        }
        if !GAP_VERDICTS.contains(&g.verdict.as_str()) {
            problems.push(format!(
                "known gap `{}`: verdict `{}` is not one of {}",
                g.knob,
                g.verdict,
                GAP_VERDICTS.join(", ")
            ));
        } else if unlisted != (g.verdict == "unlisted") {
            problems.push(format!(
                "known gap `{}`: verdict `unlisted` goes with problem `unlisted`, and only with it",
                g.knob
            ));
        }
        if let Some(at) = &g.at {
            if !known_location(at) {
                problems.push(format!(
                    "known gap `{}`: `at: {at}` is not a wire location (families: {})",
                    g.knob,
                    LOCATION_FAMILIES.join(", ")
                ));
            }
        }
        if g.reason.trim().is_empty() {
            problems.push(format!("known gap `{}`: needs a reason", g.knob));
        }
        let key = (g.knob.clone(), g.problem, g.at.clone());
        if gaps.insert(key, ()).is_some() {
            problems.push(format!(
                "known gap `{}`: listed twice with problem `{}`{}",
                g.knob,
                g.problem.name(),
                g.at.as_ref()
                    .map(|a| format!(" at {a}"))
                    .unwrap_or_default()
            ));
        }
    }
}

/// One knob on its own: its path, its `try` values, its wire locations, consumers and
/// conditions.
fn validate_knob(k: &Knob, problems: &mut Vec<String>) {
    let name = &k.path;
    let families = LOCATION_FAMILIES.join(", ");
    if k.path.is_empty() || k.path.split('.').any(str::is_empty) {
        problems.push(format!("knob `{name}`: expected a dotted config path"));
    }
    if k.tries.is_empty() {
        problems.push(format!("knob `{name}`: `try` needs at least one value"));
    } else if k.tries.iter().all(|t| t == &k.default) {
        problems.push(format!(
            "knob `{name}`: every `try` value equals the default {}; a perturbation must differ from it",
            k.default
        ));
    }
    if k.tries.iter().any(Value::is_null) {
        problems.push(format!(
            "knob `{name}`: `try` holds null, which removes the key rather than changing it"
        ));
    }
    for d in &k.to {
        if let Some(cond) = d.when.keys().find(|c| is_wire_location(c)) {
            problems.push(format!(
                "knob `{name}`: destination `{}` is conditioned on `{cond}`, which must be a config path",
                d.at
            ));
        }
    }
    for loc in k.sent_locations().chain(&k.effects) {
        if !known_location(loc) {
            problems.push(format!(
                "knob `{name}`: `{loc}` is not a wire location (families: {families})"
            ));
        }
    }
    for c in &k.consumers {
        if !known_location(&c.at) {
            problems.push(format!(
                "knob `{name}`: consumer `{}` is not a wire location (families: {families})",
                c.at
            ));
        }
        for cond in c.when.keys() {
            if cond == &k.path {
                problems.push(format!(
                    "knob `{name}`: consumer `{}` depends on the knob itself",
                    c.at
                ));
            }
        }
    }
    if k.consumers.is_empty() && k.allowed_noop.is_none() && k.note.is_none() {
        problems.push(format!(
            "knob `{name}`: no consumer, no `allowed_noop` reason and no `note` saying why nothing reads it"
        ));
    }
    if k.added && !k.default.is_null() {
        problems.push(format!(
            "knob `{name}`: `added` (no layer defines it) needs `default: null`"
        ));
    }
    if k.path.starts_with(ENV_PREFIX) && (!k.default.is_null() || k.added) {
        problems.push(format!(
            "knob `{name}`: an environment knob has `default: null` (the trainer's own \
             environment) and is not `added`"
        ));
    }
    if matches!(&k.allowed_noop, Some(r) if r.trim().is_empty()) {
        problems.push(format!("knob `{name}`: `allowed_noop` needs a reason"));
    }
    for (cond, values) in &k.conditions {
        if cond == &k.path {
            problems.push(format!("knob `{name}`: conditioned on itself"));
        }
        if is_wire_location(cond) {
            problems.push(format!(
                "knob `{name}`: condition `{cond}` must be a config path (a run sets it)"
            ));
        }
        if values.is_empty() {
            problems.push(format!("knob `{name}`: condition `{cond}` lists no values"));
        }
    }
}

/// Static coverage: every leaf of the backend YAML (paths relative to the backend block) has
/// a manifest entry, and every manifest entry under the backend prefix is a leaf of the YAML.
/// An entry may also name a subtree (a whole `deepspeed` block passed verbatim).
pub(crate) fn coverage(backend_yaml_leaves: &[String], manifest: &KnobManifest) -> Vec<String> {
    let prefix = format!("{}.", manifest.backend_prefix);
    let entries: Vec<&str> = manifest
        .knobs
        .iter()
        .filter(|k| !k.added)
        .filter_map(|k| k.path.strip_prefix(&prefix))
        .collect();
    let mut problems = Vec::new();
    for leaf in backend_yaml_leaves {
        let covered = entries
            .iter()
            .any(|e| leaf == e || leaf.starts_with(&format!("{e}.")));
        if !covered {
            problems.push(format!(
                "{}: `{}{leaf}` has no entry in the {} knob manifest",
                manifest.backend_yaml, prefix, manifest.backend
            ));
        }
    }
    for e in &entries {
        let exists = backend_yaml_leaves
            .iter()
            .any(|leaf| leaf == e || leaf.starts_with(&format!("{e}.")));
        if !exists {
            problems.push(format!(
                "{} knob manifest: `{prefix}{e}` is not a key of {}",
                manifest.backend, manifest.backend_yaml
            ));
        }
    }
    problems
}

/// The config leaves (dotted paths from the config root) that the manifest does not account
/// for: no knob covers them (its own path, its subtree, or an empty block above it) and no
/// `not_sent` entry names them or a block above them.
pub(crate) fn unaccounted<'a>(
    m: &KnobManifest,
    leaves: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    let under = |leaf: &str, path: &str| {
        leaf == path
            || leaf
                .strip_prefix(path)
                .is_some_and(|rest| rest.starts_with('.'))
    };
    leaves
        .into_iter()
        .filter(|leaf| {
            !m.knobs
                .iter()
                .any(|k| under(leaf, &k.path) || under(&k.path, leaf))
                && !m.not_sent.iter().any(|n| under(leaf, &n.path))
        })
        .collect()
}

/// The knob manifest of `backend` for scenarios under `root`: the root's
/// `backends/<backend>.knobs.yaml`, else the copy built into the binary (Arctic's), with the
/// name it goes by.
pub(crate) fn for_backend(
    root: &Path,
    backend: &str,
) -> Result<(KnobManifest, PathBuf), ManifestError> {
    let own = root.join("backends").join(format!("{backend}.knobs.yaml"));
    if own.is_file() || backend != crate::run::knobs::BUILTIN_BACKEND {
        return load(&own).map(|m| (m, own));
    }
    let name = PathBuf::from(crate::run::knobs::BUILTIN_MANIFEST_NAME);
    let m = parse(crate::run::knobs::BUILTIN_MANIFEST, &name)?;
    let problems = validate(&m);
    if problems.is_empty() {
        Ok((m, name))
    } else {
        Err(ManifestError::Invalid {
            path: name,
            problems,
        })
    }
}

/// Leaf paths of a YAML mapping (scalars, sequences, empty mappings), for [`coverage`].
pub(crate) fn yaml_leaves(text: &str, path: &Path) -> Result<Vec<(String, Value)>, ManifestError> {
    let node = crate::scenario::yaml::parse(text, path).map_err(|e| ManifestError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    flatten_leaves(&node.to_json(), "", &mut out);
    Ok(out)
}

pub(crate) fn flatten_leaves(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                flatten_leaves(child, &p, out);
            }
        }
        other => {
            if !path.is_empty() {
                out.push((path.to_string(), other.clone()));
            }
        }
    }
}

/// Whether the manifest's `default` of each backend knob matches the backend YAML's value
/// (interpolations such as `${actor_rollout_ref.rollout.n}` are compared as written).
pub(crate) fn default_drift(leaves: &[(String, Value)], manifest: &KnobManifest) -> Vec<String> {
    let prefix = format!("{}.", manifest.backend_prefix);
    let mut problems = Vec::new();
    for k in &manifest.knobs {
        let Some(rel) = k.path.strip_prefix(&prefix) else {
            continue;
        };
        if let Some((_, v)) = leaves.iter().find(|(p, _)| p == rel) {
            if !json_equal(v, &k.default) {
                problems.push(format!(
                    "{} knob manifest: `{}` default {} differs from {} in {}",
                    manifest.backend, k.path, k.default, v, manifest.backend_yaml
                ));
            }
        }
    }
    problems
}

/// Everything `rlharness check` reports about one manifest file: parse and validation
/// errors, then static coverage against its backend YAML (both directions) and default drift.
/// The backend YAML is found relative to the folder above the manifest's (`scenarios/`).
pub(crate) fn check_file(path: &Path) -> Vec<String> {
    let m = match load(path) {
        Ok(m) => m,
        Err(e) => return vec![e.to_string()],
    };
    let root = path
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| Path::new("."));
    let yaml_path = root.join(&m.backend_yaml);
    let text = match rlharness_arctic::fsx::read_to_string(&yaml_path) {
        Ok(t) => t,
        Err(e) => return vec![format!("knob manifest {}: {e}", path.display())],
    };
    match yaml_leaves(&text, &yaml_path) {
        Ok(leaves) => {
            let paths: Vec<String> = leaves.iter().map(|(p, _)| p.clone()).collect();
            let mut problems = coverage(&paths, &m);
            problems.extend(default_drift(&leaves, &m));
            problems
        }
        Err(e) => vec![e.to_string()],
    }
}

/// Equality where `4` and `4.0` are the same number (YAML writers differ on that); types are
/// judged separately.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod shipped;
#[cfg(test)]
pub(crate) mod tests;
