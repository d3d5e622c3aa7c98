//! The matrix run: every scenario submitted, watched and gathered into one entry per file, and
//! Ctrl-C turned into stopping the jobs.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use super::client::RayClient;
use super::collect::entry_of;
use super::plan::plan;
use super::submit::{job_body, job_env_vars, upload_package};
use super::watch::{watch, Shown};
use crate::app::scale::index::Entry;
use crate::app::scale::local;
use crate::app::scale::ray_auth::RayToken;
use crate::cli::RunArgs;
use crate::error::CommandError;

/// Submit every scenario as a Ray job, watch them, collect their run directories under OUT/
/// and return one entry per file in the order given.
pub(crate) async fn run_matrix(
    files: &[PathBuf],
    args: &RunArgs,
) -> Result<Vec<Entry>, CommandError> {
    let runs: Vec<(PathBuf, Option<u64>)> = files.iter().map(|f| (f.clone(), None)).collect();
    run_jobs(&runs, args).await
}

/// Submit every run (a scenario file, with a seed of its own or the run's `--seed`) as one Ray
/// job, watch them, collect their run directories under OUT/ and return one entry per run in
/// the order given.
pub(crate) async fn run_jobs(
    runs: &[(PathBuf, Option<u64>)],
    args: &RunArgs,
) -> Result<Vec<Entry>, CommandError> {
    let files: Vec<PathBuf> = runs.iter().map(|(f, _)| f.clone()).collect();
    let files = files.as_slice();
    let address =
        args.ray.address.as_deref().ok_or_else(|| {
            CommandError::invalid("--executor ray needs --address http://HEAD:8265")
        })?;
    let token = RayToken::from_environment(args.ray.ray_token_file.as_deref())
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    if let Some(t) = &token {
        tracing::info!("ray: sending the token from {} to {address}", t.origin());
    }
    let client = RayClient::new(address)?.with_token(token);
    let env_vars = job_env_vars(args)?;
    let (planned, invalid, package_files) = plan(runs, args)?;
    crate::fsx::create_dir_all(&args.common.out)
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    let mut entries: Vec<Option<Entry>> = vec![None; files.len()];
    for (i, e) in invalid {
        local::print_entry(&e, None);
        entries[i] = Some(e);
    }
    let uri = if planned.is_empty() {
        None
    } else {
        Some(upload_package(&client, package_files).await?)
    };
    let tty = std::io::stderr().is_terminal() && !args.common.no_progress;
    let group = tty.then(indicatif::MultiProgress::new);
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let cancel_tx = Arc::new(cancel_tx);
    let ctrl_c = cancel_on_ctrl_c(cancel_tx.clone());
    let mut tasks = Vec::new();
    for p in planned {
        let index = p.index;
        if *cancel_rx.borrow() {
            let e = local::error_entry(
                &p.file,
                &CommandError::run_failed("interrupted (Ctrl-C) before it was submitted"),
                "not submitted",
                0.0,
            );
            entries[index] = Some(e);
            continue;
        }
        let body = job_body(&p, args, uri.as_deref(), &env_vars);
        let id = match client.submit(&body).await {
            Ok(id) => id,
            Err(e) => {
                let e = local::error_entry(
                    &p.file,
                    &CommandError::new(e.exit_status(), format!("the job was not submitted: {e}")),
                    "not submitted",
                    0.0,
                );
                local::print_entry(&e, group.as_ref());
                entries[index] = Some(e);
                continue;
            }
        };
        let label = format!("{} [{id}]", shown_name(&p));
        let shown = Shown::new(group.as_ref(), label);
        if group.is_none() {
            eprintln!("{}: submitted as Ray job {id}", shown_name(&p));
        }
        let (client, rx, out, group) = (
            client.clone(),
            cancel_rx.clone(),
            args.common.out.clone(),
            group.clone(),
        );
        tasks.push((
            index,
            tokio::spawn(async move {
                let w = watch(&client, id, p.queue, shown, rx).await;
                let e = tokio::task::spawn_blocking(move || entry_of(&p, &w, &out))
                    .await
                    .map_err(|e| CommandError::run_failed(format!("collecting crashed: {e}")));
                if let Ok(e) = &e {
                    local::print_entry(e, group.as_ref());
                }
                e
            }),
        ));
    }
    let entries = gather(files, entries, tasks).await;
    ctrl_c.abort();
    Ok(entries)
}

/// A job's name in the lines it prints: its scenario, and its seed when it has one of its own.
fn shown_name(p: &super::plan::Planned) -> String {
    match p.seed {
        Some(seed) => format!("{} seed {seed}", p.name),
        None => p.name.clone(),
    }
}

/// Wait for every watcher and fill in its file's entry; a file left with none has "no result".
async fn gather(
    files: &[PathBuf],
    mut entries: Vec<Option<Entry>>,
    tasks: Vec<(usize, tokio::task::JoinHandle<Result<Entry, CommandError>>)>,
) -> Vec<Entry> {
    for (index, t) in tasks {
        let e = match t.await {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => local::error_entry(&files[index], &e, "ray", 0.0),
            Err(e) => local::error_entry(
                &files[index],
                &CommandError::run_failed(format!("watching the job crashed: {e}")),
                "ray",
                0.0,
            ),
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

/// On Ctrl-C, tell every watcher (through `cancel_tx`) to stop its job.
fn cancel_on_ctrl_c(
    cancel_tx: Arc<tokio::sync::watch::Sender<bool>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: stopping this invocation's Ray jobs");
            let _ = cancel_tx.send(true);
        }
    })
}
