//! The event loop of one run: it feeds the observers, watches the step and run time-outs and
//! Ctrl-C, and decides how the run ended. It stops nothing itself; `finish` does.

use std::time::{Duration, Instant};

use super::observe::Observers;
use super::stages::DriverTask;
use super::RunEnd;
use crate::driver::builtin::DriverError;
use crate::driver::command::Trainer;
use crate::events::{EventReceiver, RunEvent};
use crate::proxy::ProxyHandle;

/// How the run's end was decided.
pub(super) struct Driven {
    pub(crate) end: RunEnd,
    /// The loop awaited the driver's task to completion (a JoinHandle is polled only once).
    pub(crate) driver_done: bool,
}

/// What the loop watches besides the events.
pub(super) struct Limits {
    pub(crate) step: Option<Duration>,
    pub(crate) run: Option<Duration>,
}

/// The driver task's result as the run's end.
fn driver_end(
    res: Result<Result<(), DriverError>, tokio::task::JoinError>,
    current_step: u64,
) -> RunEnd {
    match res {
        Ok(Ok(())) => RunEnd::Completed,
        Ok(Err(e)) => RunEnd::Failed {
            reason: e.to_string(),
            step: e.step(),
            route: e.route().map(str::to_string),
        },
        Err(e) => RunEnd::Failed {
            reason: format!("the driver crashed: {e}"),
            step: Some(current_step),
            route: None,
        },
    }
}

/// What happened last, for a hang's reason: the proxy's last request, or the trainer's last
/// line.
fn activity_text(proxy: Option<&ProxyHandle>, trainer: Option<&Trainer>) -> String {
    proxy
        .and_then(|p| p.last_activity())
        .or_else(|| {
            trainer
                .and_then(|t| t.last_line())
                .map(|l| format!("trainer printed `{l}`"))
        })
        .unwrap_or_else(|| "none".into())
}

/// Run the loop until the run's end is decided.
pub(super) async fn drive(
    rx: &mut EventReceiver,
    driver_task: &mut DriverTask,
    observers: &mut Observers<'_>,
    limits: Limits,
    proxy: Option<&ProxyHandle>,
    trainer: Option<&Trainer>,
) -> Driven {
    let run_started = Instant::now();
    let mut last_activity = Instant::now();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let now = Instant::now();
        let step_deadline = limits.step.map(|d| last_activity + d);
        let run_deadline = limits.run.map(|d| run_started + d);
        let deadline = match (step_deadline, run_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = tokio::time::sleep_until(
            deadline
                .unwrap_or(now + Duration::from_secs(3600 * 24 * 365))
                .into(),
        );
        // Events first: a step or a stalled request the driver reported before it ended
        // decides over its exit.
        tokio::select! {
            biased;
            ev = rx.recv() => match ev {
                Some(RunEvent::StepStarted { step, .. }) => observers.current_step = step,
                Some(RunEvent::Step(m)) => {
                    last_activity = Instant::now();
                    if let Some(end) = observers.step(m) {
                        return Driven { end, driver_done: false };
                    }
                }
                Some(RunEvent::Request { route, status, duration_s }) => {
                    last_activity = Instant::now();
                    if let Some(end) = observers.request(&route, status, duration_s) {
                        return Driven { end, driver_done: false };
                    }
                }
                Some(RunEvent::Warning(w)) => tracing::warn!("{w}"),
                None => {
                    // Every sender is gone: the driver ended; its result decides.
                    let end = driver_end((&mut *driver_task).await, observers.current_step);
                    return Driven { end, driver_done: true };
                }
            },
            res = &mut *driver_task => {
                // Keep the metrics the driver sent before it ended.
                while let Ok(ev) = rx.try_recv() {
                    if let RunEvent::Step(m) = ev {
                        observers.late_step(m);
                    }
                }
                let end = driver_end(res, observers.current_step);
                return Driven { end, driver_done: true };
            }
            _ = sleep => {
                let step = observers.current_step;
                let why = if run_deadline.is_some_and(|d| Instant::now() >= d) {
                    format!("run exceeded timeouts.run = {:?}", limits.run.unwrap_or_default())
                } else {
                    format!("no new step within timeouts.step = {:?}", limits.step.unwrap_or_default())
                };
                let reason = format!("hang at step {step} ({why}; last activity: {})", activity_text(proxy, trainer));
                return Driven { end: RunEnd::Hang { reason, step }, driver_done: false };
            }
            _ = &mut ctrl_c => {
                return Driven { end: RunEnd::Interrupted { step: observers.current_step }, driver_done: false };
            }
        }
    }
}
