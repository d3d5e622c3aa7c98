//! `rlharness job-entry`: what runs inside a Ray job.

use std::io::Write;

use crate::app::cli::{Executor, RunArgs};
use crate::app::errors::Failure;
use crate::app::scale::bundle;
use crate::model::error::{CommandError, ExitStatus};
use rlharness_arctic::fsx;

/// `rlharness job-entry`: the entrypoint of a Ray job. `run` for its scenario, then OUT (its run
/// directory) printed on stdout as one frame. Ray stops a job with SIGTERM; that becomes the
/// run's own interrupt, so its finished steps are written and come back.
pub(crate) async fn job_entry(args: RunArgs) -> Result<ExitStatus, CommandError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        // Installed before the run starts, so a raised SIGINT reaches the run's Ctrl-C watch
        // instead of ending the process.
        let interrupt = signal(SignalKind::interrupt());
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::spawn(async move {
                let _keep = interrupt;
                if term.recv().await.is_some() {
                    errln!("job-entry: SIGTERM: interrupting the run");
                    // SAFETY: raising a signal at this process; no memory is touched.
                    unsafe {
                        libc::raise(libc::SIGINT);
                    }
                }
            });
        }
    }
    // Jobs of one invocation share the unpacked package (Ray caches a working_dir by its
    // URI): each run goes to a folder of its own, removed once it is printed.
    let scratch = tempfile::Builder::new()
        .prefix("rlharness-job-")
        .tempdir()
        .map_err(Failure::JobFolder)?;
    let out = scratch.path().join(&args.common.out);
    let mut local = args;
    local.common.out = out.clone();
    local.ray.executor = Executor::Local;
    let status = match super::run::run(local).await {
        Ok(s) => s,
        Err(e) => {
            errln!("error: {e}");
            e.status
        }
    };
    fsx::create_dir_all(&out)?;
    let files = bundle::files_under(&out, "").map_err(Failure::JobPack)?;
    let zip = bundle::zip_files(&files).map_err(Failure::JobPack)?;
    let frame = bundle::encode_frame(&zip, status.code());
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(frame.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(Failure::JobPrint)?;
    Ok(status)
}
