//! `run.json`: the manifest of a run directory. The runner writes exactly this struct; the judge
//! reads it back to re-judge a stored run without running anything, `report` to show it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::JudgedAgainst;
use super::{DroppedValue, ReplayRecord, RunStatus, Stray, WeightSyncRecord, MANIFEST_FILE};
use crate::model::checks::{ChecksSpec, ExpectedVerdict};
use rlharness_arctic::fsx;
use rlharness_arctic::wire::runtime::Numerics;

/// A scenario value that differs from its default, and where the value came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobDiff {
    /// Dotted path, e.g. `config.actor_rollout_ref.actor.optim.lr`.
    pub(crate) key: String,
    /// The default, as text (`None` when the knob has no default).
    pub(crate) default: Option<String>,
    pub(crate) value: String,
    /// `scenarios/x.yaml:12:5`, `--set`, `backends/arctic.yaml:3:1`, ...
    pub(crate) origin: String,
}

/// How a command trainer was started (`run.json`'s `trainer_command`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TrainerCommand {
    /// The program and its arguments, as started (before any namespace wrapper).
    pub argv: Vec<String>,
    /// The variables the harness set on top of its own environment.
    pub env: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunManifest {
    /// The scenario's name (the golden store's first key).
    pub(crate) scenario: String,
    /// The scenario file, relative to where the harness ran.
    pub(crate) scenario_path: String,
    /// The golden hardware key (`cpu`, `h200`, ...).
    pub(crate) hardware: String,
    pub status: RunStatus,
    /// Why the run ended as it did when it did not complete (or why it was skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The step the run failed or stopped at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<u64>,
    pub seed: u64,
    /// Planned steps.
    pub(crate) steps: u64,
    #[serde(default)]
    pub(crate) checks: ChecksSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expected_verdict: Option<ExpectedVerdict>,
    pub(crate) harness_version: String,
    /// The commit of the checkout the run was started in (its scenarios and goldens).
    #[serde(default)]
    pub(crate) git_commit: Option<String>,
    /// What `run --label` named the code under test (a container tag, a CI build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<String>,
    /// The trainer's sources, by the variable that names them (a command driver's `sources`):
    /// `git describe --always --dirty` of each checkout, or why there is none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) trainer_sources: std::collections::BTreeMap<String, String>,
    /// A command trainer's start: its program and arguments (the Hydra overrides the harness
    /// built) and the environment the harness set for it (a secret's value as a digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) trainer_command: Option<TrainerCommand>,
    /// A run of `golden calibrate`: no history counts it as a run of the scenario.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub calibration: bool,
    /// The commit the binary was built from; differs from `git_commit` when a binary runs in
    /// another tree (a copied working tree on a GPU box).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) build_commit: Option<String>,
    pub(crate) host: String,
    /// The device as reported (`cpu`, `NVIDIA H200`).
    pub(crate) device: String,
    #[serde(default)]
    pub(crate) threads: Option<u64>,
    #[serde(default)]
    pub(crate) torch_version: Option<String>,
    /// A deterministic backend's numeric fingerprint and CPU kernel pinning: a golden of the
    /// same fingerprint is held bit for bit (the exact lane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) numerics: Option<Numerics>,
    /// RFC 3339.
    pub(crate) started: String,
    #[serde(default)]
    pub(crate) ended: Option<String>,
    pub(crate) plan_hash: String,
    pub(crate) scenario_hash: String,
    /// Knobs that differ from the defaults.
    #[serde(default)]
    pub(crate) knobs: Vec<KnobDiff>,
    /// A self-test's planted run: the directory of the reference run it was judged against
    /// (its golden), as given to the harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_run: Option<String>,
    /// What the run's verdict was judged against: the golden's and its calibration's
    /// digests, and every calibrated band as resolved then. `compare RUN` says when they
    /// changed since, with both verdicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged_against: Option<JudgedAgainst>,
    /// Set when this run wrote a pending golden (the path of its `metrics.csv.new`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pending_golden: Option<String>,
    /// Facts the report must state about how the run was observed (e.g. "no wire observed").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Values kept out of `metrics.csv` because they cannot be true (an MFU outside (0, 1]);
    /// the judge fails a sanity rule on each and lets expectations see them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) dropped: Vec<DroppedValue>,
    /// A replay backend's account of the requests it was sent (the replay rule's evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) replay: Option<ReplayRecord>,
    /// Processes an external trainer left running outside its process group, which the
    /// harness stopped after it (`run/driver/strays.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strays: Vec<Stray>,
    /// The builtin driver's exact check of each weight sync (`/weight-digest`): the syncs it
    /// compared, each one that differed with its first differing tensor, or why it could not
    /// compare; the rule `weight_sync:match` reads it. Absent where nothing checked a sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) weight_sync: Option<WeightSyncRecord>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Fs(#[from] fsx::FsError),
    #[error("invalid run manifest {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl RunManifest {
    /// The version of the code under test beyond the harness's own commit: the label, else
    /// the trainer's sources (`VERL_SRC v0.7.1-3-gabc, ARCTIC_SRC 5864380`); `None` when the
    /// run recorded neither.
    pub(crate) fn code_version(&self) -> Option<String> {
        if let Some(l) = &self.label {
            return Some(l.clone());
        }
        let parts: Vec<String> = self
            .trainer_sources
            .iter()
            .map(|(var, v)| format!("{var} {v}"))
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    pub fn read(dir: &Path) -> Result<RunManifest, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let text = fsx::read_to_string(&path)?;
        serde_json::from_str(&text).map_err(|source| ManifestError::Json { path, source })
    }

    pub fn write(&self, dir: &Path) -> Result<(), ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let mut text =
            serde_json::to_string_pretty(self).map_err(|source| ManifestError::Json {
                path: path.clone(),
                source,
            })?;
        text.push('\n');
        fsx::write_atomic(&path, text.as_bytes())?;
        Ok(())
    }
}
