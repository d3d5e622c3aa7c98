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
use super::wire::{WireCut, WireSnapshot};
use crate::error::{CommandError, ExitStatus};
use crate::fsx;
use crate::runner::{self, RunEnd, RunOptions};

/// Runs in flight at once by default: each is a backend, a proxy and a driver (or a trainer
/// process).
pub(crate) const CONCURRENCY: usize = 4;

/// How far each trial runs: the matrix needs the wire up to that point, not a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The JobConfigs: the trainer is stopped at its first request after `/initialize`.
    Initialize,
    /// One whole training step (the default): JobConfigs, generation, the update's `meta`.
    FirstUpdate,
    /// N training steps.
    Step(u64),
}

impl std::str::FromStr for Until {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "initialize" => Ok(Until::Initialize),
            "first-update" => Ok(Until::FirstUpdate),
            _ => match s.strip_prefix("step:").map(str::parse::<u64>) {
                Some(Ok(n)) if n >= 1 => Ok(Until::Step(n)),
                _ => Err(format!(
                    "`{s}`: expected initialize, first-update or step:N (N >= 1)"
                )),
            },
        }
    }
}

impl Until {
    fn steps(self) -> u64 {
        match self {
            Until::Initialize | Until::FirstUpdate => 1,
            Until::Step(n) => n,
        }
    }
    fn describe(self) -> String {
        match self {
            Until::Initialize => "its jobs were initialized (`--until initialize`)".into(),
            Until::FirstUpdate => "its first update (one training step)".into(),
            Until::Step(n) => format!("step {n}"),
        }
    }
}

/// `propagate`'s options besides the scenario.
#[derive(Debug, Clone)]
pub struct MatrixOptions {
    pub until: Until,
    /// Trials side by side (those whose trainer can take a free port; see [`run_matrix`]).
    pub jobs: usize,
}

impl Default for MatrixOptions {
    fn default() -> Self {
        MatrixOptions {
            until: Until::FirstUpdate,
            jobs: CONCURRENCY,
        }
    }
}

/// The manifest of the scenario's backend: `backends/<trainer.remote_backend>.knobs.yaml`
/// under the scenarios root.
pub(crate) fn manifest_path(scenario: &Path, config: &Value) -> Result<PathBuf, CommandError> {
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
    NotObservable(String),
    Failed(String),
}

/// Why a trainer's run shows nothing on the wire, when it cannot: it talks over Ray.
fn over_ray(config: &Value) -> Option<String> {
    let protocol = crate::driver::translate::lookup(config, "remote_backend.comms.protocol")?;
    (protocol.as_str() == Some("ray")).then(|| {
        "not observable over Ray: the trainer's Arctic client talks to the server over Ray, \
         which the recording proxy cannot see; run with remote_backend.comms.protocol=http"
            .to_string()
    })
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
/// `out/<scenario>/propagate-<stamp>/`. Exit: 0 nothing flagged but known gaps, 1 a new flag or
/// a known gap that closed, 2 a bad manifest or scenario, 3 a run failed.
pub(crate) async fn propagate_command(
    scenario: &Path,
    out: &Path,
    set: &[String],
    options: &MatrixOptions,
) -> Result<ExitStatus, CommandError> {
    let (report, dir, failed) = run_matrix(scenario, out, set, options).await?;
    let md = write_reports(&report, &dir)?;
    println!("{md}");
    println!("reports: {}", dir.display());
    let mut status = if report.passed() {
        ExitStatus::Passed
    } else {
        ExitStatus::CheckFailed
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
///
/// Each trial is a run of the scenario itself with one knob perturbed, through its own driver:
/// the builtin driver, or the scenario's trainer command (which gets the perturbed config as
/// Hydra overrides, exactly as `run` passes it), with the recording proxy in front of the
/// backend. A trainer whose proxy address is fixed (the Arctic client's `localhost:7000`, the
/// default) runs one trial at a time; one that takes `RLHARNESS_BACKEND_URL` (`proxy_listen`
/// with port 0) runs `jobs` side by side.
pub async fn run_matrix(
    scenario: &Path,
    out: &Path,
    set: &[String],
    options: &MatrixOptions,
) -> Result<(PropagationReport, PathBuf, bool), CommandError> {
    let started = Instant::now();
    let invalid = |e: crate::spec::SpecErrors| CommandError::invalid(e.to_string());
    let base = crate::spec::load_scenario(scenario, set).map_err(invalid)?;
    let base_config = base.config.to_json();
    let mpath = manifest_path(scenario, &base_config)?;
    let m: KnobManifest =
        manifest::load(&mpath).map_err(|e| CommandError::invalid(e.to_string()))?;
    let plan = verdict::plan_matrix(&m, &base_config);
    let (runs, trial_runs) = distinct_runs(&plan, &m);

    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let dir = out.join(&base.name).join(format!("propagate-{stamp}"));
    fsx::create_dir_all(&dir).map_err(|e| CommandError::run_failed(e.to_string()))?;
    let is_trial = |i: usize| trial_runs.iter().any(|(_, p)| *p == i);
    let mut planned = plan_runs(scenario, set, &runs, is_trial, options, &dir)?;
    let executed = planned.todo.len();
    let (driver, fixed_port) = describe_driver(&base.driver);
    // An external trainer keeps the scenario's own horizon (`trainer.total_training_steps`, from
    // which verl sizes the learning-rate schedule) and is stopped on the wire; the builtin
    // driver takes its horizon from the config and runs the steps asked for.
    let command = matches!(base.driver, crate::driver::DriverSpec::Command(_));
    let stop_at = match (options.until, command) {
        (Until::Initialize, _) => Some(runner::StopAt::Initialized),
        (until, true) => Some(runner::StopAt::Steps(until.steps())),
        (_, false) => None,
    };
    let experiment = format!("{}-propagate", base.name);
    let opts = |run_dir: PathBuf| RunOptions {
        steps: (!command).then_some(options.until.steps()),
        set: set.to_vec(),
        run_dir: Some(run_dir),
        stop_at,
        experiment_name: Some(experiment.clone()),
        ..RunOptions::new(out.to_path_buf(), PathBuf::from("golden"))
    };
    let jobs = if fixed_port { 1 } else { options.jobs.max(1) };
    let run = |(i, run_plan, run_dir): (usize, crate::plan::RunPlan, PathBuf)| {
        let o = opts(run_dir.clone());
        let label = run_label(&runs[i]);
        async move {
            (
                i,
                execute_trial(run_plan, o, &label, &run_dir, stop_at).await,
            )
        }
    };
    // The plain baseline first, alone: a trainer that cannot run it (broken, or not reaching
    // the wire) would fail every trial the same way, so the matrix stops there.
    if let Some(k) = planned.todo.iter().position(|(i, ..)| runs[*i].is_empty()) {
        let (i, r) = run(planned.todo.remove(k)).await;
        if let Err(e) = baseline_wire(scenario, &runs[i], &r) {
            let left = planned.todo.len();
            return Err(CommandError {
                message: format!("{}; the other {left} runs were not started", e.message),
                ..e
            });
        }
        planned.results[i] = Some(r);
    }
    let finished: Vec<(usize, RunResult)> =
        futures_util::stream::iter(std::mem::take(&mut planned.todo))
            .map(run)
            .buffer_unordered(jobs)
            .collect()
            .await;
    for (i, r) in finished {
        planned.results[i] = Some(r);
    }

    let judged = judge_trials(scenario, &m, &plan, &runs, &trial_runs, &planned)?;
    let report = PropagationReport {
        scenario: base.name.clone(),
        backend: m.backend.clone(),
        runs: executed,
        seconds: started.elapsed().as_secs_f64(),
        driver,
        manifest: mpath.display().to_string(),
        until: options.until.describe(),
        knobs: judged.knobs,
        closed_gaps: judged.closed_gaps,
    };
    Ok((report, dir, judged.any_failed))
}

/// Distinct runs by their override sets: baselines (per condition) and trials; and for each
/// trial, the indices of its baseline run and its perturbed run.
fn distinct_runs(
    plan: &verdict::MatrixPlan,
    m: &KnobManifest,
) -> (Vec<Vec<String>>, Vec<(usize, usize)>) {
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
        let p = want(t.overrides(m), &mut runs);
        trial_runs.push((b, p));
    }
    (runs, trial_runs)
}

/// The runs to execute, with their plans and directories; a run whose resolved values
/// coincide with an earlier one's (a condition equal to the scenario's own value) is an alias.
struct PlannedRuns {
    results: Vec<Option<RunResult>>,
    alias: Vec<usize>,
    todo: Vec<(usize, crate::plan::RunPlan, PathBuf)>,
}

fn plan_runs(
    scenario: &Path,
    set: &[String],
    runs: &[Vec<String>],
    is_trial: impl Fn(usize) -> bool,
    options: &MatrixOptions,
    dir: &Path,
) -> Result<PlannedRuns, CommandError> {
    let mut results: Vec<Option<RunResult>> = (0..runs.len()).map(|_| None).collect();
    let mut by_hash: BTreeMap<String, usize> = BTreeMap::new();
    let mut alias: Vec<usize> = (0..runs.len()).collect();
    let mut todo = Vec::new();
    for (i, overrides) in runs.iter().enumerate() {
        let mut args = set.to_vec();
        args.extend(overrides.iter().cloned());
        let mut s = match crate::spec::load_scenario(scenario, &args) {
            Ok(s) => s,
            Err(e) => {
                let msg = format!(
                    "the scenario does not load with {}: {e}",
                    overrides.join(" ")
                );
                if !is_trial(i) {
                    return Err(CommandError::invalid(msg));
                }
                results[i] = Some(RunResult::Failed(msg));
                continue;
            }
        };
        let steps = match &s.driver {
            // The harness passes the run's step count as `trainer.total_training_steps`; a
            // trial of that knob must reach the trainer, so the config's value is the count
            // (the trainer is stopped on the wire long before).
            crate::driver::DriverSpec::Command(_) => {
                if let Some(n) = crate::driver::translate::lookup(
                    &s.config.to_json(),
                    "trainer.total_training_steps",
                )
                .and_then(Value::as_u64)
                .filter(|n| *n >= 1)
                {
                    s.steps = n;
                }
                None
            }
            crate::driver::DriverSpec::Builtin(_) => Some(options.until.steps()),
        };
        let run_plan = crate::plan::RunPlan::new(s, None, steps);
        if let Some(&first) = by_hash.get(&run_plan.plan_hash) {
            alias[i] = first;
            continue;
        }
        by_hash.insert(run_plan.plan_hash.clone(), i);
        let run_dir = dir.join(format!("{i:03}-{}", slug(&run_label(overrides))));
        todo.push((i, run_plan, run_dir));
    }
    Ok(PlannedRuns {
        results,
        alias,
        todo,
    })
}

/// Who drives the trials (for the report), and whether its proxy address is fixed (the Arctic
/// client's `localhost:7000`: one trial at a time).
fn describe_driver(driver: &crate::driver::DriverSpec) -> (String, bool) {
    match driver {
        crate::driver::DriverSpec::Builtin(_) => (
            "the builtin driver (rlharness's own adapter)".to_string(),
            false,
        ),
        crate::driver::DriverSpec::Command(c) => {
            let listen = c
                .proxy_listen
                .clone()
                .unwrap_or_else(|| crate::driver::command::ARCTIC_CLIENT_ADDR.to_string());
            (
                format!("the scenario's trainer `{}`", c.command.join(" ")),
                !listen.ends_with(":0"),
            )
        }
    }
}

/// One trial run, and what its wire shows (cut where a stopped trial was stopped).
async fn execute_trial(
    run_plan: crate::plan::RunPlan,
    o: RunOptions,
    label: &str,
    run_dir: &Path,
    stop_at: Option<runner::StopAt>,
) -> RunResult {
    let cut = match stop_at {
        Some(runner::StopAt::Initialized) => Some(WireCut::Initialized),
        Some(runner::StopAt::Steps(n)) => Some(WireCut::Steps(n)),
        None => None,
    };
    let config = run_plan.scenario.config.to_json();
    let ray = over_ray(&config);
    let tail = |t: &Option<String>| match t {
        Some(t) => format!("; the trainer's last lines:\n{t}"),
        None => String::new(),
    };
    let ex = match runner::execute(run_plan, &o).await {
        Ok(ex) => ex,
        Err(e) => return RunResult::Failed(e.to_string()),
    };
    // A trainer that sent nothing through the proxy: over Ray, or broken.
    let silent = std::fs::metadata(ex.run_dir.join("wire.jsonl")).map_or(true, |m| m.len() == 0);
    match (&ex.end, silent, ray) {
        (_, true, Some(why)) => RunResult::NotObservable(why),
        (_, true, None) => RunResult::Failed(format!(
            "the trainer never reached the wire in the run with {label} ({}, {}){}",
            ex.end
                .reason()
                .unwrap_or_else(|| "it exited cleanly".into()),
            run_dir.display(),
            tail(&ex.trainer_tail)
        )),
        (RunEnd::Completed, false, _) => match WireSnapshot::load_run_until(&ex.run_dir, cut) {
            Ok(wire) => RunResult::Ran { wire, config },
            Err(e) => RunResult::Failed(e.to_string()),
        },
        (end, false, _) => RunResult::Failed(format!(
            "{} ({}){}",
            end.reason().unwrap_or_else(|| end.status().to_string()),
            run_dir.display(),
            tail(&ex.trainer_tail)
        )),
    }
}

/// The knobs' verdicts from the runs' wires.
struct Judged {
    knobs: Vec<verdict::KnobResult>,
    closed_gaps: Vec<String>,
    any_failed: bool,
}

/// A baseline run's wire, or why it leaves nothing to judge against.
fn baseline_wire<'a>(
    scenario: &Path,
    overrides: &[String],
    r: &'a RunResult,
) -> Result<&'a WireSnapshot, CommandError> {
    match r {
        RunResult::Ran { wire, .. } => Ok(wire),
        RunResult::Failed(why) => Err(CommandError::run_failed(format!(
            "the baseline run ({}) failed: {why}",
            run_label(overrides)
        ))),
        RunResult::NotObservable(why) => Err(CommandError::invalid(format!(
            "{}: the baseline run ({}) shows nothing to judge: {why}",
            scenario.display(),
            run_label(overrides)
        ))),
    }
}

fn judge_trials(
    scenario: &Path,
    m: &KnobManifest,
    plan: &verdict::MatrixPlan,
    runs: &[Vec<String>],
    trial_runs: &[(usize, usize)],
    planned: &PlannedRuns,
) -> Result<Judged, CommandError> {
    let result = |i: usize| planned.results[planned.alias[i]].as_ref();
    let mut cells: Vec<Vec<verdict::Cell>> = vec![Vec::new(); m.knobs.len()];
    let mut any_failed = false;
    for (t, (b, p)) in plan.trials.iter().zip(trial_runs) {
        let baseline = match result(*b) {
            Some(r) => baseline_wire(scenario, &runs[*b], r)?,
            None => {
                return Err(CommandError::run_failed(
                    "internal: a baseline run has no result",
                ))
            }
        };
        let observed = match result(*p) {
            Some(RunResult::Ran { wire, config }) => Observed::Ran { wire, config },
            Some(RunResult::NotObservable(why)) => Observed::NotObservable(why.clone()),
            Some(RunResult::Failed(why)) => {
                any_failed = true;
                Observed::Failed(why.clone())
            }
            None => Observed::Failed("internal: the run has no result".into()),
        };
        cells[t.knob].push(judge_cell(m, t, baseline, observed));
    }
    let not_exercised: BTreeMap<usize, &str> = plan
        .not_exercised
        .iter()
        .map(|(i, why)| (*i, why.as_str()))
        .collect();
    let mut knobs: Vec<_> = m
        .knobs
        .iter()
        .zip(cells)
        .enumerate()
        .map(|(i, (k, c))| judge_knob(k, c, not_exercised.get(&i).copied()))
        .collect();
    let closed_gaps = verdict::apply_known_gaps(m, &mut knobs);
    Ok(Judged {
        knobs,
        closed_gaps,
        any_failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_parses_its_three_forms_and_names_the_bad_one() {
        assert_eq!("initialize".parse::<Until>(), Ok(Until::Initialize));
        assert_eq!("first-update".parse::<Until>(), Ok(Until::FirstUpdate));
        assert_eq!("step:3".parse::<Until>(), Ok(Until::Step(3)));
        for bad in ["step:0", "step:x", "forever", ""] {
            let e = bad.parse::<Until>().unwrap_err();
            assert!(e.contains("initialize, first-update or step:N"), "{e}");
        }
        assert_eq!(Until::Step(3).steps(), 3);
        assert_eq!(Until::Initialize.steps(), 1);
    }

    #[test]
    fn ray_transport_is_named_as_unobservable() {
        let ray = serde_json::json!({"remote_backend": {"comms": {"protocol": "ray"}}});
        assert!(over_ray(&ray).unwrap().contains("comms.protocol=http"));
        let http = serde_json::json!({"remote_backend": {"comms": {"protocol": "http"}}});
        assert!(over_ray(&http).is_none());
    }
}
