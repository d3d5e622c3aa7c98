//! `rlharness propagate SCENARIO`: plan the matrix, run it (a bounded number of runs in
//! flight, each through the recording proxy), judge every knob and write the reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures_util::StreamExt;
use serde_json::Value;

use super::manifest::{self, KnobManifest};
use super::render::{self, PropagationReport};
use super::verdict::{self, judge_cell, judge_knob, Observed};
use super::wire::WireSnapshot;
use crate::error::{CommandError, ExitStatus};
use crate::fsx;
use crate::runner::{self, RunEnd, RunOptions};

/// Runs in flight at once: each is a mock backend, a proxy and a driver on the shared runtime.
pub const CONCURRENCY: usize = 4;

/// The manifest of the scenario's backend: `backends/<trainer.remote_backend>.knobs.yaml`
/// under the scenarios root.
pub fn manifest_path(scenario: &Path, config: &Value) -> Result<PathBuf, CommandError> {
    let backend = crate::driver::translate::lookup(config, "trainer.remote_backend")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            CommandError::invalid(format!(
                "{}: config.trainer.remote_backend names no backend, so there is no knob manifest to check",
                scenario.display()
            ))
        })?;
    let root = crate::spec::config::scenarios_root(scenario);
    Ok(root.join("backends").join(format!("{backend}.knobs.yaml")))
}

/// What one distinct run ended as.
enum RunResult {
    Ran { wire: WireSnapshot, config: Value },
    Failed(String),
}

/// A filesystem-safe label for a run folder.
fn slug(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '=' | ',') {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.truncate(120);
    out
}

fn run_label(overrides: &[String]) -> String {
    if overrides.is_empty() {
        return "baseline".into();
    }
    overrides
        .iter()
        .map(|o| {
            o.trim_start_matches('+')
                .trim_start_matches("config.")
                .to_string()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Run the matrix of `scenario` and write `propagation.{md,html,junit.xml}` under
/// `out/<scenario>/propagate-<stamp>/`. Exit: 0 nothing flagged, 1 something flagged, 2 a bad
/// manifest or scenario, 3 a run failed.
pub async fn propagate_command(
    scenario: &Path,
    out: &Path,
    set: &[String],
) -> Result<ExitStatus, CommandError> {
    let (report, dir, failed) = run_matrix(scenario, out, set).await?;
    let md = write_reports(&report, &dir)?;
    println!("{md}");
    println!("reports: {}", dir.display());
    let mut status = if report.flagged() > 0 {
        ExitStatus::CheckFailed
    } else {
        ExitStatus::Passed
    };
    if failed {
        status = status.worst(ExitStatus::RunFailed);
    }
    Ok(status)
}

/// Write `propagation.{md,html,junit.xml,json}` into `dir`; returns the Markdown.
pub fn write_reports(report: &PropagationReport, dir: &Path) -> Result<String, CommandError> {
    let md = render::markdown(report);
    let junit = render::junit(report)
        .map_err(|e| CommandError::run_failed(format!("cannot render the JUnit report: {e}")))?;
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| CommandError::run_failed(format!("cannot serialise the matrix: {e}")))?;
    let write = |name: &str, bytes: &[u8]| {
        fsx::write_atomic(&dir.join(name), bytes)
            .map_err(|e| CommandError::run_failed(e.to_string()))
    };
    write("propagation.md", md.as_bytes())?;
    write("propagation.html", render::html(report).as_bytes())?;
    write("propagation.junit.xml", junit.as_bytes())?;
    write("propagation.json", json.as_bytes())?;
    Ok(md)
}

/// Plan, run and judge; returns the report, its folder and whether any perturbed run failed.
pub async fn run_matrix(
    scenario: &Path,
    out: &Path,
    set: &[String],
) -> Result<(PropagationReport, PathBuf, bool), CommandError> {
    let started = Instant::now();
    let invalid = |e: crate::spec::SpecErrors| CommandError::invalid(e.to_string());
    let base = crate::spec::load_scenario(scenario, set).map_err(invalid)?;
    let base_config = base.config.to_json();
    let mpath = manifest_path(scenario, &base_config)?;
    let m: KnobManifest =
        manifest::load(&mpath).map_err(|e| CommandError::invalid(e.to_string()))?;
    let plan = verdict::plan_matrix(&m, &base_config);

    // Distinct runs by their override sets: baselines (per condition) and trials.
    let mut runs: Vec<Vec<String>> = Vec::new();
    let mut index: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    let mut want = |o: Vec<String>, runs: &mut Vec<Vec<String>>| -> usize {
        *index.entry(o.clone()).or_insert_with(|| {
            runs.push(o);
            runs.len() - 1
        })
    };
    let mut trial_runs = Vec::new();
    for t in &plan.trials {
        let b = want(t.baseline_overrides(), &mut runs);
        let p = want(t.overrides(&m), &mut runs);
        trial_runs.push((b, p));
    }

    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let dir = out.join(&base.name).join(format!("propagate-{stamp}"));
    fsx::create_dir_all(&dir).map_err(|e| CommandError::run_failed(e.to_string()))?;

    // Plans; runs whose resolved values coincide (a condition equal to the scenario's own
    // value) execute once.
    let mut results: Vec<Option<RunResult>> = (0..runs.len()).map(|_| None).collect();
    let mut by_hash: BTreeMap<String, usize> = BTreeMap::new();
    let mut alias: Vec<usize> = (0..runs.len()).collect();
    let mut todo = Vec::new();
    for (i, overrides) in runs.iter().enumerate() {
        let mut args = set.to_vec();
        args.extend(overrides.iter().cloned());
        let s = match crate::spec::load_scenario(scenario, &args) {
            Ok(s) => s,
            Err(e) => {
                let msg = format!(
                    "the scenario does not load with {}: {e}",
                    overrides.join(" ")
                );
                if !plan
                    .trials
                    .iter()
                    .zip(&trial_runs)
                    .any(|(_, (_, p))| *p == i)
                {
                    return Err(CommandError::invalid(msg));
                }
                results[i] = Some(RunResult::Failed(msg));
                continue;
            }
        };
        let run_plan = crate::plan::RunPlan::new(s, None, Some(1));
        if let Some(&first) = by_hash.get(&run_plan.plan_hash) {
            alias[i] = first;
            continue;
        }
        by_hash.insert(run_plan.plan_hash.clone(), i);
        let run_dir = dir.join(format!("{i:03}-{}", slug(&run_label(overrides))));
        todo.push((i, run_plan, run_dir));
    }
    let executed = todo.len();
    let opts = |run_dir: PathBuf| RunOptions {
        out: out.to_path_buf(),
        golden: PathBuf::from("golden"),
        seed: None,
        steps: Some(1),
        set: set.to_vec(),
        update_golden: false,
        hardware: None,
        progress: false,
        ci: true,
        run_dir: Some(run_dir),
    };
    let finished: Vec<(usize, RunResult)> = futures_util::stream::iter(todo)
        .map(|(i, run_plan, run_dir)| {
            let o = opts(run_dir.clone());
            async move {
                let config = run_plan.scenario.config.to_json();
                let r = match runner::execute(run_plan, &o).await {
                    Ok(ex) => match ex.end {
                        RunEnd::Completed => match WireSnapshot::load_run(&ex.run_dir) {
                            Ok(wire) => RunResult::Ran { wire, config },
                            Err(e) => RunResult::Failed(e.to_string()),
                        },
                        end => RunResult::Failed(format!(
                            "{} ({})",
                            end.reason().unwrap_or_else(|| end.status().to_string()),
                            run_dir.display()
                        )),
                    },
                    Err(e) => RunResult::Failed(e.to_string()),
                };
                (i, r)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    for (i, r) in finished {
        results[i] = Some(r);
    }
    let result = |i: usize| results[alias[i]].as_ref();

    // Judge.
    let mut cells: Vec<Vec<verdict::Cell>> = vec![Vec::new(); m.knobs.len()];
    let mut any_failed = false;
    for (t, (b, p)) in plan.trials.iter().zip(&trial_runs) {
        let baseline = match result(*b) {
            Some(RunResult::Ran { wire, .. }) => wire,
            Some(RunResult::Failed(why)) => {
                return Err(CommandError::run_failed(format!(
                    "the baseline run ({}) failed: {why}",
                    run_label(&runs[*b])
                )))
            }
            None => {
                return Err(CommandError::run_failed(
                    "internal: a baseline run has no result",
                ))
            }
        };
        let observed = match result(*p) {
            Some(RunResult::Ran { wire, config }) => Observed::Ran { wire, config },
            Some(RunResult::Failed(why)) => {
                any_failed = true;
                Observed::Failed(why.clone())
            }
            None => Observed::Failed("internal: the run has no result".into()),
        };
        cells[t.knob].push(judge_cell(&m, t, baseline, observed));
    }
    let not_exercised: BTreeMap<usize, &str> = plan
        .not_exercised
        .iter()
        .map(|(i, why)| (*i, why.as_str()))
        .collect();
    let knobs = m
        .knobs
        .iter()
        .zip(cells)
        .enumerate()
        .map(|(i, (k, c))| judge_knob(k, c, not_exercised.get(&i).copied()))
        .collect();
    let report = PropagationReport {
        scenario: base.name.clone(),
        backend: m.backend.clone(),
        runs: executed,
        seconds: started.elapsed().as_secs_f64(),
        knobs,
    };
    Ok((report, dir, any_failed))
}
