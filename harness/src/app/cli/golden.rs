//! `rlharness golden ACTION`: the subcommands of the golden store.

use std::path::PathBuf;

use clap::Subcommand;

use super::{AuditArgs, CalibrateArgs, OutputFormat};

#[derive(Debug, Subcommand)]
pub(crate) enum GoldenAction {
    /// List pending goldens with a diff summary (all, or those of the named scenarios).
    Status {
        scenarios: Vec<String>,
        /// Lines for people, or one JSON document for scripts (`schema` 1).
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
    },
    /// Accept pending goldens (all, or those of the named scenarios). With `--widen`: accept
    /// instead the wider bands a new calibration gives the named accepted goldens (which fail
    /// as `loosened:golden:<metric>:band` until then), saying by how much.
    Accept {
        scenarios: Vec<String>,
        #[arg(long)]
        widen: bool,
    },
    /// Reject pending goldens (all, or those of the named scenarios).
    Reject { scenarios: Vec<String> },
    /// Run a scenario N times (or once per seed) and store the measured noise beside its
    /// golden (`calibration.json`), for rules with `calibrated: {k, floor}` bands.
    Calibrate(Box<CalibrateArgs>),
    /// The judge audits itself: the whole verdict's false-alarm rate (every rule, every seed)
    /// and each gating rule's power, from thousands of synthetic runs drawn from the stored
    /// calibration runs and judged by the real judge. Exit 1 when the rate's 95% interval lies
    /// above the scenario's budget (`checks.alpha`) or a rule cannot fail.
    Audit(AuditArgs),
    /// Write a pending golden from a stored run directory: bless exactly the run that was
    /// reviewed (on a nondeterministic backend a rerun is another draw). The run must be a
    /// completed, unplanted run of the scenario file as it is now (same plan hash).
    Bless { run: PathBuf },
}
