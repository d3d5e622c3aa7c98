//! `rlharness propagate SCENARIO`: plan the matrix, run it (a bounded number of runs in
//! flight, each through the recording proxy), judge every knob and write the reports.
//!
//! `runs` plans and executes the distinct runs (`progress` shows them), `judge` turns their
//! wires into cells and verdicts; the rounds that split unattributable groups are here.

mod cells;
mod progress;
mod runs;
mod trial;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;

use super::group;
use super::knob_manifest::{self, KnobManifest};
use super::observed::{WireCut, WireSnapshot};
use super::render::{self, PropagationReport};
use super::verdict;
use super::PropagateError;
use cells::{judge_all, judge_unit};
use progress::MatrixProgress;
use rlharness_arctic::fsx;
use runs::{describe_driver, Executor, RunSet};
pub(crate) use trial::{RemoteEnd, RemoteError, RemoteTrial, TrialDone, TrialExecutor};

/// Runs in flight at once by default: each is a backend, a proxy and a driver (or a trainer
/// process).
pub(crate) const CONCURRENCY: usize = 4;

/// How far each trial runs: the matrix needs the wire up to that point, not a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Each run as far as its knobs need: to the jobs' initialization when every reader of its
    /// knobs (under its condition) is in a JobConfig, else to its first update. A baseline runs
    /// as far as the furthest of its trials, and is compared over the trial's stretch.
    Auto,
    /// The JobConfigs: the trainer is stopped at its first request after `/initialize`.
    Initialize,
    /// One whole training step (the default): JobConfigs, generation, the update's `meta`.
    FirstUpdate,
    /// N training steps.
    Step(u64),
}

/// A `--until` that names no stopping point.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("`{0}`: expected auto, initialize, first-update or step:N (N >= 1)")]
pub struct UnknownUntil(String);

impl std::str::FromStr for Until {
    type Err = UnknownUntil;
    fn from_str(s: &str) -> Result<Self, UnknownUntil> {
        match s {
            "auto" => Ok(Until::Auto),
            "initialize" => Ok(Until::Initialize),
            "first-update" => Ok(Until::FirstUpdate),
            _ => match s.strip_prefix("step:").map(str::parse::<u64>) {
                Some(Ok(n)) if n >= 1 => Ok(Until::Step(n)),
                _ => Err(UnknownUntil(s.to_string())),
            },
        }
    }
}

impl Until {
    fn steps(self) -> u64 {
        match self {
            Until::Auto | Until::Initialize | Until::FirstUpdate => 1,
            Until::Step(n) => n,
        }
    }
    /// How far a run of knobs goes: `jobs_only` when every reader of its knobs is in a
    /// JobConfig (only `auto` looks). `reach(true)` is the least any run goes: the plain
    /// baseline's before its trials add theirs.
    fn reach(self, jobs_only: bool) -> WireCut {
        match self {
            Until::Auto if jobs_only => WireCut::Initialized,
            Until::Initialize => WireCut::Initialized,
            Until::Auto | Until::FirstUpdate => WireCut::Steps(1),
            Until::Step(n) => WireCut::Steps(n),
        }
    }
    fn describe(self) -> String {
        match self {
            Until::Auto => "its jobs were initialized where every reader of its knobs is in a \
                            JobConfig, else its first update (`--until auto`)"
                .into(),
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
    /// Perturb knobs whose wire locations cannot overlap in one run (on by default).
    pub group: bool,
    /// Fail (exit 1) when any knob is not observed (not observable here, not exercised).
    pub require_observed: bool,
    /// Only the knobs these patterns name (`--knobs`); empty: every knob of the manifest.
    pub knobs: Vec<String>,
    /// Only the trials under these condition values (`--condition KEY=VALUE`); knobs without
    /// such a condition are tried as usual.
    pub conditions: Vec<String>,
    /// A progress bar on a terminal (`--no-progress`: one plain line per finished run).
    pub progress: bool,
}

impl Default for MatrixOptions {
    fn default() -> Self {
        MatrixOptions {
            until: Until::FirstUpdate,
            jobs: CONCURRENCY,
            group: true,
            require_observed: false,
            knobs: Vec::new(),
            conditions: Vec::new(),
            progress: true,
        }
    }
}

/// The manifest of the scenario's backend and the name it goes by:
/// `backends/<trainer.remote_backend>.knobs.yaml` under the scenarios root, else (Arctic) the
/// copy built into the binary.
pub(crate) fn manifest_for(
    scenario: &Path,
    config: &Value,
) -> Result<(KnobManifest, PathBuf), PropagateError> {
    let backend = crate::run::knobs::lookup(config, "trainer.remote_backend")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            PropagateError::Input(format!(
                "{}: config.trainer.remote_backend names no backend, so there is no knob manifest to check",
                scenario.display()
            ))
        })?;
    let root = crate::scenario::config::scenarios_root(scenario);
    knob_manifest::for_backend(&root, backend).map_err(|e| PropagateError::Input(e.to_string()))
}

/// Whether knob `path` is named by `pattern`: the same segments, or a prefix of them (the
/// subtree); `*` matches any one segment.
fn knob_matches(pattern: &str, path: &str) -> bool {
    let (p, k): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), path.split('.').collect());
    p.len() <= k.len() && p.iter().zip(&k).all(|(a, b)| *a == "*" || a == b)
}

/// Keep only the knobs `patterns` name (all when there are none); a pattern that names no knob
/// is an input error listing the knobs there are.
fn select_knobs(m: &mut KnobManifest, patterns: &[String]) -> Result<(), PropagateError> {
    if patterns.is_empty() {
        return Ok(());
    }
    if let Some(p) = patterns
        .iter()
        .find(|p| !m.knobs.iter().any(|k| knob_matches(p, &k.path)))
    {
        let all: Vec<&str> = m.knobs.iter().map(|k| k.path.as_str()).collect();
        return Err(PropagateError::Input(format!(
            "--knobs {p}: no knob of the manifest matches; its knobs: {}",
            all.join(", ")
        )));
    }
    let before = m.knobs.len();
    m.knobs
        .retain(|k| patterns.iter().any(|p| knob_matches(p, &k.path)));
    crate::model::util::note!(
        "propagate: --knobs keeps {} of the manifest's {before} knobs",
        m.knobs.len()
    );
    Ok(())
}

/// Leave out the knobs the scenario's `propagate.skip` names: each is judged not observable
/// here, with the scenario's reason (unobserved: a failure only under `--require-observed`).
/// A name that is no knob of the manifest is an input error.
fn skip_knobs(
    plan: &mut verdict::MatrixPlan,
    m: &KnobManifest,
    full: &KnobManifest,
    scenario: &crate::scenario::Scenario,
) -> Result<(), PropagateError> {
    let skip = &scenario.propagate.skip;
    if let Some(bad) = skip
        .keys()
        .find(|k| !full.knobs.iter().any(|knob| &knob.path == *k))
    {
        let hint = crate::scenario::error::closest(bad, full.knobs.iter().map(|k| k.path.as_str()))
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(PropagateError::Input(format!(
            "{}: key `propagate.skip.{bad}`: not a knob of the manifest{hint}",
            scenario.path.display(),
        )));
    }
    let command = matches!(scenario.driver, crate::run::driver::DriverSpec::Command(_));
    for (i, knob) in m.knobs.iter().enumerate() {
        let why = skip.get(&knob.path).cloned().or_else(|| {
            (!command && knob.path.starts_with(verdict::ENV_PREFIX)).then(|| {
                "an environment knob reaches a command driver's trainer processes; this \
                 scenario's driver starts none"
                    .to_string()
            })
        });
        if let Some(why) = why {
            plan.trials.retain(|t| t.knob != i);
            plan.not_exercised.retain(|(k, _)| *k != i);
            plan.skipped.push((i, why));
        }
    }
    Ok(())
}

/// What one distinct run ended as.
enum RunResult {
    Ran {
        wire: WireSnapshot,
        config: Value,
        /// The run's folder (the trainer's `stdout.log`).
        dir: PathBuf,
        /// How far it ran: its wire holds this stretch.
        reach: WireCut,
    },
    NotObservable(String),
    Failed(String),
}

/// Write `propagation.{md,html,junit.xml,json}` into `dir`; returns the Markdown.
pub fn write_reports(report: &PropagationReport, dir: &Path) -> Result<String, PropagateError> {
    let md = render::markdown(report);
    let junit = render::junit(report);
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| PropagateError::Report(format!("cannot serialise the matrix: {e}")))?;
    let write = |name: &str, bytes: &[u8]| fsx::write_atomic(&dir.join(name), bytes);
    write("propagation.md", md.as_bytes())?;
    write("propagation.html", render::html(report).as_bytes())?;
    write("propagation.junit.xml", junit.as_bytes())?;
    write("propagation.json", json.as_bytes())?;
    Ok(md)
}

/// Plan, run and judge; returns the report, its folder and whether any perturbed run failed.
///
/// Each trial is a run of the scenario itself with knobs perturbed, through its own driver:
/// the builtin driver, or the scenario's trainer command (which gets the perturbed config as
/// Hydra overrides, exactly as `run` passes it), with the recording proxy in front of the
/// backend. With `options.group`, knobs whose wire locations cannot overlap share a run (see
/// [`super::group`]); a run that cannot be attributed is split and run again, so the verdicts
/// are those of one knob per trial. A trainer whose proxy address is fixed (the Arctic
/// client's `localhost:7000`, the default) runs `jobs` side by side where each trial can get a
/// network namespace of its own (netns.rs), else one at a time; one that takes
/// `RLHARNESS_BACKEND_URL` (`proxy_listen` with port 0) runs `jobs` side by side.
pub async fn run_matrix(
    scenario: &Path,
    out: &Path,
    set: &[String],
    options: &MatrixOptions,
) -> Result<(PropagationReport, PathBuf, bool), PropagateError> {
    run_matrix_on(scenario, out, set, options, None).await
}

/// [`run_matrix`], each trial run through `remote` when given (`--executor ray`) instead of
/// here: the same plan, rounds, splits and judging, from the run directories it brings back.
pub(crate) async fn run_matrix_on(
    scenario: &Path,
    out: &Path,
    set: &[String],
    options: &MatrixOptions,
    remote: Option<&dyn TrialExecutor>,
) -> Result<(PropagationReport, PathBuf, bool), PropagateError> {
    let started = Instant::now();
    let invalid = |e: crate::scenario::SpecErrors| PropagateError::Input(e.to_string());
    let base = crate::run::plan::load_checked(scenario, set).map_err(invalid)?;
    let base_config = base.config.to_json();
    let (mut m, mpath) = manifest_for(scenario, &base_config)?;
    // Unlisted and unaccounted knobs are judged against the whole manifest, whatever `--knobs`
    // tries.
    let full = m.clone();
    let unaccounted = super::accounted::unaccounted(&full, &base);
    select_knobs(&mut m, &options.knobs)?;
    let mut plan = verdict::plan_matrix(&m, &base_config);
    options
        .conditions
        .iter()
        .map(|c| verdict::parse_condition(c))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|only| verdict::keep_conditions(&mut plan, &m, &only))?;
    skip_knobs(&mut plan, &m, &full, &base)?;
    let units = group::plan_units(&m, &plan, &base_config, options.group);
    let counts = plan_counts(&m, &plan, &units, &base_config);
    tracing::info!(
        solo = counts.0,
        grouped = counts.1,
        "propagate: the plan needs {} runs one knob per trial, {} with grouping{}",
        counts.0,
        counts.1,
        if options.group {
            ""
        } else {
            " (grouping off: --no-group)"
        }
    );
    let alone: Vec<String> = group::alone_counts(&m, &plan)
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    crate::model::util::note!(
        "propagate: {} trials; the plan needs up to {} runs one knob per trial, {} with \
         grouping (before any split; trials that run alone: {}){}",
        plan.trials.len(),
        counts.0,
        counts.1,
        alone.join(", "),
        if options.group {
            ""
        } else {
            "; grouping is off (--no-group)"
        }
    );

    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let dir = out.join(&base.name).join(format!("propagate-{stamp}"));
    fsx::create_dir_all(&dir)?;
    let driver = describe_driver(&base.driver);
    let (jobs, netns) = match remote {
        // A Ray worker may hold several jobs: a trainer on a fixed address goes one at a time.
        Some(_) if crate::run::netns::fixed_address(&base).is_some() => (1, None),
        Some(_) => (options.jobs.max(1), None),
        None => crate::run::netns::for_scenario(&base, options.jobs, "propagate"),
    };
    let command = matches!(base.driver, crate::run::driver::DriverSpec::Command(_));
    // Every run of the matrix, baselines too, records the environment knobs' values in the
    // trainer's processes: a trial is compared with a baseline that watched the same names.
    let watched: Vec<&str> = m
        .knobs
        .iter()
        .filter_map(|k| k.path.strip_prefix(verdict::ENV_PREFIX))
        .collect();
    let mut set = set.to_vec();
    if command && !watched.is_empty() {
        set.push(format!("++driver.watch_env=[{}]", watched.join(", ")));
    }
    let exec = Executor {
        scenario,
        set: &set,
        options,
        dir: &dir,
        out,
        command,
        experiment: format!("{}-propagate", base.name),
        jobs,
        netns,
        config: &base_config,
        progress: std::sync::Arc::new(MatrixProgress::new(&base.name, options.progress)),
        remote,
    };
    let mut rs = RunSet::default();
    let ran = run_units(&exec, &m, &plan, units, &mut rs).await;
    exec.progress.finish();
    let (cells, splits) = ran?;
    let judged = judge_all(&m, &plan, cells);
    let environment = super::environ::for_matrix(&base, &full, &rs.baseline_envs());
    let resolved = resolved_config(&rs, command, &base_config);
    let mut unlisted = super::resolved::unlisted(&full, resolved);
    let mut closed_gaps = judged.closed_gaps;
    closed_gaps.extend(super::resolved::apply_unlisted_gaps(&full, &mut unlisted));
    let report = PropagationReport {
        scenario: base.name.clone(),
        backend: m.backend.clone(),
        runs: rs.executed,
        seconds: started.elapsed().as_secs_f64(),
        driver,
        manifest: mpath.display().to_string(),
        until: describe_reach(options.until, &rs),
        knobs: judged.knobs,
        closed_gaps,
        grouping: options.group,
        planned_solo: counts.0,
        planned_grouped: counts.1,
        splits,
        unlisted,
        unaccounted,
        require_observed: options.require_observed,
        environment,
    };
    Ok((report, dir, judged.any_failed))
}

/// How far the trials ran, for the report: with `auto`, how many stopped at the jobs'
/// initialization.
fn describe_reach(until: Until, rs: &RunSet) -> String {
    if until != Until::Auto {
        return until.describe();
    }
    let reaches: Vec<WireCut> = rs
        .results
        .iter()
        .flatten()
        .filter_map(|r| match r {
            RunResult::Ran { reach, .. } => Some(*reach),
            _ => None,
        })
        .collect();
    let n = reaches.len();
    let early = reaches
        .iter()
        .filter(|r| **r == WireCut::Initialized)
        .count();
    format!(
        "{} ({early} of {n} runs stopped at the jobs' initialization)",
        until.describe()
    )
}

/// Runs the plan needs (distinct override sets, conditions equal to the scenario's own value
/// dropped as the runs' plan hashes would): one knob per trial, and as `units` packs them.
fn plan_counts(
    m: &KnobManifest,
    plan: &verdict::MatrixPlan,
    units: &[group::Unit],
    config: &Value,
) -> (usize, usize) {
    let norm = |cond: &verdict::Condition, knobs: Vec<String>| {
        let mut o = verdict::condition_overrides(&group::effective(cond, config));
        o.extend(knobs);
        o.sort();
        o
    };
    let knob =
        |t: &verdict::Trial| format!("{}={}", m.knobs[t.knob].path, verdict::set_value(&t.value));
    let mut solo: std::collections::BTreeSet<Vec<String>> = Default::default();
    let mut grouped = solo.clone();
    for t in &plan.trials {
        solo.insert(norm(&t.condition, vec![]));
        solo.insert(norm(&t.condition, vec![knob(t)]));
        grouped.insert(norm(&t.condition, vec![]));
    }
    for u in units {
        let t0 = &plan.trials[u[0]];
        grouped.insert(norm(
            &t0.condition,
            u.iter().map(|&i| knob(&plan.trials[i])).collect(),
        ));
    }
    (solo.len(), grouped.len())
}

/// The trainer's resolved config: the plain baseline's printed config (a command trainer), the
/// scenario's own (the builtin driver), with where it was seen.
fn resolved_config(rs: &RunSet, command: bool, config: &Value) -> Option<(Value, String)> {
    if !command {
        return Some((
            config.clone(),
            "the scenario's config (the builtin driver resolves nothing further)".into(),
        ));
    }
    let i = rs.index.get(&Vec::new())?;
    let Some(RunResult::Ran { dir, .. }) = rs.result(*i) else {
        return None;
    };
    let path = dir.join("stdout.log");
    let text = std::fs::read_to_string(&path).ok()?;
    let v = super::resolved::find_resolved_config(&text)?;
    Some((
        v,
        format!("the baseline trainer's printed config ({})", path.display()),
    ))
}

/// Run the units round by round: each round runs the baselines and units not run yet, judges
/// them, and splits the groups it cannot attribute into the next round. Returns each trial's
/// cell and how many groups were split.
async fn run_units(
    exec: &Executor<'_>,
    m: &KnobManifest,
    plan: &verdict::MatrixPlan,
    mut pending: Vec<group::Unit>,
    rs: &mut RunSet,
) -> Result<(Vec<Option<verdict::Cell>>, usize), PropagateError> {
    let mut cells: Vec<Option<verdict::Cell>> = vec![None; plan.trials.len()];
    let mut splits = 0;
    if exec.options.until == Until::Initialize {
        // A run cut after initialization shows only the JobConfigs and the server's start-up
        // flags: a trial whose knob is read later (a per-call `meta`, a `/generate` parameter,
        // the sleep/wake calls) has nothing to show there.
        // Judged not observable, with the way to see it, rather than flagged as a knob that
        // reached nothing.
        for u in &mut pending {
            u.retain(|&t| {
                let trial = &plan.trials[t];
                if !verdict::read_past_initialization(m, trial, exec.config) {
                    return true;
                }
                cells[t] = Some(verdict::not_observable(
                    trial,
                    "a reader of this knob is past initialization (a per-call `meta` or a \
                     request's parameters), and `--until initialize` stops the run before it; \
                     `--until auto` or `first-update` runs far enough"
                        .into(),
                ));
                false
            });
        }
        pending.retain(|u| !u.is_empty());
    }
    // The plain baseline is always run (first, alone): its trainer prints the resolved config.
    rs.want(Vec::new(), true, exec.options.until.reach(true));
    let mut round = 0;
    while round == 0 || !pending.is_empty() {
        round += 1;
        let mut unit_runs = Vec::new();
        for u in &pending {
            let trials: Vec<&verdict::Trial> = u.iter().map(|&t| &plan.trials[t]).collect();
            let jobs_only = verdict::read_only_in_jobs(m, &trials, exec.config);
            let reach = exec.options.until.reach(jobs_only);
            for t in &trials {
                rs.want(t.baseline_overrides(), true, reach);
            }
            unit_runs.push(rs.want(group::unit_overrides(m, plan, u), false, reach));
        }
        let todo = rs.prepare(exec)?;
        exec.progress.round(round, todo.len(), splits);
        exec.execute(rs, todo).await?;
        let mut next = Vec::new();
        for (u, run) in pending.iter().zip(unit_runs) {
            match judge_unit(exec.scenario, m, plan, u, rs, run)? {
                Ok(judged) => {
                    for (t, c) in u.iter().zip(judged) {
                        cells[*t] = Some(c);
                    }
                }
                Err(why) => {
                    splits += 1;
                    tracing::info!("a group of {} knobs is split: {why}", u.len());
                    let (a, b) = group::split(u);
                    next.push(a);
                    next.push(b);
                }
            }
        }
        pending = next;
    }
    if exec.options.until == Until::Initialize {
        // Nothing of the knob in the JobConfigs or the start-up flags: it may still travel in
        // a later call's `meta`, which the cut run never reaches. Not a finding at this reach.
        for (t, c) in cells.iter_mut().enumerate() {
            if c.as_ref()
                .is_some_and(|c| c.verdict == verdict::CellVerdict::NotSent)
            {
                *c = Some(verdict::not_observable(
                    &plan.trials[t],
                    "nothing of it is in the JobConfigs or the server's start-up flags, and \
                     `--until initialize` stops the run before any later call could carry it; \
                     `--until auto` or `first-update` runs far enough"
                        .into(),
                ));
            }
        }
    }
    Ok((cells, splits))
}

#[cfg(test)]
mod tests;
