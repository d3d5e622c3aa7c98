//! A stored run read back for the judge: its manifest and series (`rundir`), and the golden it
//! is judged against (the store's, or a self-test's reference run standing as one).

use std::path::{Path, PathBuf};

use super::headline::Judged;
use super::run::{judge_run, RunRecord};
use super::verdict::Verdict;
use crate::model::golden::{
    metrics_digest, Golden, GoldenDigest, GoldenError, GoldenStore, Provenance,
};
use crate::model::metrics::MetricTable;
use crate::model::rundir::{self, RunDirError, RunManifest, METRICS_FILE};

#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error(transparent)]
    Golden(#[from] GoldenError),
}

/// A stored run and what the judge made of it.
#[derive(Debug, Clone)]
pub(crate) struct StoredRun {
    pub(crate) dir: PathBuf,
    pub(crate) manifest: RunManifest,
    pub(crate) metrics: MetricTable,
    /// What the run was judged against.
    pub(crate) golden: Option<Golden>,
    pub(crate) verdict: Option<Verdict>,
}

impl StoredRun {
    /// Judge the run in `dir` as `run` judged it: the same judge on what the directory stores,
    /// against its golden under `golden_root` (or its self-test reference run).
    pub(crate) fn judge(dir: &Path, golden_root: &Path) -> Result<StoredRun, StoredError> {
        let (manifest, metrics) = rundir::load(dir)?;
        let golden = golden_of_run(&manifest, golden_root)?;
        let verdict = judge_run(&RunRecord::of(&manifest, &metrics), golden.as_ref());
        Ok(StoredRun {
            dir: dir.to_path_buf(),
            manifest,
            metrics,
            golden,
            verdict,
        })
    }

    /// The pending golden the run wrote, unless it was judged against a golden since.
    pub(crate) fn pending_golden(&self) -> Option<&str> {
        match self.golden {
            Some(_) => None,
            None => self.manifest.pending_golden.as_deref(),
        }
    }

    /// What changed in its golden or calibration since `run` judged it (`run.json`'s
    /// `judged_against` against what it is judged against now), in words; `None` when nothing
    /// did, or the run did not record it.
    pub(crate) fn changed_since(&self) -> Option<String> {
        let then = self.manifest.judged_against.as_ref()?;
        let now = (self.golden.as_ref()).map(|g| super::judged_against(&self.manifest.checks, g));
        then.changes_to(now.as_ref())
    }

    /// What decides its headline.
    pub(crate) fn judged(&self) -> Judged<'_> {
        Judged {
            pending_golden: self.pending_golden(),
            ..Judged::of_run(&self.manifest, self.verdict.as_ref())
        }
    }
}

/// The provenance of a golden made from a run: what its manifest says of the run, dated `date`.
pub(crate) fn provenance_of_run(m: &RunManifest, date: String) -> Provenance {
    Provenance {
        date,
        harness_version: m.harness_version.clone(),
        // The code that made the numbers: the binary's commit where it is known.
        git_commit: m.build_commit.clone().or_else(|| m.git_commit.clone()),
        device: m.device.clone(),
        seed: Some(m.seed),
        threads: m.threads,
        torch_version: m.torch_version.clone(),
        source: None,
        numeric_fingerprint: m.numerics.as_ref().map(|n| n.fingerprint.clone()),
        cpu_isa: m
            .numerics
            .as_ref()
            .and_then(|n| n.cpu_kernels.as_ref())
            .map(|k| k.isa.clone()),
    }
}

/// A run as the golden another run is judged against: a self-test's reference run, or the
/// second run of `compare RUN RUN2`.
pub(crate) fn reference_golden(dir: &Path, m: &RunManifest, table: MetricTable) -> Golden {
    Golden {
        scenario: m.scenario.clone(),
        hardware: m.hardware.clone(),
        table,
        provenance: provenance_of_run(m, m.ended.clone().unwrap_or_else(|| m.started.clone())),
        rules: None,
        bands: None,
        dir: dir.to_path_buf(),
        calibration: None,
        digest: GoldenDigest {
            golden: std::fs::read(dir.join(METRICS_FILE))
                .map(|b| metrics_digest(&b))
                .unwrap_or_default(),
            calibration: None,
        },
        audit: None,
    }
}

/// The golden a stored run was judged against: its self-test reference run, or the store's.
pub(crate) fn golden_of_run(
    manifest: &RunManifest,
    golden_root: &Path,
) -> Result<Option<Golden>, StoredError> {
    match &manifest.reference_run {
        Some(dir) => {
            let dir = Path::new(dir);
            let (m, t) = rundir::load(dir)?;
            Ok(Some(reference_golden(dir, &m, t)))
        }
        None => Ok(GoldenStore::new(golden_root).load(&manifest.scenario, &manifest.hardware)?),
    }
}
