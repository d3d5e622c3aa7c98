//! A run's recorded wire, read into comparable locations. Two runs that differ in one knob
//! are compared location by location; the families are:
//! - `job.<job_type>.<json path>`: each leaf of each JobConfig the backend received;
//! - `meta.<key path>`: the `meta` of every `/forward` and `/forward-backward`;
//! - `batch.<tensor>`: the dtype of each tensor those calls carry (presence is what a knob
//!   such as `drop_position_ids` changes; shapes follow the data, not the config);
//! - `processing.<key>`: their post-processors and loss function;
//! - `generate.sampling_params.<key>`: the sampling parameters of every `/generate`;
//! - `log_probs.<key>`: the settings of every `/log-probs` (the scoring route: `top_k`, and
//!   whether `completions` were given), not its prompts;
//! - `route.<route>`: how many calls each route got; `routes`: the call sequence, run-length
//!   encoded;
//! - `status.<key>`: what `GET /status` answered (GPU counts), when the driver asked;
//! - `srv.<flag>`: the server's start-up flags, when the run started the server with them and
//!   recorded how (`server_flags.json`: the builtin driver's runs only);
//! - `http_errors`: the number of calls answered with a status of 400 or more;
//! - `env.<NAME>`: the values a watched environment variable had in the trainer's processes
//!   (`trainer_env.json`; `null` for a process without it), and `env.<NAME>.processes` which
//!   process had which.
//!
//! A location seen with several values across calls keeps them all (first-seen order).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::run::driver::command::envwatch::TrainerEnv;

/// The wire of one run, by location.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WireSnapshot {
    pub(crate) locations: BTreeMap<String, Vec<Value>>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum WireLoadError {
    #[error("failed to read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}:{line}: invalid wire record: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Where a stopped trial's wire is cut (see [`WireSnapshot::load_run_until`]); ordered by how
/// far the run went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum WireCut {
    /// Through the `/initialize` calls (and any `/health` before them).
    Initialized,
    /// Through training step `n`: up to the `n`-th `/generate` that follows a `/step` (the
    /// first request of the next step), or everything when the next step never began.
    Steps(u64),
}

impl WireCut {
    /// How many of the records (in the order they were recorded) lie before the cut.
    fn end(self, records: &[Value]) -> usize {
        let route = |r: &Value| {
            r.get("route")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        match self {
            WireCut::Initialized => {
                let mut seen = false;
                for (i, r) in records.iter().enumerate() {
                    match route(r).as_str() {
                        "/initialize" => seen = true,
                        "/health" => {}
                        _ if seen => return i,
                        _ => {}
                    }
                }
                records.len()
            }
            WireCut::Steps(n) => {
                let (mut stepped, mut starts) = (false, 0);
                for (i, r) in records.iter().enumerate() {
                    match route(r).as_str() {
                        "/step" => stepped = true,
                        "/generate" if stepped => {
                            starts += 1;
                            stepped = false;
                            if starts >= n {
                                return i;
                            }
                        }
                        _ => {}
                    }
                }
                records.len()
            }
        }
    }
}

impl WireSnapshot {
    /// One value, when the location was seen with exactly one.
    pub(crate) fn single(&self, loc: &str) -> Option<&Value> {
        match self.locations.get(loc)?.as_slice() {
            [v] => Some(v),
            _ => None,
        }
    }

    fn add(&mut self, loc: String, v: Value) {
        let e = self.locations.entry(loc).or_default();
        if !e.contains(&v) {
            e.push(v);
        }
    }

    /// Load `wire.jsonl`, `server_config.json` and (if present) `server_flags.json` of a run
    /// directory.
    #[cfg(test)]
    pub(crate) fn load_run(dir: &Path) -> Result<WireSnapshot, WireLoadError> {
        Self::load_run_until(dir, None)
    }

    /// [`Self::load_run`], keeping only the records up to `cut`: a trainer stopped on purpose
    /// may have sent a request or two more before it went, and a trial and its baseline must be
    /// compared over the same stretch of the wire.
    pub(crate) fn load_run_until(
        dir: &Path,
        cut: Option<WireCut>,
    ) -> Result<WireSnapshot, WireLoadError> {
        let wire_path = dir.join("wire.jsonl");
        let text = read(&wire_path)?;
        let mut records = Vec::new();
        // The recorder appends whole lines; a run killed mid-write can leave a last line
        // without its newline. That torn record is dropped (with a warning), not an error:
        // everything before it is intact.
        let unterminated = !text.is_empty() && !text.ends_with('\n');
        let count = text.lines().count();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(e) if unterminated && i + 1 == count => {
                    tracing::warn!(
                        "{}:{}: dropping a torn last record (the run was cut off while writing it): {e}",
                        wire_path.display(),
                        i + 1
                    );
                    break;
                }
                Err(e) => {
                    return Err(WireLoadError::Line {
                        path: wire_path.clone(),
                        line: i + 1,
                        message: e.to_string(),
                    })
                }
            };
            if !v.is_object() {
                return Err(WireLoadError::Line {
                    path: wire_path.clone(),
                    line: i + 1,
                    message: "expected a JSON object".into(),
                });
            }
            records.push(v);
        }
        let json_file = |name: &str| -> Result<Option<Value>, WireLoadError> {
            let p = dir.join(name);
            if !p.exists() {
                return Ok(None);
            }
            let t = read(&p)?;
            serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| WireLoadError::Read {
                    path: p.clone(),
                    message: format!("invalid JSON: {e}"),
                })
        };
        if let Some(cut) = cut {
            let end = cut.end(&records);
            records.truncate(end);
        }
        let server_config = json_file("server_config.json")?;
        let server_flags = json_file("server_flags.json")?;
        let mut w = Self::from_records(&records, server_config.as_ref(), server_flags.as_ref());
        if let Some(env) = TrainerEnv::load(dir) {
            w.add_trainer_env(&env);
        }
        Ok(w)
    }

    /// The watched variables of `trainer_env.json`: `env.<NAME>` holds every value the
    /// trainer's processes were started with (`null` for a process without it), and
    /// `env.<NAME>.processes` the same per kind of process (`label=value`, `label` alone
    /// where it had none), for the report.
    pub(crate) fn add_trainer_env(&mut self, env: &TrainerEnv) {
        for (name, var) in &env.variables {
            for (label, values) in &var.processes {
                for v in values {
                    self.add(
                        format!("env.{name}"),
                        v.clone().map_or(Value::Null, Value::String),
                    );
                    let shown = match v {
                        Some(v) => format!("{label}={v}"),
                        None => label.clone(),
                    };
                    self.add(format!("env.{name}.processes"), Value::String(shown));
                }
            }
        }
    }

    /// Build from parsed `wire.jsonl` records and the optional side files.
    pub(crate) fn from_records(
        records: &[Value],
        server_config: Option<&Value>,
        server_flags: Option<&Value>,
    ) -> WireSnapshot {
        let mut w = WireSnapshot::default();
        let mut sequence: Vec<String> = Vec::new();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut errors = 0u64;
        let mut initialized: Vec<Value> = Vec::new();
        for r in records {
            let route = normalize_route(r.get("route").and_then(Value::as_str).unwrap_or("?"));
            sequence.push(route.clone());
            *counts.entry(route.clone()).or_default() += 1;
            if r.get("status")
                .and_then(Value::as_u64)
                .is_some_and(|s| s >= 400)
            {
                errors += 1;
            }
            w.add_exchange(&route, r, &mut initialized);
        }
        // JobConfigs: what the backend recorded, else what the proxy saw in `/initialize`.
        let jobs = match server_config {
            Some(config) => job_configs(config).unwrap_or(initialized),
            None => initialized,
        };
        for job in &jobs {
            let job_type = job
                .get("job_type")
                .and_then(Value::as_str)
                .unwrap_or("training")
                .to_string();
            if let Value::Object(m) = job {
                for (k, v) in m {
                    if k == "job_type" {
                        continue;
                    }
                    flatten_into(&mut w, v, &format!("job.{job_type}.{k}"));
                }
            }
        }
        // `{"started_by", "argv", "flags": {...}}` as the runner records it (a bare mapping of
        // flags is read too).
        let flags = server_flags.map(|f| f.get("flags").unwrap_or(f));
        if let Some(Value::Object(flags)) = flags {
            for (k, v) in flags {
                w.add(format!("srv.{k}"), v.clone());
            }
        }
        for (route, n) in counts {
            w.add(format!("route.{route}"), Value::from(n));
        }
        w.add("routes".into(), Value::String(run_length(&sequence)));
        w.add("http_errors".into(), Value::from(errors));
        w
    }

    /// Add what one exchange on `route` carried: a forward's meta, batch dtypes and
    /// processing, `/generate`'s sampling params, `/status`'s answer; an `/initialize` body is
    /// kept in `initialized`.
    fn add_exchange(&mut self, route: &str, r: &Value, initialized: &mut Vec<Value>) {
        let request = r.get("request");
        match route {
            "/forward" | "/forward-backward" => {
                if let Some(meta) = request.and_then(|q| find_key(q, "meta", 4)) {
                    flatten_into(self, meta, "meta");
                }
                if let Some(Value::Object(batch)) = request.and_then(|q| find_key(q, "batch", 4)) {
                    for (name, t) in batch {
                        let dtype = t
                            .get("dtype")
                            .cloned()
                            .unwrap_or_else(|| Value::String("json".into()));
                        self.add(format!("batch.{name}"), dtype);
                    }
                }
                if let Some(Value::Object(p)) = request.and_then(|q| find_key(q, "processing", 4)) {
                    for (k, v) in p {
                        self.add(format!("processing.{k}"), v.clone());
                    }
                }
            }
            "/generate" => {
                if let Some(sp) = request.and_then(|q| find_key(q, "sampling_params", 4)) {
                    flatten_into(self, sp, "generate.sampling_params");
                }
            }
            "/log-probs" => {
                if let Some(body) = request.and_then(|q| find_object_with(q, "prompts", 4)) {
                    for (k, v) in body {
                        match k.as_str() {
                            "prompts" => {}
                            "completions" => {
                                self.add(format!("log_probs.{k}"), (!v.is_null()).into())
                            }
                            _ => flatten_into(self, v, &format!("log_probs.{k}")),
                        }
                    }
                }
            }
            "/initialize" => {
                if let Some(body) = request.and_then(|q| find_object_with(q, "model_name", 4)) {
                    initialized.push(Value::Object(body.clone()));
                }
            }
            "/status" => {
                if let Some(resp) = r
                    .get("response")
                    .and_then(|q| find_object_with(q, "training_gpus", 4))
                {
                    for (k, v) in resp {
                        if k != "jobs" {
                            self.add(format!("status.{k}"), v.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// The JobConfigs of `server_config.json`: a mapping by job type (of one config or a list;
/// each config gets its `job_type`) or a list. `None` for anything else.
fn job_configs(server_config: &Value) -> Option<Vec<Value>> {
    match server_config {
        Value::Object(by_type) => {
            let mut jobs = Vec::new();
            for (job_type, cfg) in by_type {
                let list: Vec<&Value> = match cfg {
                    Value::Array(a) => a.iter().collect(),
                    other => vec![other],
                };
                for c in list {
                    let mut c = c.clone();
                    if let Value::Object(m) = &mut c {
                        m.entry("job_type")
                            .or_insert_with(|| Value::String(job_type.clone()));
                    }
                    jobs.push(c);
                }
            }
            Some(jobs)
        }
        Value::Array(list) => Some(list.clone()),
        _ => None,
    }
}

fn read(path: &Path) -> Result<String, WireLoadError> {
    rlharness_arctic::fsx::read_to_string(path).map_err(|e| WireLoadError::Read {
        path: path.to_path_buf(),
        message: e.source.to_string(),
    })
}

/// `/forward?job_id=2` -> `/forward`; `/job/3` -> `/job/{job_id}`.
pub(crate) fn normalize_route(route: &str) -> String {
    let path = route.split('?').next().unwrap_or(route);
    let path = path
        .split_once(' ')
        .map(|(method, p)| {
            if method.chars().all(|c| c.is_ascii_uppercase()) {
                p
            } else {
                path
            }
        })
        .unwrap_or(path);
    match path.strip_prefix("/job/") {
        Some(rest) if !rest.is_empty() && !rest.starts_with('{') => "/job/{job_id}".to_string(),
        _ => path.to_string(),
    }
}

fn run_length(seq: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < seq.len() {
        let mut j = i + 1;
        while j < seq.len() && seq[j] == seq[i] {
            j += 1;
        }
        let n = j - i;
        out.push(if n == 1 {
            seq[i].clone()
        } else {
            format!("{} x{n}", seq[i])
        });
        i = j;
    }
    out.join(", ")
}

/// The value under `key` in the body: the proxy may wrap a body (`{"body": ...}`), so the
/// search goes a few levels down, breadth first, and the shallowest hit wins.
fn find_key<'a>(v: &'a Value, key: &str, depth: usize) -> Option<&'a Value> {
    let mut level: Vec<&Value> = vec![v];
    for _ in 0..=depth {
        let mut next = Vec::new();
        for node in level {
            if let Value::Object(m) = node {
                if let Some(hit) = m.get(key) {
                    return Some(hit);
                }
                next.extend(m.values().filter(|c| c.is_object()));
            }
        }
        level = next;
    }
    None
}

/// The shallowest object holding `key` (a JobConfig holds `model_name`).
fn find_object_with<'a>(v: &'a Value, key: &str, depth: usize) -> Option<&'a Map<String, Value>> {
    let mut level: Vec<&Value> = vec![v];
    for _ in 0..=depth {
        let mut next = Vec::new();
        for node in level {
            if let Value::Object(m) = node {
                if m.contains_key(key) {
                    return Some(m);
                }
                next.extend(m.values().filter(|c| c.is_object()));
            }
        }
        level = next;
    }
    None
}

fn flatten_into(w: &mut WireSnapshot, v: &Value, path: &str) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                flatten_into(w, child, &format!("{path}.{k}"));
            }
        }
        other => w.add(path.to_string(), other.clone()),
    }
}

/// Whether a location pattern names a location: equal, a prefix at a `.` boundary (a
/// subtree), with `*` matching one whole segment.
pub(crate) fn pattern_matches(pattern: &str, location: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let l: Vec<&str> = location.split('.').collect();
    if p.len() > l.len() {
        return false;
    }
    p.iter().zip(&l).all(|(a, b)| *a == "*" || a == b)
}

/// One location that differs between two runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Change {
    pub(crate) location: String,
    /// `None`: absent in that run.
    pub(crate) before: Option<Vec<Value>>,
    pub(crate) after: Option<Vec<Value>>,
}

impl Change {
    pub(crate) fn describe(&self) -> String {
        format!(
            "{}: {} -> {}",
            self.location,
            show(self.before.as_deref()),
            show(self.after.as_deref())
        )
    }
}

/// A location's values for a report: `absent`, one value, or `a | b`.
pub(crate) fn show(values: Option<&[Value]>) -> String {
    match values {
        None => "absent".into(),
        Some(vs) => {
            let parts: Vec<String> = vs.iter().map(short).collect();
            parts.join(" | ")
        }
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// Every location whose values differ, except those matching a volatile pattern.
pub(crate) fn diff(
    baseline: &WireSnapshot,
    perturbed: &WireSnapshot,
    volatile: &[String],
) -> Vec<Change> {
    let mut keys: Vec<&String> = baseline
        .locations
        .keys()
        .chain(perturbed.locations.keys())
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !volatile.iter().any(|p| pattern_matches(p, k)))
        .filter_map(|k| {
            let b = baseline.locations.get(k);
            let a = perturbed.locations.get(k);
            let same = match (b, a) {
                // Strict: `4` and `4.0` differ, since a type change is a finding too.
                (Some(x), Some(y)) => x == y,
                (None, None) => true,
                _ => false,
            };
            (!same).then(|| Change {
                location: k.clone(),
                before: b.cloned(),
                after: a.cloned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
