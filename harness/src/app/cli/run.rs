//! `rlharness run`'s arguments.

use std::path::PathBuf;

use clap::Args;

use super::{OutputFormat, RayArgs, RunCommonArgs};

#[derive(Debug, Args, Clone)]
pub(crate) struct RunArgs {
    /// Scenario files, folders (searched for scenarios) or scenario names (looked up under the
    /// nearest `scenarios/` folder from here up).
    #[arg(required_unless_present_any = ["tag", "filter", "rerun_failed"])]
    pub(crate) scenarios: Vec<PathBuf>,
    /// Run again the scenarios that did not pass in the last `run` into `--out` (read from
    /// `OUT/index.json`); skipped ones are left out.
    #[arg(long, conflicts_with_all = ["scenarios", "tag", "filter"])]
    pub(crate) rerun_failed: bool,
    /// Only the scenarios with this tag (repeatable: any of them); with no scenario given,
    /// selects from the nearest `scenarios/` folder.
    #[arg(long, value_name = "TAG")]
    pub(crate) tag: Vec<String>,
    /// Only the scenarios this filter expression selects (`tag(smoke) and not
    /// requires(gpu)`: name(TEXT), tag(TAG), requires(TEXT), path(TEXT), all(), and, or,
    /// not); with --tag, both must hold; with no scenario given, selects from the nearest
    /// `scenarios/` folder.
    #[arg(short = 'E', long = "filter", value_name = "EXPR")]
    pub(crate) filter: Option<String>,
    /// `json`: the combined verdict as one document on stdout (`schema`, `exit_code`,
    /// `scenarios`); each scenario's lines go to stderr instead.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: OutputFormat,
    #[command(flatten)]
    pub(crate) common: RunCommonArgs,
    /// `A..B`: run every seed from A to B (inclusive), one run directory each under one
    /// combined directory, and judge the seeds' distribution against the golden's calibration
    /// (Student's pooled t-test) besides each seed's own verdict.
    #[arg(long, value_name = "A..B", conflicts_with = "seed")]
    pub(crate) seeds: Option<String>,
    /// Scenarios side by side on this host (a scenario that requires GPUs takes that many of
    /// the visible GPUs instead, pinned with CUDA_VISIBLE_DEVICES); with `--seeds`, seeds side
    /// by side (a torch CPU scenario with `threads: 1` fits one per core). One combined verdict
    /// goes to OUT/index.md, OUT/index.html and OUT/junit.xml either way.
    #[arg(long, default_value_t = 1)]
    pub(crate) jobs: usize,
    #[command(flatten)]
    pub(crate) ray: RayArgs,
    /// Write the run's series as a pending golden (`.new`) for review, even if one exists.
    #[arg(long)]
    pub(crate) update_golden: bool,
    /// The builtin driver talks to the backend without the recording proxy (no wire.jsonl,
    /// no server_config.json): to measure what the proxy costs inside a real step.
    #[arg(long)]
    pub(crate) direct: bool,
    /// Name the code under test in run.json (a container tag, a CI build id): `rlharness
    /// history` orders and attributes runs by it, before the trainer's recorded sources.
    #[arg(long, value_name = "TEXT")]
    pub(crate) label: Option<String>,
    /// Exit 1 when any scenario is skipped (its requirements are not met here), so a CI job
    /// that ran nothing is red, not green.
    #[arg(long)]
    pub(crate) fail_on_skip: bool,
    /// Stop the run on purpose, as completed, once the wire shows the jobs initialized
    /// (`initialize`) or step N over (`steps:N`): a propagation trial run as a Ray job.
    #[arg(long, hide = true, value_name = "initialize|steps:N")]
    pub(crate) stop_at: Option<crate::run::runner::StopAt>,
    /// The experiment name a command trainer gets (`trainer.experiment_name`): a propagation
    /// trial run as a Ray job shares its matrix's.
    #[arg(long, hide = true, value_name = "NAME")]
    pub(crate) experiment_name: Option<String>,
    /// Also write every run's series, step by step, as TensorBoard event files under
    /// DIR/<scenario>/<run-id>/ (a multi-seed run: one folder per seed), and after judging the
    /// golden's series and the judge's bands (`tensorboard --logdir DIR`).
    #[arg(long, value_name = "DIR")]
    pub(crate) tensorboard: Option<PathBuf>,
}

impl RunArgs {
    /// The options of another command's runs submitted as Ray jobs (`golden calibrate`,
    /// `propagate`, `bisect` with `--executor ray`): `scenario`'s runs, collected under `out`,
    /// its goldens read from `golden`, with `set` and `hardware`; the rest as `run`'s defaults.
    pub(crate) fn for_jobs(
        scenario: &std::path::Path,
        ray: RayArgs,
        out: PathBuf,
        golden: &std::path::Path,
        hardware: Option<String>,
        set: &[String],
    ) -> RunArgs {
        RunArgs {
            scenarios: vec![scenario.to_path_buf()],
            tag: Vec::new(),
            filter: None,
            rerun_failed: false,
            format: OutputFormat::Text,
            common: RunCommonArgs {
                out,
                golden: Some(golden.to_path_buf()),
                seed: None,
                steps: None,
                set: set.to_vec(),
                hardware,
                no_progress: false,
            },
            seeds: None,
            jobs: 1,
            ray,
            update_golden: false,
            direct: false,
            label: None,
            fail_on_skip: false,
            stop_at: None,
            experiment_name: None,
            tensorboard: None,
        }
    }
}
