//! `rlharness golden status|accept|reject|bless`: the pending goldens reviewed.

use std::path::Path;

use crate::app::cli::{self, GoldenAction};
use crate::app::errors::Failure;
use crate::model::error::{CommandError, ExitStatus};
use crate::model::golden::{GoldenError, GoldenStore, Pending};
use crate::model::rundir::{self, RunStatus};
use crate::run::plan::RunPlan;
use crate::{judge, scenario};

/// `rlharness golden status|accept|reject|bless`: what the action did, printed; its status.
pub(crate) fn golden(
    action: GoldenAction,
    golden: Option<&Path>,
) -> Result<ExitStatus, CommandError> {
    let root = cli::golden_store(golden, None);
    if !root.is_dir() && !matches!(action, GoldenAction::Bless { .. }) {
        return Err(CommandError::invalid(format!(
            "no golden store at {}: run from the project's root or pass --golden DIR",
            root.display()
        )));
    }
    let (text, status) = match action {
        GoldenAction::Status { scenarios, format } => golden_status(&root, &scenarios, format)?,
        GoldenAction::Accept {
            scenarios,
            widen: true,
        } => golden_widen(&root, &scenarios)?,
        GoldenAction::Accept {
            scenarios,
            widen: false,
        } => golden_accept(&root, &scenarios)?,
        GoldenAction::Reject { scenarios } => golden_reject(&root, &scenarios)?,
        GoldenAction::Calibrate(_) => unreachable!("dispatched to `calibrate`"),
        GoldenAction::Audit(_) => unreachable!("dispatched to `audit`"),
        GoldenAction::Bless { run } => golden_bless(&run, &root)?,
    };
    out!("{text}");
    Ok(status)
}

/// `rlharness golden bless RUN`: the stored run's series as a pending golden, with the run's
/// provenance. Refused for a run that did not complete, a self-test's planted run, and a run
/// whose plan differs from the scenario file's today (a `--set`, another seed or step count, an
/// edited scenario): its series would not stand for the scenario.
fn golden_bless(run: &Path, root: &Path) -> Result<(String, ExitStatus), CommandError> {
    if rundir::is_combined(run) {
        return Err(CommandError::invalid(format!(
            "{} is a multi-seed run: bless one seed's directory (`{}/seed-<S>`) of the \
             scenario's own seed",
            run.display(),
            run.display()
        )));
    }
    let (manifest, table) = rundir::load(run)?;
    let refuse = |why: String| {
        Err(CommandError::invalid(format!(
            "{}: cannot bless: {why}",
            run.display()
        )))
    };
    if manifest.status != RunStatus::Completed {
        return refuse(format!(
            "the run did not complete (status {:?}{})",
            manifest.status,
            manifest
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    if manifest.reference_run.is_some() || manifest.expected_verdict.is_some() {
        return refuse("it is a self-test's run (planted on purpose)".into());
    }
    let file = Path::new(&manifest.scenario_path);
    let scenario =
        crate::run::plan::load_checked(file, &[]).map_err(|source| Failure::BlessScenario {
            run: run.to_path_buf(),
            file: file.to_path_buf(),
            source,
        })?;
    let plan = RunPlan::new(scenario, None, None)?;
    if plan.plan_hash != manifest.plan_hash {
        return refuse(format!(
            "it was made from another plan than {} resolves to today (plan {} against {}: a \
             --set override, another seed or step count, or an edited scenario)",
            file.display(),
            short(&manifest.plan_hash),
            short(&plan.plan_hash)
        ));
    }
    if plan.scenario.checks.golden.is_empty() {
        return refuse(format!("{} has no golden rules", file.display()));
    }
    let store = GoldenStore::new(root);
    let provenance = judge::provenance_of_run(&manifest, manifest.started.clone());
    let path = store.write_pending(
        &plan.scenario.name,
        &manifest.hardware,
        &table,
        &provenance,
        Some(&plan.scenario.checks),
        Some(&judge::band_widths(
            &plan.scenario.checks,
            store
                .load(&plan.scenario.name, &manifest.hardware)
                .ok()
                .flatten()
                .as_ref(),
        )),
    )?;
    Ok((
        format!(
            "pending golden written to {} from {} ({} steps); review with `rlharness golden \
             status`, then `rlharness golden accept {}`\n",
            path.display(),
            run.display(),
            table.len(),
            plan.scenario.name
        ),
        ExitStatus::Passed,
    ))
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(8)]
}

/// `rlharness golden status`: exit 0 when nothing is pending, 4 when something waits for review.
fn golden_status(
    root: &Path,
    filter: &[String],
    format: cli::OutputFormat,
) -> Result<(String, ExitStatus), CommandError> {
    let store = GoldenStore::new(root);
    let pending = match store.select(filter) {
        Err(GoldenError::NoPending(_)) => Vec::new(),
        other => other?,
    };
    let status = if pending.is_empty() {
        ExitStatus::Passed
    } else {
        ExitStatus::NoGolden
    };
    if format == cli::OutputFormat::Json {
        let doc = super::json_out::golden_status(root, &pending);
        return Ok((format!("{doc:#}\n"), status));
    }
    if pending.is_empty() {
        let of = if filter.is_empty() {
            String::new()
        } else {
            format!(" of {}", filter.join(", "))
        };
        return Ok((
            format!("no pending goldens{of} under {}\n", root.display()),
            ExitStatus::Passed,
        ));
    }
    let mut out = format!("{} pending golden(s):\n", pending.len());
    for p in &pending {
        out.push_str(&format!(
            "  {}/{}: {}\n",
            p.scenario, p.hardware, p.diff_summary
        ));
    }
    out.push_str("review with `rlharness golden accept [SCENARIO...]` or `reject [SCENARIO...]`\n");
    Ok((out, ExitStatus::NoGolden))
}

fn listing(verb: &str, done: &[Pending]) -> String {
    let mut out = String::new();
    for p in done {
        out.push_str(&format!(
            "{verb} {}/{}: {}\n",
            p.scenario, p.hardware, p.diff_summary
        ));
    }
    if done.is_empty() {
        out.push_str("no pending goldens\n");
    }
    out
}

/// `rlharness golden accept [SCENARIO...]`.
fn golden_accept(root: &Path, scenarios: &[String]) -> Result<(String, ExitStatus), CommandError> {
    let done = GoldenStore::new(root).accept(scenarios)?;
    Ok((listing("accepted", &done), ExitStatus::Passed))
}

/// `rlharness golden accept --widen SCENARIO...`: for each named scenario's accepted goldens
/// (every hardware key), the calibrated and stability bands its blessed rules resolve to with
/// the calibration beside it now, recorded as the widths it was blessed with; what widened is
/// listed window by window.
fn golden_widen(root: &Path, scenarios: &[String]) -> Result<(String, ExitStatus), CommandError> {
    if scenarios.is_empty() {
        return Err(CommandError::invalid(
            "golden accept --widen needs the scenarios whose wider bands to accept, by name",
        ));
    }
    let store = GoldenStore::new(root);
    let mut out = Vec::new();
    for name in scenarios {
        let dir = root.join(name);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(source) => return Err(Failure::GoldenFolder { dir, source }.into()),
        };
        let mut hardware: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join("golden.yaml").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        hardware.sort();
        if hardware.is_empty() {
            return Err(CommandError::invalid(format!(
                "no accepted golden of `{name}` under {}",
                root.display()
            )));
        }
        for hw in hardware {
            let Some(g) = store.load(name, &hw)? else {
                continue;
            };
            // The rules in force: the scenario's as its file says now (what a run is judged
            // by), else those the golden was blessed with.
            let Some(rules) = scenario_checks(root, name).or_else(|| g.rules.clone()) else {
                out.push(format!(
                    "{name}/{hw}: no scenario file of that name beside the store, and blessed \
                     before its rules were recorded: bless it again"
                ));
                continue;
            };
            let now = judge::band_widths(&rules, Some(&g));
            let before = g.bands.clone().unwrap_or_default();
            let mut changes = Vec::new();
            for (metric, windows) in &now {
                for (first, last, half) in windows {
                    let old = before
                        .get(metric)
                        .and_then(|w| w.iter().find(|(a, b, _)| (a, b) == (first, last)))
                        .map(|(_, _, h)| *h);
                    match old {
                        Some(o) if (*half - o).abs() <= 1e-12 * o.abs().max(1.0) => {}
                        Some(o) => changes.push(format!(
                            "  {metric} steps {first}..{last}: ±{} -> ±{} ({:+.1}%)",
                            judge::expr::fmt_num(o),
                            judge::expr::fmt_num(*half),
                            100.0 * (half - o) / o
                        )),
                        None => changes.push(format!(
                            "  {metric} steps {first}..{last}: ±{} (not recorded before)",
                            judge::expr::fmt_num(*half)
                        )),
                    }
                }
            }
            if changes.is_empty() && g.bands.is_some() {
                out.push(format!(
                    "{name}/{hw}: its bands are as recorded; nothing to accept"
                ));
                continue;
            }
            let path = store.rewrite_bands(&g, &now)?;
            out.push(format!(
                "{name}/{hw}: accepted the bands of the calibration now ({}):\n{}",
                path.display(),
                changes.join("\n")
            ));
        }
    }
    Ok((out.join("\n"), ExitStatus::Passed))
}

/// The checks of the scenario named `name` in the `scenarios/` folder beside the golden store
/// `root`, as its file says now.
fn scenario_checks(root: &Path, name: &str) -> Option<crate::model::checks::ChecksSpec> {
    let scenarios = root.parent()?.join("scenarios");
    let files = scenario::discover(std::slice::from_ref(&scenarios)).ok()?;
    files
        .iter()
        .filter_map(|f| crate::run::plan::load_checked(f, &[]).ok())
        .find(|s| s.name == name)
        .map(|s| s.checks)
}

/// `rlharness golden reject [SCENARIO...]`.
fn golden_reject(root: &Path, scenarios: &[String]) -> Result<(String, ExitStatus), CommandError> {
    let done = GoldenStore::new(root).reject(scenarios)?;
    Ok((listing("rejected", &done), ExitStatus::Passed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::golden::Provenance;
    use crate::model::metrics::MetricTable;

    #[test]
    fn status_names_what_waits_and_exits_4_until_it_is_reviewed() {
        let dir = tempfile::tempdir().unwrap();
        let store = GoldenStore::with_ci(dir.path(), false);
        let table = MetricTable::from_columns(&[("critic/rewards/mean", &[0.1, 0.2])]);
        store
            .write_pending(
                "smoke/mock",
                "cpu",
                &table,
                &Provenance::default(),
                None,
                None,
            )
            .unwrap();
        let (text, status) = golden_status(dir.path(), &[], cli::OutputFormat::Text).unwrap();
        assert_eq!(status, ExitStatus::NoGolden);
        assert!(text.contains("smoke/mock/cpu: new golden"), "{text}");
        // Named scenarios (as the README writes `golden status [SCENARIO...]`).
        let (text, status) = golden_status(
            dir.path(),
            &["smoke/mock".to_string()],
            cli::OutputFormat::Text,
        )
        .unwrap();
        assert_eq!(status, ExitStatus::NoGolden);
        assert!(text.contains("smoke/mock/cpu: new golden"), "{text}");
        let (text, status) =
            golden_status(dir.path(), &["other".to_string()], cli::OutputFormat::Text).unwrap();
        assert_eq!(status, ExitStatus::Passed);
        assert!(
            text.starts_with("no pending goldens of other under"),
            "{text}"
        );
        golden_reject(dir.path(), &[]).unwrap();
        let (text, status) = golden_status(dir.path(), &[], cli::OutputFormat::Text).unwrap();
        assert_eq!(status, ExitStatus::Passed);
        assert!(text.contains("no pending"));
    }
}
