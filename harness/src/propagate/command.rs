//! `rlharness propagate SCENARIO`: plan the matrix, run it (a bounded number of runs in
//! flight, each through the recording proxy), judge every knob and write the reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures_util::StreamExt;
use serde_json::Value;

use super::group;
use super::manifest::{self, KnobManifest};
use super::render::{self, PropagationReport};
use super::verdict::{self, judge_cell, judge_knob, Observed};
use super::wire::{WireCut, WireSnapshot};
use super::PropagateError;
use crate::fsx;
use crate::runner::{self, RunEnd, RunOptions};

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

impl std::str::FromStr for Until {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Until::Auto),
            "initialize" => Ok(Until::Initialize),
            "first-update" => Ok(Until::FirstUpdate),
            _ => match s.strip_prefix("step:").map(str::parse::<u64>) {
                Some(Ok(n)) if n >= 1 => Ok(Until::Step(n)),
                _ => Err(format!(
                    "`{s}`: expected auto, initialize, first-update or step:N (N >= 1)"
                )),
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
            progress: true,
        }
    }
}

/// The manifest of the scenario's backend: `backends/<trainer.remote_backend>.knobs.yaml`
/// under the scenarios root.
pub(crate) fn manifest_path(scenario: &Path, config: &Value) -> Result<PathBuf, PropagateError> {
    let backend = crate::driver::translate::lookup(config, "trainer.remote_backend")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            PropagateError::Input(format!(
                "{}: config.trainer.remote_backend names no backend, so there is no knob manifest to check",
                scenario.display()
            ))
        })?;
    let root = crate::spec::config::scenarios_root(scenario);
    Ok(root.join("backends").join(format!("{backend}.knobs.yaml")))
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
    crate::util::note!(
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
    scenario: &crate::spec::Scenario,
) -> Result<(), PropagateError> {
    let skip = &scenario.propagate.skip;
    if let Some(bad) = skip
        .keys()
        .find(|k| !full.knobs.iter().any(|knob| &knob.path == *k))
    {
        let hint = crate::spec::error::closest(bad, full.knobs.iter().map(|k| k.path.as_str()))
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(PropagateError::Input(format!(
            "{}: key `propagate.skip.{bad}`: not a knob of the manifest{hint}",
            scenario.path.display(),
        )));
    }
    for (i, knob) in m.knobs.iter().enumerate() {
        if let Some(why) = skip.get(&knob.path) {
            plan.trials.retain(|t| t.knob != i);
            plan.not_exercised.retain(|(k, _)| *k != i);
            plan.skipped.push((i, why.clone()));
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

/// Why a trainer's run shows nothing on the wire, when it cannot: it talks over Ray.
fn over_ray(config: &Value) -> Option<String> {
    let protocol = crate::driver::translate::lookup(config, group::TRANSPORT)?;
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

/// Write `propagation.{md,html,junit.xml,json}` into `dir`; returns the Markdown.
pub fn write_reports(report: &PropagationReport, dir: &Path) -> Result<String, PropagateError> {
    let md = render::markdown(report);
    let junit = render::junit(report)
        .map_err(|e| PropagateError::Report(format!("cannot render the JUnit report: {e}")))?;
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
/// client's `localhost:7000`, the default) runs one trial at a time; one that takes
/// `RLHARNESS_BACKEND_URL` (`proxy_listen` with port 0) runs `jobs` side by side.
pub async fn run_matrix(
    scenario: &Path,
    out: &Path,
    set: &[String],
    options: &MatrixOptions,
) -> Result<(PropagationReport, PathBuf, bool), PropagateError> {
    let started = Instant::now();
    let invalid = |e: crate::spec::SpecErrors| PropagateError::Input(e.to_string());
    let base = crate::spec::load_scenario(scenario, set).map_err(invalid)?;
    let base_config = base.config.to_json();
    let mpath = manifest_path(scenario, &base_config)?;
    let mut m: KnobManifest =
        manifest::load(&mpath).map_err(|e| PropagateError::Input(e.to_string()))?;
    // Unlisted knobs are judged against the whole manifest, whatever `--knobs` tries.
    let full = m.clone();
    select_knobs(&mut m, &options.knobs)?;
    let mut plan = verdict::plan_matrix(&m, &base_config);
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
    crate::util::note!(
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
    let (driver, fixed_port) = describe_driver(&base.driver);
    let command = matches!(base.driver, crate::driver::DriverSpec::Command(_));
    let exec = Executor {
        scenario,
        set,
        options,
        dir: &dir,
        out,
        command,
        experiment: format!("{}-propagate", base.name),
        jobs: if fixed_port { 1 } else { options.jobs.max(1) },
        config: &base_config,
        progress: MatrixProgress::new(&base.name, options.progress),
    };
    let mut rs = RunSet::default();
    let ran = run_units(&exec, &m, &plan, units, &mut rs).await;
    exec.progress.finish();
    let (cells, splits) = ran?;
    let judged = judge_all(&m, &plan, cells);
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
        require_observed: options.require_observed,
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

/// What every run of the matrix shares: where it goes and how far it runs.
struct Executor<'a> {
    scenario: &'a Path,
    set: &'a [String],
    options: &'a MatrixOptions,
    dir: &'a Path,
    out: &'a Path,
    command: bool,
    experiment: String,
    jobs: usize,
    /// The scenario's resolved config (what a knob's conditions read before any run).
    config: &'a Value,
    progress: MatrixProgress,
}

/// The matrix's progress on stderr: a bar on a terminal, one plain line per finished run
/// elsewhere (a CI log, `--no-progress`), nothing under `-q`. The total grows by each round's
/// runs (a split group adds a round).
struct MatrixProgress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    done: std::sync::atomic::AtomicUsize,
    total: std::sync::atomic::AtomicUsize,
}

impl MatrixProgress {
    fn new(scenario: &str, bar: bool) -> Self {
        use std::io::IsTerminal;
        let quiet = crate::util::quiet();
        let bar = (bar && !quiet && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{bar:30}] run {pos}/{len} {wide_msg} ({elapsed})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(format!("propagate {scenario}"));
            b
        });
        MatrixProgress {
            plain: bar.is_none() && !quiet,
            bar,
            done: Default::default(),
            total: Default::default(),
        }
    }

    /// A round of `n` runs starts (`round` from 1).
    fn round(&self, round: usize, n: usize, splits: usize) {
        use std::sync::atomic::Ordering;
        let total = self.total.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
        } else if self.plain && round > 1 {
            eprintln!(
                "propagate: round {round}: {n} more run(s), for {splits} group(s) split so far \
                 that one run could not attribute"
            );
        }
    }

    /// A run's name on the progress line: its overrides, or for a group its size, first
    /// override and folder.
    fn shown(overrides: usize, label: &str, dir: &Path) -> String {
        if overrides <= 2 {
            return label.to_string();
        }
        let first: String = label.chars().take(60).collect();
        let folder = dir.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let number = folder.split('-').next().unwrap_or(folder);
        format!("{overrides} knobs ({first}…; run folder {number}-…)")
    }

    fn finished(&self, label: &str, r: &RunResult, seconds: f64) {
        use std::sync::atomic::Ordering;
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.total.load(Ordering::Relaxed);
        let what = match r {
            RunResult::Ran { .. } => "recorded".to_string(),
            RunResult::NotObservable(_) => "not observable".to_string(),
            RunResult::Failed(e) => {
                let first = e.lines().next().unwrap_or_default();
                format!("FAILED: {}", first.chars().take(120).collect::<String>())
            }
        };
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
            b.set_message(label.to_string());
        } else if self.plain {
            eprintln!("propagate: run {done}/{total} {label}: {what} ({seconds:.1} s)");
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Executor<'_> {
    /// An external trainer keeps the scenario's own horizon (`trainer.total_training_steps`,
    /// from which verl sizes the learning-rate schedule) and is stopped on the wire; the
    /// builtin driver takes its horizon from the config and runs the steps asked for.
    fn stop_at(&self, reach: WireCut) -> Option<runner::StopAt> {
        match (reach, self.command) {
            (WireCut::Initialized, _) => Some(runner::StopAt::Initialized),
            (WireCut::Steps(n), true) => Some(runner::StopAt::Steps(n)),
            (WireCut::Steps(_), false) => None,
        }
    }

    fn run_options(&self, run_dir: PathBuf, reach: WireCut) -> RunOptions {
        let steps = match reach {
            WireCut::Initialized => 1,
            WireCut::Steps(n) => n,
        };
        RunOptions {
            steps: (!self.command).then_some(steps),
            set: self.set.to_vec(),
            run_dir: Some(run_dir),
            stop_at: self.stop_at(reach),
            experiment_name: Some(self.experiment.clone()),
            ..RunOptions::new(self.out.to_path_buf(), PathBuf::from("golden"))
        }
    }

    /// Run `todo` (`jobs` in flight), the plain baseline first and alone when it is among
    /// them: a trainer that cannot run it (broken, or not reaching the wire) would fail every
    /// trial the same way, so the matrix stops there.
    async fn execute(&self, rs: &mut RunSet, mut todo: Vec<Todo>) -> Result<(), PropagateError> {
        let run = |t: Todo| {
            let o = self.run_options(t.dir.clone(), t.reach);
            let stop_at = self.stop_at(t.reach);
            async move {
                let started = Instant::now();
                let r = execute_trial(t.plan, o, &t.label, &t.dir, stop_at, t.reach).await;
                self.progress
                    .finished(&t.shown, &r, started.elapsed().as_secs_f64());
                (t.index, r)
            }
        };
        rs.executed += todo.len();
        if let Some(k) = todo.iter().position(|t| rs.runs[t.index].is_empty()) {
            let (i, r) = run(todo.remove(k)).await;
            if let Err(e) = baseline_wire(self.scenario, &rs.runs[i], &r) {
                let left = todo.len();
                return Err(e.with_note(&format!("the other {left} runs were not started")));
            }
            rs.results[i] = Some(r);
        }
        let finished: Vec<(usize, RunResult)> = futures_util::stream::iter(todo)
            .map(run)
            .buffer_unordered(self.jobs)
            .collect()
            .await;
        for (i, r) in finished {
            rs.results[i] = Some(r);
        }
        Ok(())
    }
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

/// One run to execute: its index in the [`RunSet`], plan, folder and label.
struct Todo {
    index: usize,
    plan: crate::plan::RunPlan,
    dir: PathBuf,
    label: String,
    /// The label as the progress line shows it.
    shown: String,
    reach: WireCut,
}

/// The distinct runs of the matrix by their override sets; a run whose resolved values
/// coincide with an earlier one's (a condition equal to the scenario's own value) is an alias.
#[derive(Default)]
struct RunSet {
    runs: Vec<Vec<String>>,
    baseline: Vec<bool>,
    /// How far each run must go: the furthest its trials need.
    reach: Vec<WireCut>,
    index: BTreeMap<Vec<String>, usize>,
    by_hash: BTreeMap<String, usize>,
    alias: Vec<usize>,
    results: Vec<Option<RunResult>>,
    /// Runs before this index are prepared.
    prepared: usize,
    /// Runs executed (aliases not counted).
    executed: usize,
}

impl RunSet {
    /// The index of the run with these overrides, added when new.
    fn want(&mut self, overrides: Vec<String>, baseline: bool, reach: WireCut) -> usize {
        if let Some(&i) = self.index.get(&overrides) {
            self.baseline[i] |= baseline;
            self.reach[i] = self.reach[i].max(reach);
            return i;
        }
        self.runs.push(overrides.clone());
        self.baseline.push(baseline);
        self.reach.push(reach);
        self.alias.push(self.runs.len() - 1);
        self.results.push(None);
        self.index.insert(overrides, self.runs.len() - 1);
        self.runs.len() - 1
    }

    fn result(&self, i: usize) -> Option<&RunResult> {
        self.results[self.alias[i]].as_ref()
    }

    /// Load the runs added since the last call: a trial the scenario does not load with fails
    /// there (a baseline is an input error); a run whose plan hash was seen is an alias.
    fn prepare(&mut self, exec: &Executor<'_>) -> Result<Vec<Todo>, PropagateError> {
        let mut todo = Vec::new();
        for i in self.prepared..self.runs.len() {
            let overrides = &self.runs[i];
            let mut args = exec.set.to_vec();
            args.extend(overrides.iter().cloned());
            let s = match crate::spec::load_scenario(exec.scenario, &args) {
                Ok(s) => s,
                Err(e) => {
                    let msg = format!(
                        "the scenario does not load with {}: {e}",
                        overrides.join(" ")
                    );
                    if self.baseline[i] {
                        return Err(PropagateError::Input(msg));
                    }
                    self.results[i] = Some(RunResult::Failed(msg));
                    continue;
                }
            };
            let run_plan = match run_plan_for(s, exec.options) {
                Ok(p) => p,
                Err(e) => {
                    let msg = format!(
                        "the run cannot be planned with {}: {e}",
                        overrides.join(" ")
                    );
                    if self.baseline[i] {
                        return Err(PropagateError::Input(msg));
                    }
                    self.results[i] = Some(RunResult::Failed(msg));
                    continue;
                }
            };
            if let Some(&first) = self.by_hash.get(&run_plan.plan_hash) {
                self.alias[i] = first;
                // Not run yet (prepared this round): it goes as far as both need. A run
                // already made is compared over the stretch it has.
                if let Some(t) = todo.iter_mut().find(|t: &&mut Todo| t.index == first) {
                    t.reach = t.reach.max(self.reach[i]);
                }
                continue;
            }
            self.by_hash.insert(run_plan.plan_hash.clone(), i);
            let label = run_label(overrides);
            let dir = exec.dir.join(format!("{i:03}-{}", slug(&label)));
            todo.push(Todo {
                index: i,
                plan: run_plan,
                shown: MatrixProgress::shown(overrides.len(), &label, &dir),
                dir,
                label,
                reach: self.reach[i],
            });
        }
        self.prepared = self.runs.len();
        Ok(todo)
    }
}

/// The plan of one run. The harness passes a command trainer the run's step count as
/// `trainer.total_training_steps`; a trial of that knob must reach the trainer, so the
/// config's value is the count (the trainer is stopped on the wire long before).
fn run_plan_for(
    mut s: crate::spec::Scenario,
    options: &MatrixOptions,
) -> Result<crate::plan::RunPlan, crate::plan::PlanError> {
    let steps = match &s.driver {
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
    crate::plan::RunPlan::new(s, None, steps)
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
    reach: WireCut,
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
            Ok(wire) => RunResult::Ran {
                wire,
                config,
                dir: ex.run_dir.clone(),
                reach,
            },
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
) -> Result<&'a WireSnapshot, PropagateError> {
    match r {
        RunResult::Ran { wire, .. } => Ok(wire),
        RunResult::Failed(why) => Err(PropagateError::Baseline(format!(
            "the baseline run ({}) failed: {why}",
            run_label(overrides)
        ))),
        RunResult::NotObservable(why) => Err(PropagateError::Input(format!(
            "{}: the baseline run ({}) shows nothing to judge: {why}",
            scenario.display(),
            run_label(overrides)
        ))),
    }
}

/// A unit's cells, or why its grouped run cannot be attributed (then it is split). A single
/// trial is judged on its run as it is.
fn judge_unit(
    scenario: &Path,
    m: &KnobManifest,
    plan: &verdict::MatrixPlan,
    unit: &[usize],
    rs: &RunSet,
    run: usize,
) -> Result<Result<Vec<verdict::Cell>, String>, PropagateError> {
    let trials: Vec<&verdict::Trial> = unit.iter().map(|&i| &plan.trials[i]).collect();
    let result = rs.result(run);
    // A baseline that ran further than the trial is compared over the trial's stretch.
    let reach = match result {
        Some(RunResult::Ran { reach, .. }) => Some(*reach),
        _ => None,
    };
    // The trials of a unit share their baseline run (conditions equal to the scenario's own
    // value alias to it): each distinct one is loaded (and cut) once.
    let mut loaded: Vec<(usize, std::borrow::Cow<'_, WireSnapshot>)> = Vec::new();
    let mut baselines = Vec::new();
    for t in &trials {
        let b = rs.index[&t.baseline_overrides()];
        let run_of = rs.alias[b];
        if let Some(k) = loaded.iter().position(|(i, _)| *i == run_of) {
            baselines.push(k);
            continue;
        }
        let Some(r) = rs.result(b) else {
            return Err(PropagateError::Baseline(
                "internal: a baseline run has no result".into(),
            ));
        };
        let wire = baseline_wire(scenario, &rs.runs[b], r)?;
        let wire = match (r, reach) {
            (RunResult::Ran { dir, reach: rb, .. }, Some(rt)) if rt < *rb => {
                let cut = WireSnapshot::load_run_until(dir, Some(rt))
                    .map_err(|e| PropagateError::Baseline(format!("the baseline's wire: {e}")))?;
                std::borrow::Cow::Owned(cut)
            }
            _ => std::borrow::Cow::Borrowed(wire),
        };
        loaded.push((run_of, wire));
        baselines.push(loaded.len() - 1);
    }
    let baselines: Vec<&WireSnapshot> = baselines.iter().map(|&k| &*loaded[k].1).collect();
    if let [t] = trials[..] {
        let observed = match result {
            Some(RunResult::Ran { wire, config, .. }) => Observed::Ran { wire, config },
            Some(RunResult::NotObservable(why)) => Observed::NotObservable(why.clone()),
            Some(RunResult::Failed(why)) => Observed::Failed(why.clone()),
            None => Observed::Failed("internal: the run has no result".into()),
        };
        return Ok(Ok(vec![judge_cell(m, t, baselines[0], observed)]));
    }
    let (wire, config) = match result {
        Some(RunResult::Ran { wire, config, .. }) => (wire, config),
        Some(RunResult::NotObservable(why)) => return Ok(Err(format!("not observable: {why}"))),
        Some(RunResult::Failed(why)) => return Ok(Err(format!("the run failed: {why}"))),
        None => return Ok(Err("the run has no result".into())),
    };
    let views = match group::attribute(m, &trials, baselines[0], wire) {
        Ok(v) => v,
        Err(why) => return Ok(Err(why.0)),
    };
    Ok(Ok(trials
        .iter()
        .zip(&views)
        .zip(&baselines)
        .map(|((t, v), b)| judge_cell(m, t, b, Observed::Ran { wire: v, config }))
        .collect()))
}

/// Every knob's verdict from its trials' cells, matched against the known gaps.
fn judge_all(
    m: &KnobManifest,
    plan: &verdict::MatrixPlan,
    cells: Vec<Option<verdict::Cell>>,
) -> Judged {
    let mut by_knob: Vec<Vec<verdict::Cell>> = vec![Vec::new(); m.knobs.len()];
    let mut any_failed = false;
    for (t, c) in plan.trials.iter().zip(cells) {
        let c = c.unwrap_or_else(|| {
            let f = Observed::Failed("internal: the trial has no result".into());
            judge_cell(m, t, &WireSnapshot::default(), f)
        });
        any_failed |= c.verdict == verdict::CellVerdict::RunFailed;
        by_knob[t.knob].push(c);
    }
    for (i, why) in &plan.skipped {
        by_knob[*i].push(verdict::skipped_cell(why));
    }
    let not_exercised: BTreeMap<usize, &str> = plan
        .not_exercised
        .iter()
        .map(|(i, why)| (*i, why.as_str()))
        .collect();
    let mut knobs: Vec<_> = m
        .knobs
        .iter()
        .zip(by_knob)
        .enumerate()
        .map(|(i, (k, c))| judge_knob(k, c, not_exercised.get(&i).copied()))
        .collect();
    let closed_gaps = verdict::apply_known_gaps(m, &mut knobs);
    Judged {
        knobs,
        closed_gaps,
        any_failed,
    }
}

#[cfg(test)]
mod knob_selection_tests {
    use super::knob_matches;

    #[test]
    fn knob_patterns_name_paths_subtrees_and_single_segments() {
        let k = "remote_backend.train.logits.optimization";
        assert!(knob_matches(k, k));
        assert!(knob_matches("remote_backend.train.logits", k));
        assert!(knob_matches("remote_backend.*.logits", k));
        assert!(!knob_matches("remote_backend.train.logit", k));
        assert!(!knob_matches(
            "remote_backend.train.logits.optimization.x",
            k
        ));
        assert!(!knob_matches("*.zorro_train", k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real-verl scenario's `propagate.skip`: its knobs leave the plan, not exercised with
    /// the scenario's reason; a name that is no knob is refused with a did-you-mean.
    #[test]
    fn a_scenario_skips_knobs_it_cannot_perturb() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let file = root.join("scenarios/verl/real-verl-arctic-grpo.yaml");
        let mut scenario = crate::spec::load_scenario(&file, &[]).unwrap();
        let config = scenario.config.to_json();
        let m = manifest::load(&manifest_path(&file, &config).unwrap()).unwrap();
        let index = |p: &str| m.knobs.iter().position(|k| k.path == p).unwrap();
        let model = index("actor_rollout_ref.model.path");
        let mut plan = verdict::plan_matrix(&m, &config);
        assert!(plan.trials.iter().any(|t| t.knob == model));
        skip_knobs(&mut plan, &m, &m, &scenario).unwrap();
        assert!(!plan.trials.iter().any(|t| t.knob == model));
        let (_, why) = plan.skipped.iter().find(|(k, _)| *k == model).unwrap();
        assert!(why.starts_with("verl loads only"), "{why}");
        // Judged not observable, not flagged.
        let judged = judge_all(&m, &plan, vec![None; plan.trials.len()]);
        let k = &judged.knobs[model];
        assert_eq!(
            (k.verdict, k.flagged),
            (verdict::KnobVerdict::NotObservable, false)
        );
        assert!(k.cells[0]
            .unobservable
            .as_deref()
            .is_some_and(|w| w.starts_with("the scenario skips it: verl loads only")));
        scenario
            .propagate
            .skip
            .insert("actor_rollout_ref.model.pth".into(), "typo".into());
        let e = skip_knobs(&mut plan, &m, &m, &scenario)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `propagate.skip.actor_rollout_ref.model.pth`: not a knob")
                && e.contains("did you mean `actor_rollout_ref.model.path`?"),
            "{e}"
        );
    }

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
