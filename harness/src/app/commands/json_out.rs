//! `--format json`: the documents `list` and `check` print for scripts (`run`'s is the
//! combined verdict's, `index::json_document`). Each carries a
//! `schema` version (bumped when a key changes meaning or goes away; new keys do not bump it).

use serde_json::{json, Value};

use crate::spec::check::{CheckOutcome, Diagnostic, FileKind, ListEntry};

/// The version of the documents here.
pub(crate) const SCHEMA: u32 = 1;

/// `list --format json`: each scenario, its file, tags, requirements, and whether it can run
/// here (with the reasons when not).
pub(crate) fn list(entries: &[ListEntry]) -> Value {
    let scenarios: Vec<Value> = entries
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "path": e.path.display().to_string(),
                "tags": e.tags,
                "requires": e.requires,
                "runnable": e.runnable.is_ok(),
                "not_runnable_because": e.runnable.clone().err().unwrap_or_default(),
            })
        })
        .collect();
    json!({"schema": SCHEMA, "scenarios": scenarios})
}

/// `check --format json`: every file checked with its errors (file, line, column, key,
/// message) and warnings, and the knob manifests' problems.
pub(crate) fn check(outcome: &CheckOutcome, manifests: &[(String, Vec<String>)]) -> Value {
    let files: Vec<Value> = outcome
        .files
        .iter()
        .map(|f| {
            let errors: Vec<Value> = f
                .errors
                .iter()
                .map(|d| match d {
                    Diagnostic::Spec(e) => json!({
                        "file": e.file.display().to_string(),
                        "line": e.line,
                        "col": e.col,
                        "key": e.key_path,
                        "message": e.message,
                    }),
                    Diagnostic::Lint(i) => json!({
                        "file": i.file.display().to_string(),
                        "line": i.line,
                        "col": null,
                        "key": "",
                        "message": i.message,
                    }),
                })
                .collect();
            let warnings: Vec<String> = f.warnings.iter().map(|w| w.to_string()).collect();
            json!({
                "path": f.path.display().to_string(),
                "kind": match f.kind {
                    FileKind::Scenario => "scenario",
                    FileKind::LayerFile => "layer",
                },
                "errors": errors,
                "warnings": warnings,
            })
        })
        .collect();
    let manifests: Vec<Value> = manifests
        .iter()
        .map(|(path, problems)| json!({"path": path, "errors": problems}))
        .collect();
    let ok = outcome.is_ok() && manifests.iter().all(|m| m["errors"] == json!([]));
    json!({
        "schema": SCHEMA,
        "ok": ok,
        "errors": outcome.error_count()
            + manifests.iter().map(|m| m["errors"].as_array().map_or(0, Vec::len)).sum::<usize>(),
        "files": files,
        "knob_manifests": manifests,
    })
}
