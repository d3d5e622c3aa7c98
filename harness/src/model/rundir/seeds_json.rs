//! `seeds.json`: the manifest of a multi-seed run's combined directory (`rlharness run
//! SCENARIO --seeds A..B`), beside one whole run directory per seed (`seed-<S>/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::checks::ExpectedVerdict;
use rlharness_arctic::fsx::{self, FsError};

pub(crate) const SEEDS_FILE: &str = "seeds.json";

#[derive(Debug, thiserror::Error)]
pub enum SeedsFileError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("invalid {}: {source}", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0}")]
    Encode(serde_json::Error),
}

/// `seeds.json`: what a multi-seed run ran. Written before the first seed starts and again
/// when the last one ends, so a run that dies still says what it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SeedsManifest {
    pub(crate) format: String,
    pub(crate) scenario: String,
    pub(crate) scenario_path: String,
    /// The scenario whose golden the seeds are judged against, when not this one (a
    /// multi-seed self-test's `selftest.golden`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) golden: Option<String>,
    pub(crate) seeds: Vec<u64>,
    /// The `--set` overrides and a self-test's plant, in order.
    #[serde(default)]
    pub(crate) overrides: Vec<String>,
    /// A multi-seed self-test's declared verdict (of the combined run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expected_verdict: Option<ExpectedVerdict>,
    pub(crate) started: String,
    #[serde(default)]
    pub(crate) ended: Option<String>,
    /// Seeds whose run could not be made at all (the error, by seed): their directories may
    /// hold no more than a manifest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) errors: BTreeMap<u64, String>,
    /// What the combined verdict was judged against when the run ended (the golden's and the
    /// calibration's digests, each calibrated band as resolved): `compare DIR` says when that
    /// changed since, with both verdicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) judged_against: Option<super::JudgedAgainst>,
}

impl SeedsManifest {
    pub(crate) fn seed_dir(dir: &Path, seed: u64) -> PathBuf {
        dir.join(format!("seed-{seed}"))
    }

    pub(crate) fn read(dir: &Path) -> Result<SeedsManifest, SeedsFileError> {
        let path = dir.join(SEEDS_FILE);
        let text = fsx::read_to_string(&path)?;
        serde_json::from_str(&text).map_err(|source| SeedsFileError::Json { path, source })
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<(), SeedsFileError> {
        let mut text = serde_json::to_string_pretty(self).map_err(SeedsFileError::Encode)?;
        text.push('\n');
        fsx::write_atomic(&dir.join(SEEDS_FILE), text.as_bytes())?;
        Ok(())
    }
}

/// Whether `dir` is a multi-seed run's combined directory.
pub(crate) fn is_combined(dir: &Path) -> bool {
    dir.join(SEEDS_FILE).is_file()
}
