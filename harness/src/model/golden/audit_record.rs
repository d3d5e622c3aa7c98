//! `audit.json`: the audit of a golden's verdict design (`rlharness golden audit --save`),
//! kept beside its calibration so that every verdict judged against it can state its measured
//! false-alarm rate. An audit holds for the golden, the calibration and the checks it was made
//! with (their digests); a verdict whose checks or golden differ says it is not audited.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::checks::ChecksSpec;
use rlharness_arctic::fsx::{self, FsError};

pub const AUDIT_FILE: &str = "audit.json";

/// The schema of `audit.json`.
pub(crate) const AUDIT_RECORD_FORMAT: &str = "rlharness-audit/1";

/// One audit: the rate of a design with one seed count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditFigures {
    /// Seeds per verdict: 1 for single runs.
    pub seeds: usize,
    pub draws: usize,
    pub false_alarms: usize,
    pub false_alarm_rate: f64,
    /// Clopper–Pearson, 95 %.
    pub false_alarm_ci: [f64; 2],
    /// The smallest reward (or first windowed rule's) drop caught 80 % of the time, as the
    /// audit printed it, when a power analysis ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smallest_shift: Option<String>,
}

/// `audit.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub format: String,
    /// The golden's digest (`metrics.csv` with `golden.yaml`) the audit judged against.
    pub golden: String,
    /// The calibration's digest.
    pub calibration: String,
    /// The digest of the checks (the scenario's `checks:` as resolved).
    pub checks: String,
    /// One entry per seed count, in seed order.
    pub audits: Vec<AuditFigures>,
}

/// Why `audit.json` could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum AuditRecordError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("invalid {path}: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The digest of a scenario's checks, as an audit and a verdict compare them.
pub(crate) fn checks_digest(checks: &ChecksSpec) -> String {
    let text = serde_json::to_vec(checks).unwrap_or_default();
    super::metrics_digest(&text)
}

impl AuditRecord {
    pub(crate) fn read(dir: &Path) -> Result<Option<AuditRecord>, AuditRecordError> {
        let path = dir.join(AUDIT_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = fsx::read_to_string(&path)?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| AuditRecordError::Json {
                path: path.display().to_string(),
                source,
            })
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<(), AuditRecordError> {
        let mut text =
            serde_json::to_string_pretty(self).map_err(|source| AuditRecordError::Json {
                path: dir.join(AUDIT_FILE).display().to_string(),
                source,
            })?;
        text.push('\n');
        fsx::write_atomic(&dir.join(AUDIT_FILE), text.as_bytes())?;
        Ok(())
    }

    /// Whether it was made for this golden, calibration and checks.
    pub(crate) fn holds_for(&self, golden: &super::Golden, checks: &ChecksSpec) -> bool {
        Some(&self.calibration) == golden.digest.calibration.as_ref()
            && self.golden == golden.digest.golden
            && self.checks == checks_digest(checks)
    }

    /// This record with `figures` in place of the entry of the same seed count; a record made
    /// for another golden, calibration or checks is started afresh.
    pub(crate) fn updated(
        old: Option<AuditRecord>,
        golden: &super::Golden,
        checks: &ChecksSpec,
        figures: AuditFigures,
    ) -> AuditRecord {
        let mut rec = match old {
            Some(r) if r.holds_for(golden, checks) => r,
            _ => AuditRecord {
                format: AUDIT_RECORD_FORMAT.into(),
                golden: golden.digest.golden.clone(),
                calibration: golden.digest.calibration.clone().unwrap_or_default(),
                checks: checks_digest(checks),
                audits: Vec::new(),
            },
        };
        rec.audits.retain(|a| a.seeds != figures.seeds);
        rec.audits.push(figures);
        rec.audits.sort_by_key(|a| a.seeds);
        rec
    }
}
