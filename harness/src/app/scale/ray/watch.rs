//! Watching a job to its end: its progress lines shown, its state polled, and a job the
//! harness gives up on stopped.

use std::time::{Duration, Instant};

use super::client::{JobInfo, RayClient};

/// A scenario's live progress, from the `NAME: step K/N reward R` lines its run prints.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepLine {
    pub(crate) step: u64,
    pub(crate) total: u64,
    pub(crate) reward: Option<f64>,
}

/// The last progress line in a job's log.
pub(crate) fn last_step(log: &str) -> Option<StepLine> {
    log.lines().rev().find_map(|l| {
        let (_, rest) = l.split_once(": step ")?;
        let mut words = rest.split_whitespace();
        let (k, n) = words.next()?.split_once('/')?;
        let reward = match (words.next(), words.next()) {
            (Some("reward"), Some(r)) => r.parse().ok(),
            _ => None,
        };
        Some(StepLine {
            step: k.parse().ok()?,
            total: n.parse().ok()?,
            reward,
        })
    })
}

/// The last `error: ...` line of a log (what `job-entry` said when it could not run).
pub(super) fn last_error(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .find(|l| l.starts_with("error: "))
        .map(|l| l.trim_start_matches("error: ").to_string())
}

pub(super) fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.starts_with("@@")).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How one job ended, as the watcher saw it.
pub(super) struct Watched {
    pub(super) id: String,
    pub(super) info: Option<JobInfo>,
    pub(super) log: String,
    pub(super) first_step_s: Option<f64>,
    /// Why the harness gave up on it (queue timeout, Ctrl-C, API failure).
    pub(super) gave_up: Option<String>,
    /// What became of the stop request, when the job had not ended by the time it was left.
    pub(super) stop_note: Option<String>,
    pub(super) seconds: f64,
}

/// Shows a job's progress: a bar on a terminal, a line per new step otherwise, or nothing
/// (the job is a run of another command's matrix, which shows its own progress).
pub(super) struct Shown {
    bar: Option<indicatif::ProgressBar>,
    label: String,
    last: u64,
    hidden: bool,
}

impl Shown {
    pub(super) fn new(group: Option<&indicatif::MultiProgress>, label: String) -> Shown {
        let bar = group.map(|g| {
            let b = g.add(indicatif::ProgressBar::new(1));
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{bar:30}] step {pos}/{len} {msg} (ETA {eta})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(label.clone());
            b.set_message("queued");
            b
        });
        Shown {
            bar,
            label,
            last: 0,
            hidden: false,
        }
    }
    /// Nothing shown; the job's states go to the log (`-v`).
    pub(super) fn hidden(label: String) -> Shown {
        Shown {
            bar: None,
            label,
            last: 0,
            hidden: true,
        }
    }
    fn state(&self, text: &str) {
        match &self.bar {
            Some(b) => b.set_message(text.to_string()),
            None if self.hidden => tracing::info!("{}: {text}", self.label),
            None => errln!("{}: {text}", self.label),
        }
    }
    fn step(&mut self, s: &StepLine, since_first: Option<Duration>) {
        if s.step == self.last || self.hidden {
            return;
        }
        self.last = s.step;
        let reward = s
            .reward
            .map(|r| format!(" reward {r:.3}"))
            .unwrap_or_default();
        match &self.bar {
            Some(b) => {
                b.set_length(s.total);
                b.set_position(s.step);
                b.set_message(reward.trim().to_string());
            }
            None => {
                let eta = since_first
                    .filter(|_| s.step > 1)
                    .map(|d| {
                        let per = d.as_secs_f64() / (s.step - 1) as f64;
                        format!(
                            " (ETA {:.0} s)",
                            per * s.total.saturating_sub(s.step) as f64
                        )
                    })
                    .unwrap_or_default();
                errln!("{}: step {}/{}{reward}{eta}", self.label, s.step, s.total);
            }
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Watch one job to its end (or until the harness gives up on it and stops it).
pub(super) async fn watch(
    client: &RayClient,
    id: String,
    queue: Duration,
    mut shown: Shown,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Watched {
    let submitted = Instant::now();
    let mut first_step: Option<Instant> = None;
    let mut running = false;
    let mut log = String::new();
    let mut gave_up: Option<String> = None;
    let mut errors = 0u32;
    let mut last_logs = Instant::now() - Duration::from_secs(10);
    let info = loop {
        let info = match poll_status(client, &id, &mut errors).await {
            Ok(info) => info,
            Err(why) => {
                gave_up = Some(why);
                break None;
            }
        };
        if let Some(i) = &info {
            if i.status == "RUNNING" && !running {
                running = true;
                shown.state("running");
            }
            // Logs: often until the first step (that is the overhead measured), then every 2 s.
            let every = if first_step.is_none() {
                Duration::from_millis(250)
            } else {
                Duration::from_secs(2)
            };
            // A job may end before it was ever seen RUNNING: its log is read at the end anyway.
            if i.is_terminal() || (running && last_logs.elapsed() >= every) {
                if let Ok(l) = client.logs(&id).await {
                    log = l;
                    last_logs = Instant::now();
                    if let Some(s) = last_step(&log) {
                        let first = *first_step.get_or_insert_with(Instant::now);
                        shown.step(&s, Some(first.elapsed()));
                    }
                }
            }
            if i.is_terminal() {
                break info;
            }
            if i.status == "PENDING" && submitted.elapsed() >= queue {
                gave_up = Some(format!(
                    "unschedulable: not scheduled within timeouts.queue = {queue:?}; the \
                     cluster has no room for what the scenario requires ({})",
                    i.message.as_deref().unwrap_or("PENDING")
                ));
            }
        }
        if gave_up.is_some() {
            break info;
        }
        let pause = if first_step.is_none() {
            Duration::from_millis(200)
        } else {
            Duration::from_millis(1000)
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = cancel.changed() => {
                if *cancel.borrow() {
                    gave_up = Some("interrupted (Ctrl-C): the job was stopped".into());
                    break info;
                }
            }
        }
    };
    // Given up on: stop it, and wait (bounded) for Ray to say it ended, for its last log.
    let mut info = info;
    let mut stop_note = None;
    if gave_up.is_some() && !info.as_ref().is_some_and(JobInfo::is_terminal) {
        shown.state("stopping");
        (info, stop_note) = stop_job(client, &id, info).await;
        if let Ok(l) = client.logs(&id).await {
            log = l;
        }
    }
    shown.finish();
    Watched {
        id,
        info,
        log,
        first_step_s: first_step.map(|f| (f - submitted).as_secs_f64()),
        gave_up,
        stop_note,
        seconds: submitted.elapsed().as_secs_f64(),
    }
}

/// One look at a job's state; `errors` counts the failed looks in a row. `Err` when the head
/// stays unreachable: stop waiting, say which job is left.
async fn poll_status(
    client: &RayClient,
    id: &str,
    errors: &mut u32,
) -> Result<Option<JobInfo>, String> {
    match client.status(id).await {
        Ok(i) => {
            *errors = 0;
            Ok(Some(i))
        }
        Err(e) => {
            *errors += 1;
            if *errors >= 30 {
                return Err(format!("lost contact with the Ray jobs API ({e})"));
            }
            Ok(None)
        }
    }
}

/// Stop a job the harness gave up on (last seen as `info`) and wait (bounded) for Ray to say it
/// ended: its state then, and a note on the stop when it did not end (also printed).
async fn stop_job(
    client: &RayClient,
    id: &str,
    mut info: Option<JobInfo>,
) -> (Option<JobInfo>, Option<String>) {
    let pending = info.as_ref().is_some_and(|i| i.status == "PENDING");
    let stopped = client.stop(id).await;
    // A running job ends within Ray's stop grace (SIGTERM, then SIGKILL after
    // RAY_JOB_STOP_WAIT_TIME_S, 3 s by default).
    let wait = if pending { 3 } else { 20 };
    let deadline = Instant::now() + Duration::from_secs(wait);
    while Instant::now() < deadline {
        if let Ok(i) = client.status(id).await {
            let done = i.is_terminal();
            info = Some(i);
            if done {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if info.as_ref().is_some_and(JobInfo::is_terminal) {
        return (info, None);
    }
    let note = match (&stopped, pending) {
        // Ray queues the stop on the job's supervisor, which is not placed yet: the
        // job stays PENDING until the cluster could place it and then stops at once
        // (Ray fails a job still pending after RAY_JOB_START_TIMEOUT_SECONDS).
        (Ok(_), true) => format!(
            "Ray took the stop request; the job shows PENDING until the cluster could \
             place it, then stops at once ({})",
            client.stop_command(id)
        ),
        (Ok(_), false) => format!(
            "Ray job {id} did not stop within {wait} s; it may still be running: {}",
            client.stop_command(id)
        ),
        (Err(e), _) => format!(
            "the stop request for Ray job {id} failed ({e}); it may still be running: {}",
            client.stop_command(id)
        ),
    };
    errln!("warning: {note}");
    (info, Some(note))
}
