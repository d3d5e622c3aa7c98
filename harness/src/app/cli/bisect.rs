//! `rlharness bisect`'s arguments.

use std::path::PathBuf;

use clap::Args;

use super::RayArgs;

/// `rlharness bisect`'s arguments.
#[derive(Debug, Args, Clone)]
pub(crate) struct BisectArgs {
    /// A scenario whose trainer sources are a git repository (a command driver's `sources`).
    pub(crate) scenario: PathBuf,
    /// The trainer's git repository (never checked out: each commit goes to a worktree of the
    /// bisect's own).
    #[arg(long)]
    pub(crate) repo: PathBuf,
    /// A revision where the scenario is good.
    #[arg(long)]
    pub(crate) good: String,
    /// A later revision where it is bad.
    #[arg(long)]
    pub(crate) bad: String,
    /// The setting (environment variable) that points the scenario at the trainer's sources;
    /// default: the scenario's one `driver.sources` entry.
    #[arg(long, value_name = "VAR")]
    pub(crate) source: Option<String>,
    /// Judge each commit with the propagation matrix instead of the scenario's metrics: a
    /// commit is bad when a knob is flagged that no known gap explains.
    #[arg(long)]
    pub(crate) propagate: bool,
    /// With `--propagate`: only the knobs these patterns name (as `propagate --knobs`).
    #[arg(long = "knobs", value_name = "PATTERN", requires = "propagate")]
    pub(crate) knobs: Vec<String>,
    /// With `--propagate`: only the trials under this condition value (as `propagate
    /// --condition`).
    #[arg(long = "condition", value_name = "KEY=VALUE", requires = "propagate")]
    pub(crate) conditions: Vec<String>,
    /// With `--propagate`: how far each trial runs (as `propagate --until`).
    #[arg(long, default_value = "auto", requires = "propagate", value_parser = clap::value_parser!(crate::tools::propagate::command::Until))]
    pub(crate) until: crate::tools::propagate::command::Until,
    /// Override a scenario value in every run.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Where the report (bisect.json, bisect.md), the runs and the worktrees go; default
    /// `reports/bisect/<scenario>/<stamp>/`.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Where each commit's results are kept for reruns; default `cache/` beside the out folder.
    #[arg(long)]
    pub(crate) cache: Option<PathBuf>,
    /// The golden store (default: `golden/` beside the scenario's `scenarios/` folder).
    #[arg(long)]
    pub(crate) golden: Option<PathBuf>,
    /// The golden's hardware key (default: the scenario's one calibrated key).
    #[arg(long)]
    pub(crate) hardware: Option<String>,
    /// Seeds side by side (scenario mode), or trials (`--propagate`).
    #[arg(long, default_value_t = 1)]
    pub(crate) jobs: usize,
    /// The chance of calling a good commit bad.
    #[arg(long, default_value_t = 0.05)]
    pub(crate) alpha: f64,
    /// The chance of calling a bad commit good.
    #[arg(long, default_value_t = 0.05)]
    pub(crate) beta: f64,
    /// The most seeds a commit gets; a commit still unclear then is skipped.
    #[arg(long, default_value_t = 8)]
    pub(crate) max_seeds: usize,
    /// The shift of the judged window that makes a commit bad (default: the golden rule's
    /// calibrated band, `max(k·σ·√(1+1/n), floor)`).
    #[arg(long)]
    pub(crate) effect: Option<f64>,
    /// The metric judged (default: the calibration's reward or score metric); its last
    /// calibrated window is used.
    #[arg(long)]
    pub(crate) metric: Option<String>,
    /// `--executor ray --address …`: each seed (or, with `--propagate`, each trial) of a
    /// commit one Ray job, the commit's worktree shipped with it.
    #[command(flatten)]
    pub(crate) ray: RayArgs,
}
