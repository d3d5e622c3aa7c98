//! `--format json`: the documents `list` and `check` print for scripts (`run`'s is the
//! combined verdict's, `index::json_document`). Each carries a
//! `schema` version (bumped when a key changes meaning or goes away; new keys do not bump it).

use serde_json::{json, Value};

use crate::scenario::check::{CheckOutcome, Diagnostic, FileKind, ListEntry};

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

/// `golden status --format json`: the store and each pending golden waiting for review.
pub(crate) fn golden_status(
    root: &std::path::Path,
    pending: &[crate::model::golden::Pending],
) -> Value {
    let pending: Vec<Value> = pending
        .iter()
        .map(|p| {
            json!({
                "scenario": p.scenario,
                "hardware": p.hardware,
                "dir": p.dir.display().to_string(),
                "diff": p.diff_summary,
            })
        })
        .collect();
    json!({"schema": SCHEMA, "store": root.display().to_string(), "pending": pending})
}

/// `history --format json`: per scenario and hardware its runs (the verdict at the time and,
/// where it differs or the golden changed, today's), and each window's values, band and change
/// points; the runs left out and why; the files written.
pub(crate) fn history(
    c: &crate::tools::history::Collected,
    written: &[std::path::PathBuf],
) -> Value {
    let scenarios: Vec<Value> = c
        .trends
        .iter()
        .map(|t| {
            let runs: Vec<Value> = t
                .runs
                .iter()
                .map(|r| {
                    json!({
                        "dir": r.dir,
                        "started": r.started,
                        "code": r.version(),
                        "seeds": r.tables.len(),
                        "verdict_at_the_time": r.at_the_time,
                        "verdict_today": r.verdict,
                        "golden_changed_since": r.golden_changed,
                    })
                })
                .collect();
            let windows: Vec<Value> = t
                .windows
                .iter()
                .map(|w| {
                    let changes: Vec<Value> = w
                        .changes
                        .iter()
                        .map(|ch| {
                            json!({
                                "first_run_at_new_level": ch.run + 1,
                                "last_run_before": ch.prev + 1,
                                "before": ch.before,
                                "after": ch.after,
                                "sigma_multiple": ch.z,
                                "from": ch.from,
                                "to": ch.to,
                                "kind": format!("{:?}", ch.kind).to_lowercase(),
                            })
                        })
                        .collect();
                    json!({
                        "label": w.window.label(),
                        "metric": w.window.metric,
                        "first_step": w.window.first,
                        "last_step": w.window.last,
                        "statistic": if w.window.median { "median" } else { "mean" },
                        "golden": w.window.golden,
                        "band_half_width": w.window.band,
                        "sigma": w.sigma,
                        "sigma_from": w.sigma_from,
                        "values": w.values,
                        "changes": changes,
                    })
                })
                .collect();
            json!({
                "scenario": t.scenario,
                "hardware": t.hardware,
                "blessed": t.blesses,
                "runs": runs,
                "windows": windows,
            })
        })
        .collect();
    let unreadable: Vec<Value> = c
        .unreadable
        .iter()
        .map(|(d, why)| json!({"dir": d.display().to_string(), "why": why}))
        .collect();
    let files: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    json!({
        "schema": SCHEMA,
        "scenarios": scenarios,
        "calibration_runs_left_out": c.calibrations,
        "unreadable": unreadable,
        "files": files,
    })
}
