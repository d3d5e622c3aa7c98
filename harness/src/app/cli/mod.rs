//! The command line (fixed interface, see docs/architecture.md).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod bisect;
mod golden;
mod run;
pub(crate) use bisect::BisectArgs;
pub(crate) use golden::GoldenAction;
pub(crate) use run::RunArgs;

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
    /// More log output: `-v` the harness's info lines, `-vv` its debug lines, `-vvv` every
    /// library's; RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub(crate) verbose: u8,
    /// Less output: no progress (bar or step lines) and no notes; verdicts, failures, errors
    /// and the final tally only. Logs at errors only.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
    /// Colours: `auto` on a terminal unless `NO_COLOR` is set, `always`, `never`.
    #[arg(
        long,
        value_enum,
        global = true,
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub(crate) color: crate::model::util::ColorChoice,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Validate scenario files (default: scenarios/) and lint backend YAML files.
    Check {
        paths: Vec<PathBuf>,
        /// `json`: one document for scripts (`schema`, `ok`, `files` with each error's file,
        /// line, column, key and message) instead of the lines.
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
    },
    /// List the scenarios, their files, tags and requirements, and whether they can run here.
    List {
        #[arg(default_value = "scenarios")]
        root: PathBuf,
        /// Only the scenarios with this tag (repeatable: any of them).
        #[arg(long, value_name = "TAG")]
        tag: Vec<String>,
        /// Only the scenarios this filter expression selects (as `run -E`).
        #[arg(short = 'E', long = "filter", value_name = "EXPR")]
        filter: Option<String>,
        /// `json`: one document for scripts (`schema`, `scenarios`).
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
    },
    /// Run scenarios and judge them against their goldens and rules.
    Run(RunArgs),
    /// The entrypoint of a Ray job (`run --executor ray`): `run` for its one scenario, then
    /// the run directory printed on stdout as one framed, checksummed archive.
    #[command(hide = true)]
    JobEntry(RunArgs),
    /// Inside a network namespace of its own (`unshare --net`): bring the loopback up, listen
    /// on the trainer's fixed address, run the trainer and carry each connection to the Unix
    /// socket of the run's recording proxy (netns.rs). Without `--listen`/`--bridge`: bring
    /// the loopback up and run the command (CI's real-verl lanes side by side).
    #[command(hide = true)]
    NetnsExec {
        #[arg(long, requires = "bridge")]
        listen: Option<String>,
        #[arg(long, requires = "listen")]
        bridge: Option<PathBuf>,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
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
        /// The golden store (default: `golden/` beside the scenario's `scenarios/` folder for
        /// `calibrate`, else `golden/` here).
        #[arg(long, global = true)]
        golden: Option<PathBuf>,
    },
    /// Re-judge a stored run against its golden, or against a second run.
    Compare {
        run: PathBuf,
        run2: Option<PathBuf>,
        /// The golden store (default: `golden/` beside the `scenarios/` folder of the run's
        /// scenario, as `run` found it; else `golden/` here). With RUN2, where the calibration
        /// of calibrated rules is read.
        #[arg(long)]
        golden: Option<PathBuf>,
        /// What to print: a terminal summary (the reports go to RUN/compare/...), the whole
        /// Markdown report, or verdict.json.
        #[arg(long, value_enum, default_value = "summary")]
        format: CompareFormat,
    },
    /// The trend of many runs of each scenario: one value per run for each window the judge
    /// uses, against the golden's band, with the change points and the code between them.
    History {
        /// Folders holding run directories, searched recursively (`reports/`, CI artifacts
        /// unpacked, a `--jobs` or Ray output).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The golden store the runs are judged against (default: the `golden/` beside the
        /// `scenarios/` folder of the first run's scenario, as `run` finds it).
        #[arg(long)]
        golden: Option<PathBuf>,
        /// Where the page (history.html, history.md) and the trend charts go.
        #[arg(long, default_value = "reports/history")]
        out: PathBuf,
        /// The smallest change point reported, in percent of the level before it: a move that
        /// is significant against a tiny noise but smaller than this does not matter.
        #[arg(long, value_name = "PERCENT", default_value_t = 1.0)]
        min_change: f64,
        /// Also draw the last N runs of each scenario on one chart per metric, step by step
        /// (`<scenario>--<hw>--overlay--<metric>.svg`, on the page).
        #[arg(long, value_name = "N", default_value_t = 0)]
        overlay: usize,
        /// What to print: the terminal summary, the Markdown of a GitHub Actions step summary
        /// (`>> "$GITHUB_STEP_SUMMARY"`), or one JSON document for scripts.
        #[arg(long, value_enum, default_value = "summary")]
        format: HistoryFormat,
    },
    /// Generate the files an external trainer needs to train against the torch engine.
    Assets {
        #[command(subcommand)]
        target: AssetsTarget,
    },
    /// The first commit of a trainer's repository where a scenario regressed: binary search
    /// with a sequential test per commit, in worktrees of its own (docs/bisect.md).
    Bisect(BisectArgs),
    /// Prove every knob reaches the server: the propagation matrix.
    Propagate {
        scenario: PathBuf,
        #[arg(long, default_value = "reports")]
        out: PathBuf,
        /// Override scenario values for every run of the matrix.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// How far each trial runs: `first-update` (one training step), `initialize` (the
        /// JobConfigs), `step:N`, or `auto` (the JobConfigs where every reader of its knobs is
        /// in one, else one training step: faster, blind to effects after initialization).
        #[arg(long, default_value = "first-update", value_parser = clap::value_parser!(crate::tools::propagate::command::Until))]
        until: crate::tools::propagate::command::Until,
        /// Trials side by side. A trainer on a fixed address (the Arctic adapter's
        /// `localhost:7000`) gets a network namespace per trial where the host allows one
        /// (root, or unprivileged user namespaces; `RLHARNESS_NO_NETNS=1` turns it off), else
        /// its trials run one at a time, saying why.
        #[arg(long, default_value_t = crate::tools::propagate::command::CONCURRENCY)]
        jobs: usize,
        /// Perturb knobs whose wire locations cannot overlap in one run, splitting a run that
        /// cannot be attributed (the default).
        #[arg(long, overrides_with = "no_group")]
        group: bool,
        /// One knob per run.
        #[arg(long = "no-group", overrides_with = "group")]
        no_group: bool,
        /// Fail (exit 1) when a knob is not observed (not observable here, not exercised).
        #[arg(long)]
        require_observed: bool,
        /// Try only the knobs these patterns name (repeatable): a knob path, or a prefix of
        /// one (its subtree); `*` matches one segment, e.g. `remote_backend.train.logits`.
        #[arg(long = "knobs", value_name = "PATTERN")]
        knobs: Vec<String>,
        /// Only the trials under this value of a condition knob (repeatable), e.g.
        /// `remote_backend.train.zorro_train.enable=true` where a bug can only show with ZoRRo
        /// on; knobs without that condition are tried as usual.
        #[arg(long = "condition", value_name = "KEY=VALUE")]
        conditions: Vec<String>,
        /// No progress bar: one plain line per finished run instead (as in a CI log); `-q` for
        /// none.
        #[arg(long)]
        no_progress: bool,
        /// `--executor ray --address …`: each trial run one Ray job (`--jobs` of them in
        /// flight), its run directory brought back and judged here.
        #[command(flatten)]
        ray: RayArgs,
    },
}

/// The options `run` and `record` share: where runs and goldens go, and what the run is.
#[derive(Debug, Args, Clone)]
pub(crate) struct RunCommonArgs {
    /// Where run directories go: OUT/<scenario>/<run-id>/.
    #[arg(long, default_value = "reports")]
    pub(crate) out: PathBuf,
    /// The golden store (`record` installs its cassette there). Default: `golden/` beside the
    /// first scenario's `scenarios/` folder, wherever the command runs from.
    #[arg(long)]
    pub(crate) golden: Option<PathBuf>,
    /// The seed, instead of the scenario's.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Run this many steps instead of the scenario's (`record`: a few keep the cassette small).
    #[arg(long)]
    pub(crate) steps: Option<u64>,
    /// Override a scenario value, e.g. `--set config.actor_rollout_ref.actor.optim.lr=1e-5`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// The hardware key of the golden (default: derived from the device, e.g. `cpu`, `h200`).
    #[arg(long)]
    pub(crate) hardware: Option<String>,
    /// No progress bar: one plain line per step instead (as in a CI log); `-q` for none.
    #[arg(long)]
    pub(crate) no_progress: bool,
}

impl RunCommonArgs {
    /// The run options these set for runs of `scenario` (whose location gives the golden store
    /// when `--golden` is not set); the rest at their defaults.
    pub(crate) fn options(&self, scenario: &std::path::Path) -> crate::run::runner::RunOptions {
        crate::run::runner::RunOptions {
            seed: self.seed,
            steps: self.steps,
            set: self.set.clone(),
            hardware: self.hardware.clone(),
            progress: !self.no_progress,
            step_lines: true,
            ..crate::run::runner::RunOptions::new(
                self.out.clone(),
                golden_store(self.golden.as_deref(), Some(scenario)),
            )
        }
    }
}

/// The golden store: `--golden` when given; else `golden/` beside the `scenarios/` folder the
/// scenario sits in (as `rlharness check` finds it), so a run from another working directory
/// reads the project's goldens instead of making a `./golden/`; without a scenario, `golden/`
/// here.
pub(crate) fn golden_store(
    given: Option<&std::path::Path>,
    scenario: Option<&std::path::Path>,
) -> PathBuf {
    if let Some(g) = given {
        return g.to_path_buf();
    }
    match scenario {
        Some(s) => {
            let root = crate::scenario::config::scenarios_root(s);
            match root.parent() {
                Some(p) if root.file_name().is_some_and(|n| n == "scenarios") => p.join("golden"),
                _ => PathBuf::from("golden"),
            }
        }
        None => PathBuf::from("golden"),
    }
}

/// Where the runs go: this host, or one Ray job each (`run`, `golden calibrate`).
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct RayArgs {
    /// Where the runs go: here, or one Ray job each (a scenario; a seed of a calibration or of
    /// a bisect's commit; a propagation trial) on the cluster at `--address`.
    #[arg(long, value_enum, default_value = "local")]
    pub(crate) executor: Executor,
    /// The Ray dashboard (jobs API) address, e.g. `http://HEAD:8265` (`--executor ray`).
    #[arg(long, env = "RAY_ADDRESS", required_if_eq("executor", "ray"))]
    pub(crate) address: Option<String>,
    /// `--executor ray`: run the rlharness installed at this path on the workers instead of
    /// shipping this executable (and rlharness-torch beside it) with each job.
    #[arg(long, value_name = "PATH")]
    pub(crate) remote_bin: Option<String>,
    /// `--executor ray`: an environment variable for every job (its runtime_env), e.g.
    /// `LD_LIBRARY_PATH=...` where the workers' libtorch lives.
    #[arg(long = "ray-env", value_name = "KEY=VALUE")]
    pub(crate) ray_env: Vec<String>,
    /// `--executor ray`: the cluster's token (Ray token authentication) is in this file. Without
    /// it: RAY_AUTH_TOKEN, then the file RAY_AUTH_TOKEN_PATH names, then ~/.ray/auth_token with
    /// RAY_AUTH_MODE=token (Ray's own order). The token is never printed.
    #[arg(long, value_name = "PATH")]
    pub(crate) ray_token_file: Option<PathBuf>,
}

/// Where `rlharness run` runs its scenarios (`golden calibrate` its seeds, `propagate` its
/// trials, `bisect` a commit's runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum Executor {
    /// On this host (`--jobs` side by side).
    #[default]
    Local,
    /// One Ray job per run, through the Ray Jobs REST API at `--address`.
    Ray,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct RecordArgs {
    pub(crate) scenario: PathBuf,
    #[command(flatten)]
    pub(crate) common: RunCommonArgs,
    /// Replace the cassette the golden store already holds for this scenario and hardware
    /// (refused without it: a cassette is a reviewed baseline).
    #[arg(long)]
    pub(crate) force: bool,
}

/// Lines for people, or one JSON document for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CompareFormat {
    Summary,
    Md,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum HistoryFormat {
    Summary,
    GhSummary,
    /// One JSON document for scripts (`schema` 1).
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ServeKind {
    Mock,
    Torch,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    pub(crate) kind: ServeKind,
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    #[arg(long, default_value_t = 7000)]
    pub(crate) port: u16,
    /// A scenario whose backend block scripts the server (mock curves, torch model). Without
    /// one, `torch` serves the CPU flagship's tiny model from its shipped warm start.
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// `torch` without a scenario: train a fresh warm start (minutes on a small CPU, with
    /// progress; cached for the next start) instead of serving the shipped one.
    #[arg(long, conflicts_with = "scenario")]
    pub(crate) train_warm_start: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ProxyArgs {
    #[arg(long)]
    pub(crate) upstream: String,
    #[arg(long, default_value = "127.0.0.1:7001")]
    pub(crate) listen: String,
    /// Folder for wire.jsonl and server_config.json.
    #[arg(long)]
    pub(crate) record: PathBuf,
    /// Largest request or response body, in bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024 * 1024)]
    pub(crate) body_limit: u64,
    /// Upstream time-out per request, in seconds.
    #[arg(long, default_value_t = 1800)]
    pub(crate) timeout_s: u64,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct AuditArgs {
    pub(crate) scenario: PathBuf,
    /// Seeds per verdict: 1 audits single runs, N a multi-seed verdict (`run --seeds`).
    #[arg(long, default_value_t = 1)]
    pub(crate) seeds: usize,
    /// Synthetic verdicts for the false-alarm rate.
    #[arg(long, default_value_t = 2000)]
    pub(crate) draws: usize,
    /// Synthetic verdicts per shift for each rule's power (0: no power analysis).
    #[arg(long, default_value_t = 200)]
    pub(crate) power_draws: usize,
    /// The hardware key of the golden (needed when the scenario has several).
    #[arg(long)]
    pub(crate) hardware: Option<String>,
    /// The random stream's seed (the audit is reproducible).
    #[arg(long, default_value_t = 1)]
    pub(crate) rng_seed: u64,
    #[arg(long, value_enum, default_value_t = AuditFormat::Summary)]
    pub(crate) format: AuditFormat,
    /// Keep the false-alarm rate beside the golden (`audit.json`, one entry per seed count),
    /// for every verdict judged against this golden, calibration and checks to state.
    #[arg(long)]
    pub(crate) save: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AuditFormat {
    Summary,
    Json,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct CalibrateArgs {
    pub(crate) scenario: PathBuf,
    /// Runs of the scenario's own seed (the noise of a nondeterministic backend at one seed).
    /// Without `--runs` or `--seeds`: as many runs as the scenario's calibrated windows need
    /// at its false-alarm budget (bands within 10 % of an endless calibration's), one seed
    /// each from the scenario's own.
    #[arg(long, conflicts_with = "seeds")]
    pub(crate) runs: Option<usize>,
    /// `A..B`: one run per seed from A to B (inclusive) instead of `--runs`.
    #[arg(long)]
    pub(crate) seeds: Option<String>,
    /// Runs side by side (a torch CPU scenario with `threads: 1` fits one per core).
    #[arg(long, default_value_t = 1)]
    pub(crate) jobs: usize,
    /// Where the runs' directories go.
    #[arg(long, default_value = "reports")]
    pub(crate) out: PathBuf,
    /// Override the hardware key.
    #[arg(long)]
    pub(crate) hardware: Option<String>,
    /// Override scenario values for every run (as `run --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// `--executor ray --address …`: each seed one Ray job (`run --executor ray`'s options).
    #[command(flatten)]
    pub(crate) ray: RayArgs,
    /// Calibrate from a git tree with uncommitted changes to tracked files (refused by
    /// default: a calibration must name the code and scenario it measured). Recorded as
    /// `<commit>-dirty`; for trying bands out, not for a calibration to commit.
    #[arg(long)]
    pub(crate) allow_dirty: bool,
    /// `5%` (or `0.05`): print, per windowed golden rule and window, the seeds a multi-seed
    /// verdict needs to catch a shift of that fraction of the window's mean 80% of the time.
    /// Reads the existing calibration and runs nothing; without one, calibrates first.
    #[arg(long, value_name = "FRACTION")]
    pub(crate) detect: Option<String>,
    /// Calibrate from the run directories already under DIR (a calibration's `--out`, or any
    /// folder of this scenario's runs: an interrupted calibration's finished runs, runs made
    /// elsewhere) instead of running anything. Runs that did not complete are left out, named;
    /// the runs must come from one commit, which the calibration records.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["runs", "seeds"])]
    pub(crate) from_runs: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AssetsTarget {
    /// For real verl: OUT/model/ (a HuggingFace config of the torch engine's model and a
    /// tokenizer with its ids) and OUT/data/{train,val}.jsonl (GSM8K-shaped rows of the task).
    Verl(VerlAssetsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct VerlAssetsArgs {
    /// The folder to write; it must be empty or absent unless `--force`.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// The scenario whose torch backend (model sizes) and task (operands, operators) the
    /// assets follow.
    #[arg(long, default_value = "scenarios/tiny-gsm8k-grpo.yaml")]
    pub(crate) scenario: PathBuf,
    /// Training rows (the default is 32 steps of 8 prompts).
    #[arg(long, default_value_t = 256)]
    pub(crate) rows: usize,
    /// Validation rows.
    #[arg(long, default_value_t = 64)]
    pub(crate) val_rows: usize,
    /// The seed the rows are drawn from, instead of the scenario's.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Override scenario values, as `run --set`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Write into a folder that is not empty (the files named here are replaced).
    #[arg(long)]
    pub(crate) force: bool,
}
