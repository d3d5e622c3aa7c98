//! The command line (fixed interface, see docs/architecture.md).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "rlharness",
    version,
    about = "Reproducible smoke and convergence scenarios for LLM RL training integrations",
    after_help = "Exit codes: 0 passed (skips included, unless run --fail-on-skip), 1 a check \
                  failed (or a skip under --fail-on-skip), 2 invalid input, \
                  3 the run failed (crash, hang, timeout), 4 no golden yet (a pending one was written)."
)]
pub struct Cli {
    /// More log output (repeat for more); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate scenario files (default: scenarios/) and lint backend YAML files.
    Check { paths: Vec<PathBuf> },
    /// List the scenarios, their tags and requirements, and whether they can run here.
    List {
        #[arg(default_value = "scenarios")]
        root: PathBuf,
    },
    /// Run scenarios and judge them against their goldens and rules.
    Run(RunArgs),
    /// Run a scenario and keep its whole wire traffic as a replay cassette under
    /// GOLDEN/<scenario>/<hardware>/cassette/.
    Record(RecordArgs),
    /// Serve an Arctic-compatible backend standalone.
    Serve(ServeArgs),
    /// A standalone recording proxy in front of any Arctic server.
    Proxy(ProxyArgs),
    /// Review pending goldens: status, accept, reject.
    Golden {
        #[command(subcommand)]
        action: GoldenAction,
        /// The golden store.
        #[arg(long, default_value = "golden", global = true)]
        golden: PathBuf,
    },
    /// Re-judge a stored run against its golden, or against a second run.
    Compare {
        run: PathBuf,
        run2: Option<PathBuf>,
        #[arg(long, default_value = "golden")]
        golden: PathBuf,
    },
    /// Prove every knob reaches the server: the propagation matrix.
    Propagate {
        scenario: PathBuf,
        #[arg(long, default_value = "reports")]
        out: PathBuf,
        /// Override scenario values for every run of the matrix.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Where run directories go: OUT/<scenario>/<run-id>/.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// The golden store.
    #[arg(long, default_value = "golden")]
    pub golden: PathBuf,
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// `A..B`: run every seed from A to B (inclusive), one run directory each under one
    /// combined directory, and judge the seeds' distribution against the golden's calibration
    /// (Welch's t-test) besides each seed's own verdict.
    #[arg(long, value_name = "A..B")]
    pub seeds: Option<String>,
    /// With `--seeds`: seeds run side by side (a torch CPU scenario with `threads: 1` fits one
    /// per core).
    #[arg(long, default_value_t = 1, requires = "seeds")]
    pub jobs: usize,
    #[arg(long)]
    pub steps: Option<u64>,
    /// Override a scenario value, e.g. `--set config.actor_rollout_ref.actor.optim.lr=1e-5`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Write the run's series as a pending golden (`.new`) for review, even if one exists.
    #[arg(long)]
    pub update_golden: bool,
    /// The hardware key of the golden (default: derived from the device, e.g. `cpu`, `h200`).
    #[arg(long)]
    pub hardware: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Exit 1 when any scenario is skipped (its requirements are not met here), so a CI job
    /// that ran nothing is red, not green.
    #[arg(long)]
    pub fail_on_skip: bool,
}

#[derive(Debug, Args, Clone)]
pub struct RecordArgs {
    pub scenario: PathBuf,
    /// Where the recording run's directory goes: OUT/<scenario>/<run-id>/.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// The golden store the cassette is installed into.
    #[arg(long, default_value = "golden")]
    pub golden: PathBuf,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Record this many steps (a few keep the cassette small).
    #[arg(long)]
    pub steps: Option<u64>,
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The hardware key (default: derived from the device).
    #[arg(long)]
    pub hardware: Option<String>,
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ServeKind {
    Mock,
    Torch,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    pub kind: ServeKind,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 7000)]
    pub port: u16,
    /// A scenario whose backend block scripts the server (mock curves, torch model).
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    #[arg(long)]
    pub upstream: String,
    #[arg(long, default_value = "127.0.0.1:7001")]
    pub listen: String,
    /// Folder for wire.jsonl and server_config.json.
    #[arg(long)]
    pub record: PathBuf,
    /// Largest request or response body, in bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024 * 1024)]
    pub body_limit: u64,
    /// Upstream time-out per request, in seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout_s: u64,
}

#[derive(Debug, Subcommand)]
pub enum GoldenAction {
    /// List pending goldens with a diff summary.
    Status,
    /// Accept pending goldens (all, or those of the named scenarios).
    Accept { scenarios: Vec<String> },
    /// Reject pending goldens (all, or those of the named scenarios).
    Reject { scenarios: Vec<String> },
    /// Run a scenario N times (or once per seed) and store the measured noise beside its
    /// golden (`calibration.json`), for rules with `calibrated: {k, floor}` bands.
    Calibrate(CalibrateArgs),
}

#[derive(Debug, Args, Clone)]
pub struct CalibrateArgs {
    pub scenario: PathBuf,
    /// Runs of the scenario's own seed.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// `A..B`: one run per seed from A to B (inclusive) instead of `--runs`.
    #[arg(long)]
    pub seeds: Option<String>,
    /// Runs side by side (a torch CPU scenario with `threads: 1` fits one per core).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Where the runs' directories go.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Override the hardware key.
    #[arg(long)]
    pub hardware: Option<String>,
    /// Override scenario values for every run (as `run --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}
