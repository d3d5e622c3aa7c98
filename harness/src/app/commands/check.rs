//! `rlharness check`: scenarios validated, knob manifests linted.

use std::path::PathBuf;

use crate::error::ExitStatus;
use crate::propagate::manifest;
use crate::spec::{self, check, config};
use crate::util;

/// `rlharness check`: every scenario validated, every backend file linted; exit 2 on any error.
pub(crate) fn check(paths: &[PathBuf]) -> ExitStatus {
    // A folder without one scenario file validates nothing: an input error (a mistyped path,
    // or an unquoted glob that matched nothing), not a pass. A missing path is reported below.
    let default_paths = [PathBuf::from("scenarios")];
    let given = if paths.is_empty() {
        &default_paths[..]
    } else {
        paths
    };
    let empty: Vec<&PathBuf> = given
        .iter()
        .filter(|p| p.is_dir())
        .filter(|p| spec::discover(std::slice::from_ref(*p)).is_ok_and(|f| f.is_empty()))
        .collect();
    if !empty.is_empty() {
        for p in empty {
            eprintln!("error: {}: no scenario files there", p.display());
        }
        return ExitStatus::InvalidInput;
    }
    let outcome = check::check(paths);
    let rendered = check::render_check(&outcome);
    out!("{rendered}");
    for error in rendered.lines().filter_map(|l| l.strip_prefix("error: ")) {
        util::annotate_message("rlharness check", error);
    }
    // Knob manifests: validated like a scenario, and covered both ways by their backend YAML.
    let mut manifest_errors = 0;
    for manifest in knob_manifests(paths) {
        let problems = manifest::check_file(&manifest);
        for p in &problems {
            outln!("error: {p}");
        }
        if problems.is_empty() {
            outln!(
                "ok: knob manifest {} covers its backend",
                manifest.display()
            );
        }
        manifest_errors += problems.len();
    }
    if outcome.is_ok() && manifest_errors == 0 {
        ExitStatus::Passed
    } else {
        ExitStatus::InvalidInput
    }
}

/// `backends/*.knobs.yaml` under each scenarios root that `check` looks at.
fn knob_manifests(paths: &[PathBuf]) -> Vec<PathBuf> {
    let default_paths = [PathBuf::from("scenarios")];
    let paths = if paths.is_empty() {
        &default_paths[..]
    } else {
        paths
    };
    let mut roots = std::collections::BTreeSet::new();
    for p in paths {
        let probe = if p.is_dir() {
            p.join("x.yaml")
        } else {
            p.clone()
        };
        roots.insert(config::scenarios_root(&probe));
    }
    let mut out = Vec::new();
    for root in roots {
        if let Ok(entries) = std::fs::read_dir(root.join("backends")) {
            let mut found: Vec<_> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".knobs.yaml"))
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    out
}
