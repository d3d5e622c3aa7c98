//! `golden.yaml`: the provenance header and rules snapshot of a golden, and the digest of the
//! series it was written with.

use std::path::Path;

use super::{BlessedBands, GoldenError, Provenance};
use crate::model::checks::ChecksSpec;
use crate::model::metrics::MetricTable;

// ---------------------------------------------------------------------------------------------
// golden.yaml: written by a small emitter (every scalar is a JSON string or number, which YAML
// reads as the same value; the rules snapshot is one line of JSON, a YAML flow mapping), read
// back with yaml-rust2.

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn yaml_opt_str(s: Option<&str>) -> String {
    s.map(yaml_str).unwrap_or_else(|| "null".into())
}

fn yaml_opt_u64(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "null".into())
}

pub(crate) fn render_header(
    scenario: &str,
    hardware: &str,
    table: &MetricTable,
    p: &Provenance,
    rules: Option<&ChecksSpec>,
    bands: Option<&BlessedBands>,
) -> String {
    let digest = metrics_digest(table.to_csv().as_bytes());
    let rules_json = rules
        .and_then(|r| serde_json::to_string(r).ok())
        .unwrap_or_else(|| "null".into());
    let bands_line = bands
        .filter(|b| !b.is_empty())
        .and_then(|b| serde_json::to_string(b).ok())
        .map(|b| format!("bands: {b}\n"))
        .unwrap_or_default();
    format!(
        "# rlharness golden: the accepted series of {scenario} on {hardware} lies in metrics.csv.\n\
         # Review changes with `rlharness golden status|accept|reject`; do not edit by hand.\n\
         scenario: {}\n\
         hardware: {}\n\
         steps: {}\n\
         metrics: {}\n\
         metrics_sha256: {}\n\
         provenance:\n  \
           date: {}\n  \
           harness_version: {}\n  \
           git_commit: {}\n  \
           device: {}\n  \
           seed: {}\n  \
           threads: {}\n  \
           torch_version: {}\n\
         {}{}{}\
         rules: {rules_json}\n{bands_line}",
        yaml_str(scenario),
        yaml_str(hardware),
        table.len(),
        table.columns().len(),
        yaml_str(&digest),
        yaml_str(&p.date),
        yaml_str(&p.harness_version),
        yaml_opt_str(p.git_commit.as_deref()),
        yaml_str(&p.device),
        yaml_opt_u64(p.seed),
        yaml_opt_u64(p.threads),
        yaml_opt_str(p.torch_version.as_deref()),
        p.source
            .as_deref()
            .map(|s| format!("  source: {}\n", yaml_str(s)))
            .unwrap_or_default(),
        p.numeric_fingerprint
            .as_deref()
            .map(|s| format!("  numeric_fingerprint: {}\n", yaml_str(s)))
            .unwrap_or_default(),
        p.cpu_isa
            .as_deref()
            .map(|s| format!("  cpu_isa: {}\n", yaml_str(s)))
            .unwrap_or_default(),
    )
}

fn yaml_to_json(y: &yaml_rust2::Yaml) -> serde_json::Value {
    use serde_json::Value;
    use yaml_rust2::Yaml;
    match y {
        Yaml::Real(s) => s
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(s.clone())),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(yaml_to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s.clone(),
                        Yaml::Integer(i) => i.to_string(),
                        Yaml::Real(r) => r.clone(),
                        Yaml::Boolean(b) => b.to_string(),
                        _ => String::new(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

pub(crate) fn parse_header(
    text: &str,
    path: &Path,
) -> Result<(Provenance, Option<ChecksSpec>, Option<BlessedBands>), GoldenError> {
    let herr = |message: String| GoldenError::Header {
        path: path.to_path_buf(),
        message,
    };
    let docs = yaml_rust2::YamlLoader::load_from_str(text).map_err(|e| herr(e.to_string()))?;
    let doc = docs
        .first()
        .ok_or_else(|| herr("the file is empty".into()))?;
    let v = yaml_to_json(doc);
    let prov = v
        .get("provenance")
        .ok_or_else(|| herr("no `provenance` section".into()))?;
    let provenance: Provenance =
        serde_json::from_value(prov.clone()).map_err(|e| herr(format!("provenance: {e}")))?;
    let rules = match v.get("rules") {
        None | Some(serde_json::Value::Null) => None,
        Some(r) => Some(
            serde_json::from_value::<ChecksSpec>(r.clone())
                .map_err(|e| herr(format!("rules: {e}")))?,
        ),
    };
    let bands = match v.get("bands") {
        None | Some(serde_json::Value::Null) => None,
        Some(b) => Some(
            serde_json::from_value::<BlessedBands>(b.clone())
                .map_err(|e| herr(format!("bands: {e}")))?,
        ),
    };
    Ok((provenance, rules, bands))
}

/// The digest a header records for its series: SHA-256 of the CSV bytes, carriage returns
/// dropped (a checkout with `core.autocrlf` must not break the pair).
pub(crate) fn metrics_digest(csv: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for chunk in csv.split(|&b| b == b'\r') {
        h.update(chunk);
    }
    format!("{:x}", h.finalize())
}

/// The `metrics_sha256` a header records, if any.
pub(super) fn header_digest(text: &str) -> Option<String> {
    let docs = yaml_rust2::YamlLoader::load_from_str(text).ok()?;
    docs.first()?["metrics_sha256"].as_str().map(str::to_string)
}
