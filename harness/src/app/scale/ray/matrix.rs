//! The matrix run: every run submitted (at most so many at once when asked), watched and
//! gathered into one entry per run, and Ctrl-C turned into stopping the jobs.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::client::RayClient;
use super::collect::entry_of;
use super::job_plan::{plan, JobBatch, JobRun};
use super::submit::{job_body, job_env_vars, upload_package};
use super::watch::{watch, Shown};
use crate::app::cli::RunArgs;
use crate::app::errors::Failure;
use crate::app::scale::index::Entry;
use crate::app::scale::local;
use crate::app::scale::ray_auth::RayToken;
use crate::model::error::CommandError;

/// Submit every scenario as a Ray job, watch them, collect their run directories under OUT/
/// and return one entry per file in the order given.
pub(crate) async fn run_matrix(
    files: &[PathBuf],
    args: &RunArgs,
) -> Result<Vec<Entry>, CommandError> {
    let runs: Vec<JobRun> = files.iter().map(|f| JobRun::of(f, None)).collect();
    run_jobs(&runs, args, &JobBatch::default()).await
}

/// The Ray client of `args` (`--address`, the token).
fn client_of(args: &RunArgs) -> Result<RayClient, CommandError> {
    let address =
        args.ray.address.as_deref().ok_or_else(|| {
            CommandError::invalid("--executor ray needs --address http://HEAD:8265")
        })?;
    let token = RayToken::from_environment(args.ray.ray_token_file.as_deref())?;
    if let Some(t) = &token {
        tracing::info!("ray: sending the token from {} to {address}", t.origin());
    }
    Ok(RayClient::new(address)?.with_token(token))
}

/// Submit every run (a scenario file with what it sets on top of `args`) as one Ray job,
/// `batch.in_flight` at a time (all at once when 0), watch them, collect their run directories
/// under OUT/ and return one entry per run in the order given.
pub(crate) async fn run_jobs(
    runs: &[JobRun],
    args: &RunArgs,
    batch: &JobBatch,
) -> Result<Vec<Entry>, CommandError> {
    let files: Vec<PathBuf> = runs.iter().map(|r| r.file.clone()).collect();
    let files = files.as_slice();
    let client = client_of(args)?;
    let env_vars = job_env_vars(args)?;
    let (planned, invalid, package) = plan(runs, args, batch)?;
    rlharness_arctic::fsx::create_dir_all(&args.common.out)?;
    let on_done = batch.on_done.clone();
    let mut entries: Vec<Option<Entry>> = vec![None; files.len()];
    for (i, e) in invalid {
        done(on_done.as_ref(), i, &e, None);
        entries[i] = Some(e);
    }
    let uri = if planned.is_empty() {
        None
    } else {
        Some(upload_package(&client, package.files.clone()).await?)
    };
    let tty = std::io::stderr().is_terminal() && !args.common.no_progress && on_done.is_none();
    let group = tty.then(indicatif::MultiProgress::new);
    let interrupted = batch.interrupted.clone();
    let (cancel_tx, mut cancel_rx) =
        tokio::sync::watch::channel(interrupted.load(Ordering::SeqCst));
    let cancel_tx = Arc::new(cancel_tx);
    let ctrl_c = cancel_on_ctrl_c(cancel_tx.clone(), interrupted);
    let slots = Arc::new(tokio::sync::Semaphore::new(match batch.in_flight {
        0 => tokio::sync::Semaphore::MAX_PERMITS,
        n => n,
    }));
    let mut tasks = Vec::new();
    for p in planned {
        let index = p.index;
        // A free place in flight, unless Ctrl-C comes first.
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.ok(),
            _ = cancel_rx.wait_for(|c| *c) => None,
        };
        if slot.is_none() || *cancel_rx.borrow() {
            let e = local::error_entry(
                p.file(),
                &CommandError::run_failed("interrupted (Ctrl-C) before it was submitted"),
                "not submitted",
                0.0,
            );
            done(on_done.as_ref(), index, &e, group.as_ref());
            entries[index] = Some(e);
            continue;
        }
        let body = job_body(&p, args, &package, uri.as_deref(), &env_vars);
        let id = match client.submit(&body).await {
            Ok(id) => id,
            Err(e) => {
                let e = local::error_entry(
                    p.file(),
                    &Failure::NotSubmitted(e).into(),
                    "not submitted",
                    0.0,
                );
                done(on_done.as_ref(), index, &e, group.as_ref());
                entries[index] = Some(e);
                continue;
            }
        };
        let label = format!("{} [{id}]", shown_name(&p));
        let shown = if on_done.is_some() {
            tracing::info!("{}: submitted as Ray job {id}", shown_name(&p));
            Shown::hidden(label)
        } else {
            if group.is_none() {
                errln!("{}: submitted as Ray job {id}", shown_name(&p));
            }
            Shown::new(group.as_ref(), label)
        };
        let (client, rx, out, group, on_done) = (
            client.clone(),
            cancel_rx.clone(),
            args.common.out.clone(),
            group.clone(),
            on_done.clone(),
        );
        tasks.push((
            index,
            tokio::spawn(async move {
                let w = watch(&client, id, p.queue, shown, rx).await;
                let e = tokio::task::spawn_blocking(move || {
                    let e = entry_of(&p, &w, &out);
                    done(on_done.as_ref(), index, &e, group.as_ref());
                    e
                })
                .await
                .map_err(|e| CommandError::from(Failure::CollectCrashed(e)));
                drop(slot);
                e
            }),
        ));
    }
    let entries = gather(files, entries, tasks, on_done.as_ref()).await;
    ctrl_c.abort();
    Ok(entries)
}

/// A run's end told: to the batch's `on_done`, else as its printed entry.
fn done(
    on_done: Option<&super::job_plan::OnDone>,
    index: usize,
    e: &Entry,
    group: Option<&indicatif::MultiProgress>,
) {
    match on_done {
        Some(f) => f(index, e),
        None => local::print_entry(e, group),
    }
}

/// A job's name in the lines it prints: its label, else its scenario, and its seed when it
/// has one of its own.
fn shown_name(p: &super::job_plan::Planned) -> String {
    if let Some(l) = &p.run.label {
        return l.clone();
    }
    match p.run.seed {
        Some(seed) => format!("{} seed {seed}", p.name),
        None => p.name.clone(),
    }
}

/// Wait for every watcher and fill in its file's entry; a file left with none has "no result".
async fn gather(
    files: &[PathBuf],
    mut entries: Vec<Option<Entry>>,
    tasks: Vec<(usize, tokio::task::JoinHandle<Result<Entry, CommandError>>)>,
    on_done: Option<&super::job_plan::OnDone>,
) -> Vec<Entry> {
    for (index, t) in tasks {
        let crashed = |e: &Entry| {
            if let Some(f) = on_done {
                f(index, e);
            }
        };
        let e = match t.await {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => {
                let e = local::error_entry(&files[index], &e, "ray", 0.0);
                crashed(&e);
                e
            }
            Err(e) => {
                let e =
                    local::error_entry(&files[index], &Failure::WatchCrashed(e).into(), "ray", 0.0);
                crashed(&e);
                e
            }
        };
        entries[index] = Some(e);
    }
    entries
        .into_iter()
        .zip(files)
        .map(|(e, f)| {
            e.unwrap_or_else(|| {
                local::error_entry(f, &CommandError::run_failed("no result"), "ray", 0.0)
            })
        })
        .collect()
}

/// On Ctrl-C, tell every watcher (through `cancel_tx`) to stop its job, and the batch's
/// later calls (through `interrupted`) to submit nothing.
fn cancel_on_ctrl_c(
    cancel_tx: Arc<tokio::sync::watch::Sender<bool>>,
    interrupted: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            errln!("interrupted: stopping this invocation's Ray jobs");
            interrupted.store(true, Ordering::SeqCst);
            let _ = cancel_tx.send(true);
        }
    })
}
