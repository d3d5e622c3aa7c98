//! `rlharness check`: scenarios validated, knob manifests linted.

use std::path::PathBuf;

use crate::model::error::ExitStatus;
use crate::model::util;
use crate::scenario::check::Diagnostic;
use crate::scenario::{self, check, config, Origin, SpecError};
use crate::tools::propagate::knob_manifest;

/// `rlharness check`: every scenario validated, every backend file linted; exit 2 on any error.
pub(crate) fn check(paths: &[PathBuf], format: crate::app::cli::OutputFormat) -> ExitStatus {
    let json = format == crate::app::cli::OutputFormat::Json;
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
        .filter(|p| scenario::discover(std::slice::from_ref(*p)).is_ok_and(|f| f.is_empty()))
        .collect();
    if !empty.is_empty() {
        for p in empty {
            errln!("error: {}: no scenario files there", p.display());
        }
        return ExitStatus::InvalidInput;
    }
    let mut outcome = crate::app::check(paths);
    account_for_every_key(&mut outcome);
    let rendered = check::render_check(&outcome);
    if !json {
        out!("{rendered}");
    }
    for error in rendered.lines().filter_map(|l| l.strip_prefix("error: ")) {
        util::annotate_message("rlharness check", error);
    }
    // Knob manifests: validated like a scenario, and covered both ways by their backend YAML.
    let mut manifest_errors = 0;
    let mut manifests = Vec::new();
    for manifest in knob_manifests(paths) {
        let problems = knob_manifest::check_file(&manifest);
        if !json {
            for p in &problems {
                outln!("error: {p}");
            }
            if problems.is_empty() {
                outln!(
                    "ok: knob manifest {} covers its backend",
                    manifest.display()
                );
            }
        }
        manifest_errors += problems.len();
        manifests.push((manifest.display().to_string(), problems));
    }
    if json {
        outln!("{:#}", super::json_out::check(&outcome, &manifests));
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

/// Every key of each valid scenario's resolved config must be a knob of its backend's manifest
/// or declared `not_sent` (see `propagate::accounted`): a key that is neither is an error at
/// its own line. A key that comes from a defaults or layer file is reported once, with the
/// first scenario that has it. Scenarios without a remote backend have no manifest to answer to.
fn account_for_every_key(outcome: &mut check::CheckOutcome) {
    let mut reported = std::collections::BTreeSet::new();
    for f in outcome
        .files
        .iter_mut()
        .filter(|f| f.kind == check::FileKind::Scenario && f.errors.is_empty())
    {
        let Ok(s) = scenario::load_scenario(&f.path, &[]) else {
            continue;
        };
        let Ok((m, name)) =
            crate::tools::propagate::command::manifest_for(&f.path, &s.config.to_json())
        else {
            continue;
        };
        let advice = crate::tools::propagate::accounted::advice(&name.display().to_string());
        for u in crate::tools::propagate::accounted::unaccounted(&m, &s) {
            let shared = matches!(
                s.config.get(&u.path).map(|r| &r.origin),
                Some(Origin::Default { .. })
            );
            if shared && !reported.insert((u.path.clone(), u.origin.clone())) {
                continue;
            }
            let Some(node) = s.config.node(&u.path) else {
                continue;
            };
            f.errors.push(Diagnostic::Spec(SpecError::at(
                &node.pos,
                format!("config.{}", u.path),
                format!("unaccounted knob: {advice}"),
            )));
        }
    }
}
