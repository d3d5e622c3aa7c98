//! The observers of a run's event stream: each finished step goes through the sanity filter,
//! the scenario's suppressions, the progress display, the watchdog (its fail-fast rules judged
//! by the judge the caller hands in, `live`), the CSV sink and the TensorBoard event files, in
//! that order; each request through the proxy goes through the stop-on-purpose tracker and the
//! request time-out check; each weight-sync check is kept for `run.json`. An observer may end the run by returning a `RunEnd`.

use std::io::IsTerminal;
use std::time::Duration;

use super::live::LiveRules;
use super::tensorboard::TensorBoard;
use super::{RunEnd, RunOptions, StopAt};
use crate::model::events::RunEvent;
use crate::model::metrics::{MetricTable, MetricsCsvWriter, StepMetrics};
use crate::model::rundir::WeightSyncRecord;
use crate::run::plan::RunPlan;

/// Every observer of one run, fed by the runner's event loop (`drive`).
pub(super) struct Observers<'a> {
    pub(crate) sanity: Sanity,
    pub(crate) progress: Progress,
    pub(crate) watchdog: Watchdog<'a>,
    pub(crate) csv: MetricsCsvWriter,
    /// The series as TensorBoard event files, when asked for.
    pub(crate) tensorboard: TensorBoard,
    pub(crate) stop_at: StopTracker,
    pub(crate) request_timeout: Duration,
    plan: &'a RunPlan,
    /// The step the driver said it is on (for the reasons of hangs and interrupts).
    pub(crate) current_step: u64,
    /// What the driver's exact check of each weight sync found (`run.json`'s `weight_sync`);
    /// `None` until the driver sends any.
    pub(crate) weight_sync: Option<WeightSyncRecord>,
}

impl<'a> Observers<'a> {
    pub(super) fn new(
        plan: &'a RunPlan,
        opts: &RunOptions,
        hardware: &str,
        csv: MetricsCsvWriter,
        tensorboard: TensorBoard,
        request_timeout: Duration,
    ) -> Self {
        Self {
            sanity: Sanity::default(),
            progress: Progress::new(
                opts.progress_label
                    .as_deref()
                    .unwrap_or(&plan.scenario.name),
                plan.scenario.steps,
                opts,
            ),
            watchdog: Watchdog::new(plan, opts, hardware),
            csv,
            tensorboard,
            stop_at: StopTracker::new(opts.stop_at),
            request_timeout,
            plan,
            current_step: 1,
            weight_sync: None,
        }
    }

    /// One event of the run's stream, to the observers it concerns; `Some` ends the run.
    pub(super) fn observe(&mut self, ev: RunEvent) -> Option<RunEnd> {
        match ev {
            RunEvent::StepStarted { step, .. } => {
                self.current_step = step;
                None
            }
            RunEvent::Step(m) => self.step(m),
            RunEvent::Request {
                route,
                status,
                duration_s,
            } => self.request(&route, status, duration_s),
            RunEvent::Warning(w) => {
                tracing::warn!("{w}");
                None
            }
            RunEvent::WeightSync(c) => {
                self.weight_sync.get_or_insert_with(Default::default).add(c);
                None
            }
            RunEvent::Finished { .. } => {
                self.progress.finish();
                None
            }
        }
    }

    /// A finished step: filtered, shown, watched and written; `Some` ends the run.
    fn step(&mut self, mut m: StepMetrics) -> Option<RunEnd> {
        self.sanity.filter(&mut m);
        self.plan.scenario.metrics.suppress_in(&mut m);
        self.progress.step(&m, self.plan.scenario.steps);
        let step = m.step;
        let watched = self.watchdog.non_finite(&m);
        if let Err(e) = self.csv.push(m) {
            return Some(RunEnd::Failed {
                reason: e.to_string(),
                step: Some(self.current_step),
                route: None,
            });
        }
        self.tensorboard.step(step, self.csv.table());
        watched.or_else(|| {
            self.watchdog
                .settled_failure(self.csv.table(), step, self.plan.scenario.steps)
        })
    }

    /// A step that arrived after the run's end was decided: kept, nothing else.
    pub(super) fn late_step(&mut self, m: StepMetrics) {
        self.progress.step(&m, self.plan.scenario.steps);
        let step = m.step;
        let _ = self.csv.push(m);
        self.tensorboard.step(step, self.csv.table());
    }

    /// An event that arrived after the run's end was decided: its step and its weight-sync
    /// check are kept, the rest is too late to matter.
    pub(super) fn late_event(&mut self, ev: RunEvent) {
        match ev {
            RunEvent::Step(m) => self.late_step(m),
            RunEvent::WeightSync(c) => self.weight_sync.get_or_insert_with(Default::default).add(c),
            _ => {}
        }
    }

    /// A request through the proxy; `Some` ends the run (stopped on purpose, or a hang).
    fn request(&mut self, route: &str, status: u16, duration_s: f64) -> Option<RunEnd> {
        if self.stop_at.see(route, (200..300).contains(&status)) {
            return Some(RunEnd::Completed);
        }
        // The proxy answers 504 itself when the backend stalls past the limit.
        let limit = self.request_timeout;
        (status == 504 && duration_s + 0.05 >= limit.as_secs_f64()).then(|| RunEnd::Hang {
            reason: format!(
                "hang at step {} (a request stalled past timeouts.request = {limit:?}; last \
                 activity: {route})",
                self.current_step
            ),
            step: self.current_step,
        })
    }

    /// The run is over: the progress display goes.
    pub(super) fn finished(&self) {
        self.progress.finish();
    }
}

/// The built-in sanity filter: a value no backend can produce (an MFU outside (0, 1]) is a
/// failed check, never a plotted number. It is dropped from the series and kept here; the judge
/// decides what is insane (`checks::domain::is_insane`) and reads it back from `run.json`.
#[derive(Debug, Default)]
pub(super) struct Sanity {
    /// (step, metric, value) of every dropped value.
    pub(crate) dropped: Vec<(u64, String, f64)>,
}

impl Sanity {
    fn filter(&mut self, m: &mut StepMetrics) {
        for metric in crate::model::checks::domain::FRACTION_METRICS {
            let value = m.get(metric);
            if let Some(v) = value.filter(|v| crate::model::checks::domain::is_insane(metric, *v)) {
                m.values.remove(*metric);
                self.dropped.push((m.step, metric.to_string(), v));
            }
        }
    }
}

/// Where a propagation trial stops on purpose (`RunOptions::stop_at`), read off the wire.
#[derive(Debug)]
pub(super) struct StopTracker {
    at: Option<StopAt>,
    initialized: bool,
    stepped: bool,
    step_starts: u64,
    /// Why the run was stopped, once it was.
    pub(crate) why: Option<String>,
}

impl StopTracker {
    fn new(at: Option<StopAt>) -> Self {
        Self {
            at,
            initialized: false,
            stepped: false,
            step_starts: 0,
            why: None,
        }
    }

    /// One answered request; true when the run has seen what it needs.
    fn see(&mut self, route: &str, ok: bool) -> bool {
        match self.at {
            Some(StopAt::Initialized) => {
                if route == "/initialize" && ok {
                    self.initialized = true;
                } else if self.initialized && route != "/initialize" && route != "/health" {
                    self.why = Some(format!(
                        "stopped on purpose at the first request after the jobs were \
                         initialized ({route})"
                    ));
                }
            }
            Some(StopAt::Steps(n)) => {
                if route == "/step" {
                    self.stepped = true;
                } else if route == "/generate" && self.stepped {
                    self.stepped = false;
                    self.step_starts += 1;
                    if self.step_starts >= n {
                        self.why = Some(format!(
                            "stopped on purpose when step {} began, step {n} done",
                            n + 1
                        ));
                    }
                }
            }
            None => {}
        }
        self.why.is_some()
    }
}

/// Progress: a bar on a terminal, one plain line per step otherwise (CI logs, `--no-progress`),
/// nothing under `-q`.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    name: String,
}

impl Progress {
    pub(super) fn new(name: &str, total: u64, opts: &RunOptions) -> Self {
        let quiet = crate::model::util::quiet();
        let tty = std::io::stderr().is_terminal();
        let bar = (opts.progress && tty && !quiet).then(|| {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{bar:30}] step {pos}/{len} {msg} (ETA {eta})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(name.to_string());
            // Scenarios side by side (`run --jobs`): one bar each, drawn together.
            match crate::model::slot::current_slot().progress {
                Some(group) => group.add(b),
                None => b,
            }
        });
        Self {
            plain: bar.is_none() && opts.step_lines && !quiet,
            bar,
            name: name.to_string(),
        }
    }

    pub(super) fn step(&self, m: &StepMetrics, total: u64) {
        let reward = m.get("critic/rewards/mean");
        let msg = match reward {
            Some(r) => format!("reward {r:.3}"),
            None => String::new(),
        };
        if let Some(b) = &self.bar {
            b.set_position(m.step);
            b.set_message(msg);
        } else if self.plain {
            let mfu = m
                .get("perf/mfu/actor")
                .map(|v| format!(" mfu {v:.3}"))
                .unwrap_or_default();
            errln!("{}: step {}/{} {msg}{mfu}", self.name, m.step, total);
        }
    }

    pub(super) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The watchdog's per-step checks, for every driver: a non-finite value in a watched metric,
/// and fail-fast rules that can no longer pass, as the judge the caller handed in says
/// (`RunOptions::live_judge`; none, no fail-fast).
pub(super) struct Watchdog<'a> {
    plan: &'a RunPlan,
    /// The rules the judge watches live in this run.
    live: Option<Box<dyn LiveRules>>,
}

impl<'a> Watchdog<'a> {
    pub(super) fn new(plan: &'a RunPlan, opts: &RunOptions, hardware: &str) -> Self {
        let live = opts
            .live_judge
            .as_ref()
            .map(|judge| judge.watch(plan, opts, hardware));
        Self { plan, live }
    }

    /// NaN or infinity in a metric of `metrics.watch`: stop at this step.
    fn non_finite(&self, m: &StepMetrics) -> Option<RunEnd> {
        self.plan.scenario.metrics.watch.iter().find_map(|name| {
            let v = m.get(name)?;
            (!v.is_finite()).then(|| RunEnd::Aborted {
                reason: format!(
                    "watched metric {name} is {} at step {}",
                    crate::model::metrics::format_value(v),
                    m.step
                ),
                step: m.step,
            })
        })
    }

    /// Fail fast: the first `fail_fast` rule that the steps so far already fail.
    fn settled_failure(&self, table: &MetricTable, step: u64, total: u64) -> Option<RunEnd> {
        let rule = self.live.as_ref()?.first_settled_failure(table, total)?;
        Some(RunEnd::Aborted {
            reason: format!(
                "fail fast: rule `{rule}` can no longer pass after step {step} of {total}"
            ),
            step,
        })
    }
}
