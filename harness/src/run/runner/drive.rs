//! The event loop of one run: it feeds the observers, watches the step and run time-outs and
//! Ctrl-C, and decides how the run ended. It stops nothing itself; `finish` does.

use std::time::Duration;

use tokio::time::Instant;

use super::observe::Observers;
use super::stages::DriverTask;
use super::RunEnd;
use crate::model::events::{EventReceiver, RunEvent};
use crate::run::driver::builtin::DriverError;
use crate::run::driver::command::Trainer;
use crate::run::proxy::ProxyHandle;

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
    let stop = crate::model::util::stop_signal();
    tokio::pin!(stop);
    loop {
        let now = Instant::now();
        let step_deadline = limits.step.map(|d| last_activity + d);
        let run_deadline = limits.run.map(|d| run_started + d);
        let deadline = match (step_deadline, run_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = tokio::time::sleep_until(
            deadline.unwrap_or(now + Duration::from_secs(3600 * 24 * 365)),
        );
        // Events first: a step or a stalled request the driver reported before it ended
        // decides over its exit.
        tokio::select! {
            biased;
            ev = rx.recv() => match ev {
                Some(ev @ RunEvent::Finished { .. }) => {
                    // The driver's last word: its result decides (its task ends next).
                    observers.observe(ev);
                    let end = driver_end((&mut *driver_task).await, observers.current_step);
                    return Driven { end, driver_done: true };
                }
                Some(ev) => {
                    if matches!(ev, RunEvent::Step(_) | RunEvent::Request { .. }) {
                        last_activity = Instant::now();
                    }
                    if let Some(end) = observers.observe(ev) {
                        return Driven { end, driver_done: false };
                    }
                }
                None => {
                    // Every sender is gone: the driver ended; its result decides.
                    let end = driver_end((&mut *driver_task).await, observers.current_step);
                    return Driven { end, driver_done: true };
                }
            },
            res = &mut *driver_task => {
                // Keep the metrics the driver sent before it ended.
                while let Ok(ev) = rx.try_recv() {
                    observers.late_event(ev);
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
            signal = &mut stop => {
                return Driven { end: RunEnd::Interrupted { step: observers.current_step, signal }, driver_done: false };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The loop's time-outs on tokio's paused clock: a minute of silence or a run limit takes no
    //! wall time, and the elapsed (virtual) time is exact.
    use super::*;
    use crate::model::events::{channel, EventSender};
    use crate::model::metrics::{MetricsCsvWriter, StepMetrics};
    use crate::run::plan::RunPlan;
    use crate::run::runner::RunOptions;

    /// Drive the smoke scenario's plan with `driver` (given the event sender) under `limits`;
    /// how the run ended and how much (virtual) time it took.
    async fn drive_with(
        driver: impl FnOnce(EventSender) -> DriverTask,
        limits: Limits,
    ) -> (RunEnd, Duration) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/smoke/mock-gsm8k-grpo.yaml");
        let plan = RunPlan::new(
            crate::scenario::load_scenario(&path, &[]).unwrap(),
            None,
            None,
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let opts = RunOptions::new(dir.path().into(), dir.path().into());
        let csv = MetricsCsvWriter::create(&dir.path().join("metrics.csv")).unwrap();
        let mut observers = Observers::new(
            &plan,
            &opts,
            "test",
            csv,
            Default::default(),
            Duration::from_secs(600),
        );
        let (tx, mut rx) = channel();
        let mut task = driver(tx);
        let started = Instant::now();
        let driven = drive(&mut rx, &mut task, &mut observers, limits, None, None).await;
        (driven.end, started.elapsed())
    }

    fn limits(step_s: u64, run_s: u64) -> Limits {
        Limits {
            step: Some(Duration::from_secs(step_s)),
            run: Some(Duration::from_secs(run_s)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_driver_is_a_hang_at_the_step_limit() {
        let (end, took) = drive_with(
            |tx| {
                tokio::spawn(async move {
                    let _tx = tx;
                    std::future::pending::<()>().await;
                    Ok(())
                })
            },
            limits(60, 3600),
        )
        .await;
        let RunEnd::Hang { reason, step } = end else {
            panic!("{end:?}")
        };
        assert_eq!(step, 1);
        assert!(
            reason.starts_with("hang at step 1 (no new step within timeouts.step = 60s; "),
            "{reason}"
        );
        assert_eq!(took, Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn steps_that_keep_coming_end_at_the_run_limit() {
        let (end, took) = drive_with(
            |tx| {
                tokio::spawn(async move {
                    for step in 1.. {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        let _ = tx.send(RunEvent::StepStarted { step, total: 100 });
                        let _ = tx.send(RunEvent::Step(StepMetrics::new(step)));
                    }
                    Ok(())
                })
            },
            limits(60, 100),
        )
        .await;
        let RunEnd::Hang { reason, step } = end else {
            panic!("{end:?}")
        };
        // Steps at 30, 60 and 90 s kept the step limit away; the run limit ended it at 100 s.
        assert_eq!(step, 3);
        assert!(
            reason.contains("(run exceeded timeouts.run = 100s; "),
            "{reason}"
        );
        assert_eq!(took, Duration::from_secs(100));
    }

    #[tokio::test(start_paused = true)]
    async fn finished_ends_the_run_with_the_driver_result() {
        for (result, completed) in [(Ok(()), true), (Err("teardown failed"), false)] {
            let (end, took) = drive_with(
                |tx| {
                    tokio::spawn(async move {
                        let _ = tx.send(RunEvent::Step(StepMetrics::new(1)));
                        let _ = tx.send(RunEvent::Finished { steps: 1 });
                        // The sender lives on: the end comes from `Finished`, not a closed
                        // channel.
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        drop(tx);
                        result.map_err(|m| DriverError::Protocol {
                            step: 1,
                            message: m.to_string(),
                        })
                    })
                },
                limits(60, 3600),
            )
            .await;
            assert_eq!(end == RunEnd::Completed, completed, "{end:?}");
            assert_eq!(
                took,
                Duration::from_secs(5),
                "it waited for the driver's result"
            );
        }
    }
}
