//! `rlharness run --executor ray --address http://HEAD:8265`: one Ray job per scenario,
//! through the Ray Jobs REST API of the cluster's dashboard. Ray schedules; the harness
//! submits, watches and collects.
//!
//! - What a job needs travels as one `working_dir` package, uploaded the way Ray's own SDK does
//!   (`PUT /api/packages/gcs/_ray_pkg_<sha256>.zip`, skipped when the cluster has it): this
//!   executable (or none with `--remote-bin`), `rlharness-torch` beside it when a scenario has
//!   a torch backend, the scenarios' folders and the goldens they name. No shared filesystem.
//! - The job's entrypoint is the hidden `rlharness job-entry`: `run` for the one scenario, then
//!   the run directory printed on stdout as one framed, checksummed archive ([`super::bundle`]).
//!   The submitter reads the job's log, verifies the frame and unpacks the run directory under
//!   OUT/, so the combined verdict is made from the same files as a local run's.
//! - Progress (step, reward, ETA) comes from the run's own progress lines in the job's log.
//! - A job that Ray stopped, lost or failed without a frame, or that was not scheduled within
//!   `timeouts.queue`, is exit 3 with the reason; its log is kept as `job.log`. A job stopped
//!   through the API gets SIGTERM, which `job-entry` turns into the run's own interrupt, so the
//!   finished steps come back in the frame.
//! - Ctrl-C stops every job this invocation submitted (and says which, and how to stop any
//!   that would not stop).
//! - Other commands submit their runs the same way ([`run_jobs`], one [`JobRun`] each, a
//!   [`JobBatch`] saying how many at once): `golden calibrate` one job per seed, `propagate`
//!   one per trial (its overrides, steps, hidden `--stop-at` and `--experiment-name`), `bisect`
//!   one per seed or trial of a commit, whose worktree travels in the package (`sources/VAR/`).
//!
//! By part: `client.rs` the Jobs API, `job_plan.rs` the planned jobs and their package, `submit.rs`
//! what a submission carries, `watch.rs` a job followed to its end, `collect.rs` what it
//! brought back, `matrix.rs` the whole run, `trials.rs` another command's runs over several
//! calls (a matrix's trials, a bisect's seeds), and the job's own entrypoint is
//! `app/commands/job_entry.rs`.

mod client;
mod collect;
mod job_plan;
mod matrix;
mod submit;
#[cfg(test)]
mod tests;
mod trials;
mod watch;

pub use client::{RayClient, RayError};
pub(crate) use job_plan::{JobBatch, JobRun, OnDone};
pub(crate) use matrix::{run_jobs, run_matrix};
pub(crate) use trials::RayJobs;

/// Where the package puts things (relative to the job's working directory).
const OUT_DIR: &str = "out";
const GOLDEN_DIR: &str = "golden";
/// Shipped trainer sources: `sources/<VAR>/`.
const SOURCES_DIR: &str = "sources";
