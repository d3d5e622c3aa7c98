//! The matrix's distinct runs: each planned once by its override set (aliases by plan hash),
//! executed through the recording proxy a bounded number at a time, and what its wire shows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures_util::StreamExt;
use serde_json::Value;

use super::trial::{remote_ended, trial_result, Ended, RemoteTrial, TrialDone, TrialExecutor};
use super::{MatrixOptions, MatrixProgress, RunResult};
use crate::run::runner::{self, RunEnd, RunOptions};
use crate::tools::propagate::observed::{WireCut, WireSnapshot};
use crate::tools::propagate::PropagateError;
use std::sync::{Arc, Mutex};

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

/// What every run of the matrix shares: where it goes and how far it runs.
pub(super) struct Executor<'a> {
    pub(super) scenario: &'a Path,
    pub(super) set: &'a [String],
    pub(super) options: &'a MatrixOptions,
    pub(super) dir: &'a Path,
    pub(super) out: &'a Path,
    pub(super) command: bool,
    pub(super) experiment: String,
    pub(super) jobs: usize,
    /// Each trial's trainer in a network namespace of its own (a fixed address, side by side).
    pub(super) netns: Option<crate::run::netns::Netns>,
    /// The scenario's resolved config (what a knob's conditions read before any run).
    pub(super) config: &'a Value,
    pub(super) progress: Arc<MatrixProgress>,
    /// Where the trials run when not here (`--executor ray`).
    pub(super) remote: Option<&'a dyn TrialExecutor>,
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
            netns: self.netns.clone(),
            live_judge: Some(crate::judge::FailFast::handed()),
            ..RunOptions::new(self.out.to_path_buf(), PathBuf::from("golden"))
        }
    }

    /// Run `todo` (`jobs` in flight), the plain baseline first and alone when it is among
    /// them: a trainer that cannot run it (broken, or not reaching the wire) would fail every
    /// trial the same way, so the matrix stops there.
    pub(super) async fn execute(
        &self,
        rs: &mut RunSet,
        mut todo: Vec<Todo>,
    ) -> Result<(), PropagateError> {
        rs.executed += todo.len();
        if let Some(k) = todo.iter().position(|t| rs.runs[t.index].is_empty()) {
            let finished = self.run_all(vec![todo.remove(k)]).await?;
            for (i, r) in finished {
                if let Err(e) = baseline_wire(self.scenario, &rs.runs[i], &r) {
                    let left = todo.len();
                    return Err(e.with_note(&format!("the other {left} runs were not started")));
                }
                rs.results[i] = Some(r);
            }
        }
        for (i, r) in self.run_all(todo).await? {
            rs.results[i] = Some(r);
        }
        Ok(())
    }

    /// Run `todo`, `jobs` in flight: here, or through the remote executor.
    async fn run_all(&self, todo: Vec<Todo>) -> Result<Vec<(usize, RunResult)>, PropagateError> {
        if let Some(remote) = self.remote {
            return self.run_remote(remote, todo).await;
        }
        let run = |t: Todo| {
            let o = self.run_options(t.dir.clone(), t.reach);
            let stop_at = self.stop_at(t.reach);
            async move {
                let started = Instant::now();
                let r = execute_trial(t.plan, o, &t.label, stop_at, t.reach).await;
                self.progress
                    .finished(&t.shown, &r, started.elapsed().as_secs_f64());
                (t.index, r)
            }
        };
        Ok(futures_util::stream::iter(todo)
            .map(run)
            .buffer_unordered(self.jobs)
            .collect()
            .await)
    }

    /// Run `todo` elsewhere: each trial as `run` takes it (the matrix's `--set` and its
    /// overrides, its steps, stop point and the matrix's experiment name), its run directory
    /// brought back to the folder a local trial uses, and judged from there as a local one.
    async fn run_remote(
        &self,
        remote: &dyn TrialExecutor,
        todo: Vec<Todo>,
    ) -> Result<Vec<(usize, RunResult)>, PropagateError> {
        let trials: Vec<RemoteTrial> = todo
            .iter()
            .map(|t| {
                let o = self.run_options(t.dir.clone(), t.reach);
                let mut set = self.set.to_vec();
                set.extend(t.overrides.iter().cloned());
                RemoteTrial {
                    set,
                    // A command trainer's horizon: the scenario's, as its plan has it.
                    steps: o.steps.or(Some(t.plan.scenario.steps)),
                    stop_at: o.stop_at,
                    experiment_name: self.experiment.clone(),
                    label: t.shown.clone(),
                }
            })
            .collect();
        struct Slot {
            index: usize,
            dir: PathBuf,
            label: String,
            shown: String,
            config: Value,
            stop_at: Option<runner::StopAt>,
            reach: WireCut,
        }
        let slots: Vec<Slot> = todo
            .into_iter()
            .map(|t| Slot {
                index: t.index,
                stop_at: self.stop_at(t.reach),
                config: t.plan.scenario.config.to_json(),
                dir: t.dir,
                label: t.label,
                shown: t.shown,
                reach: t.reach,
            })
            .collect();
        let results: Arc<Mutex<Vec<Option<RunResult>>>> =
            Arc::new(Mutex::new((0..slots.len()).map(|_| None).collect()));
        let slots = Arc::new(slots);
        let done: TrialDone = {
            let (slots, results, progress) =
                (slots.clone(), results.clone(), self.progress.clone());
            Arc::new(move |k, end, seconds| {
                let s = &slots[k];
                let r = match remote_ended(end, &s.dir) {
                    Ok(ended) => {
                        trial_result(ended, s.config.clone(), &s.label, s.stop_at, s.reach)
                    }
                    Err(why) => RunResult::Failed(why.to_string()),
                };
                progress.finished(&s.shown, &r, seconds);
                crate::model::util::lock(&results)[k] = Some(r);
            })
        };
        let collected = self.dir.join("ray");
        remote
            .run(self.scenario, trials, self.jobs, &collected, done)
            .await?;
        // What did not come back into a trial's folder stays where it was collected; the
        // folder itself (the scenario's `latest` links) goes.
        let _ = std::fs::remove_dir_all(&collected);
        let mut results = std::mem::take(&mut *crate::model::util::lock(&results));
        Ok(slots
            .iter()
            .zip(results.iter_mut())
            .map(|(s, r)| {
                let r = r
                    .take()
                    .unwrap_or_else(|| RunResult::Failed("the trial's run did not end".into()));
                (s.index, r)
            })
            .collect())
    }
}

/// One run to execute: its index in the [`RunSet`], plan, folder and label.
pub(super) struct Todo {
    index: usize,
    /// The run's overrides (after the matrix's `--set`).
    overrides: Vec<String>,
    plan: crate::run::plan::RunPlan,
    dir: PathBuf,
    label: String,
    /// The label as the progress line shows it.
    shown: String,
    reach: WireCut,
}

/// The distinct runs of the matrix by their override sets; a run whose resolved values
/// coincide with an earlier one's (a condition equal to the scenario's own value) is an alias.
#[derive(Default)]
pub(super) struct RunSet {
    pub(super) runs: Vec<Vec<String>>,
    pub(super) baseline: Vec<bool>,
    /// How far each run must go: the furthest its trials need.
    pub(super) reach: Vec<WireCut>,
    pub(super) index: BTreeMap<Vec<String>, usize>,
    pub(super) by_hash: BTreeMap<String, usize>,
    pub(super) alias: Vec<usize>,
    pub(super) results: Vec<Option<RunResult>>,
    /// Runs before this index are prepared.
    pub(super) prepared: usize,
    /// Runs executed (aliases not counted).
    pub(super) executed: usize,
}

impl RunSet {
    /// The index of the run with these overrides, added when new.
    pub(super) fn want(&mut self, overrides: Vec<String>, baseline: bool, reach: WireCut) -> usize {
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

    pub(super) fn result(&self, i: usize) -> Option<&RunResult> {
        self.results[self.alias[i]].as_ref()
    }

    /// What the baselines that ran recorded of their trainers' environment.
    pub(super) fn baseline_envs(&self) -> Vec<crate::run::driver::command::envwatch::TrainerEnv> {
        (0..self.runs.len())
            .filter(|&i| self.baseline[i])
            .filter_map(|i| match self.result(i) {
                Some(RunResult::Ran { dir, .. }) => {
                    crate::run::driver::command::envwatch::TrainerEnv::load(dir)
                }
                _ => None,
            })
            .collect()
    }

    /// Load the runs added since the last call: a trial the scenario does not load with fails
    /// there (a baseline is an input error); a run whose plan hash was seen is an alias.
    pub(super) fn prepare(&mut self, exec: &Executor<'_>) -> Result<Vec<Todo>, PropagateError> {
        let mut todo = Vec::new();
        for i in self.prepared..self.runs.len() {
            let overrides = &self.runs[i];
            let mut args = exec.set.to_vec();
            args.extend(overrides.iter().cloned());
            let s = match crate::run::plan::load_checked(exec.scenario, &args) {
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
                overrides: overrides.clone(),
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
    mut s: crate::scenario::Scenario,
    options: &MatrixOptions,
) -> Result<crate::run::plan::RunPlan, crate::run::plan::PlanError> {
    let steps = match &s.driver {
        crate::run::driver::DriverSpec::Command(_) => {
            if let Some(n) =
                crate::run::knobs::lookup(&s.config.to_json(), "trainer.total_training_steps")
                    .and_then(Value::as_u64)
                    .filter(|n| *n >= 1)
            {
                s.steps = n;
            }
            None
        }
        crate::run::driver::DriverSpec::Builtin(_) => Some(options.until.steps()),
    };
    crate::run::plan::RunPlan::new(s, None, steps)
}

/// The driver, as the report names it.
pub(super) fn describe_driver(driver: &crate::run::driver::DriverSpec) -> String {
    match driver {
        crate::run::driver::DriverSpec::Builtin(_) => {
            "the builtin driver (rlharness's own adapter)".to_string()
        }
        crate::run::driver::DriverSpec::Command(c) => {
            format!("the scenario's trainer `{}`", c.command.join(" "))
        }
    }
}

/// One trial run here, and what its wire shows (cut where a stopped trial was stopped).
async fn execute_trial(
    run_plan: crate::run::plan::RunPlan,
    o: RunOptions,
    label: &str,
    stop_at: Option<runner::StopAt>,
    reach: WireCut,
) -> RunResult {
    let config = run_plan.scenario.config.to_json();
    let ex = match runner::execute(run_plan, &o).await {
        Ok(ex) => ex,
        Err(e) => return RunResult::Failed(e.to_string()),
    };
    let ended = Ended {
        completed: ex.end == RunEnd::Completed,
        status: ex.end.status().to_string(),
        reason: ex.end.reason(),
        trainer_tail: ex.trainer_tail.clone(),
        run_dir: ex.run_dir.clone(),
    };
    trial_result(ended, config, label, stop_at, reach)
}

/// A baseline run's wire, or why it leaves nothing to judge against.
pub(super) fn baseline_wire<'a>(
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
