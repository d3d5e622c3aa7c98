//! The store's folders: a golden's load, its pending pair, accept and reject, and what a
//! pending golden changes.

use std::path::{Path, PathBuf};

use super::header::{header_digest, metrics_digest, parse_header, render_header};
use super::{
    calibration, BlessedBands, Golden, GoldenDigest, GoldenError, Pending, Provenance, HEADER_FILE,
    METRICS_FILE, PENDING_SUFFIX,
};
use crate::model::checks::ChecksSpec;
use crate::model::metrics::MetricTable;
use rlharness_arctic::fsx;

fn check_name(what: &'static str, name: &str, allow_slash: bool) -> Result<(), GoldenError> {
    let ok = !name.is_empty()
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
        && (allow_slash || !name.contains('/'))
        && !name.starts_with('_');
    if ok {
        Ok(())
    } else {
        Err(GoldenError::BadName {
            what,
            name: name.to_string(),
        })
    }
}

fn pending_path(dir: &Path, file: &str) -> PathBuf {
    dir.join(format!("{file}{PENDING_SUFFIX}"))
}

#[derive(Debug, Clone)]
pub struct GoldenStore {
    root: PathBuf,
    ci: bool,
}

impl GoldenStore {
    /// A store at `root`; writes are refused when the environment says `CI=true`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        Self::with_ci(root, ci)
    }

    /// Tests pass the CI flag directly instead of racing on the process environment.
    pub fn with_ci(root: impl Into<PathBuf>, ci: bool) -> Self {
        Self {
            root: root.into(),
            ci,
        }
    }

    pub(crate) fn dir(&self, scenario: &str, hardware: &str) -> Result<PathBuf, GoldenError> {
        check_name("scenario name", scenario, true)?;
        check_name("hardware key", hardware, false)?;
        Ok(self.root.join(scenario).join(hardware))
    }

    /// The accepted golden, or `None` when there is none yet.
    pub fn load(&self, scenario: &str, hardware: &str) -> Result<Option<Golden>, GoldenError> {
        let dir = self.dir(scenario, hardware)?;
        let csv = dir.join(METRICS_FILE);
        if !csv.exists() {
            return Ok(None);
        }
        read_golden(scenario, hardware, &dir, &csv, &dir.join(HEADER_FILE)).map(Some)
    }

    /// Write the run's series as a pending golden for review. Returns the pending series path.
    pub fn write_pending(
        &self,
        scenario: &str,
        hardware: &str,
        table: &MetricTable,
        provenance: &Provenance,
        rules: Option<&ChecksSpec>,
        bands: Option<&BlessedBands>,
    ) -> Result<PathBuf, GoldenError> {
        let dir = self.dir(scenario, hardware)?;
        if self.ci {
            return Err(GoldenError::CiRefused {
                scenario: scenario.into(),
                hardware: hardware.into(),
            });
        }
        let header = render_header(scenario, hardware, table, provenance, rules, bands);
        // The header goes first: a pending series is only ever seen with its header.
        fsx::write_atomic(&pending_path(&dir, HEADER_FILE), header.as_bytes())?;
        let csv = pending_path(&dir, METRICS_FILE);
        fsx::write_atomic(&csv, table.to_csv().as_bytes())?;
        Ok(csv)
    }

    /// Every pending golden under the root, sorted, with a summary of what it changes.
    pub(crate) fn pending(&self) -> Result<Vec<Pending>, GoldenError> {
        let mut dirs = Vec::new();
        find_pending(&self.root, &mut dirs)?;
        dirs.sort();
        let mut out = Vec::new();
        for dir in dirs {
            let rel = dir.strip_prefix(&self.root).unwrap_or(&dir);
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let Some((hw, scen)) = parts.split_last() else {
                continue;
            };
            if scen.is_empty() {
                continue;
            }
            let scenario = scen.join("/");
            let diff_summary = diff_summary(&dir)?;
            out.push(Pending {
                scenario,
                hardware: hw.clone(),
                dir,
                diff_summary,
            });
        }
        Ok(out)
    }

    pub(crate) fn select(&self, filter: &[String]) -> Result<Vec<Pending>, GoldenError> {
        let all = self.pending()?;
        if filter.is_empty() {
            return Ok(all);
        }
        let chosen: Vec<Pending> = all
            .into_iter()
            .filter(|p| {
                filter.iter().any(|f| {
                    let f = f.trim_end_matches('/');
                    *f == p.scenario || *f == format!("{}/{}", p.scenario, p.hardware)
                })
            })
            .collect();
        if chosen.is_empty() {
            return Err(GoldenError::NoPending(filter.join(", ")));
        }
        Ok(chosen)
    }

    /// Rewrite an accepted golden's `golden.yaml` with `bands` as the widths it was blessed
    /// with (`golden accept --widen`): its series, provenance and rules stay as they are.
    pub(crate) fn rewrite_bands(
        &self,
        golden: &Golden,
        bands: &BlessedBands,
    ) -> Result<PathBuf, GoldenError> {
        if self.ci {
            return Err(GoldenError::CiRefused {
                scenario: golden.scenario.clone(),
                hardware: golden.hardware.clone(),
            });
        }
        let header = render_header(
            &golden.scenario,
            &golden.hardware,
            &golden.table,
            &golden.provenance,
            golden.rules.as_ref(),
            Some(bands),
        );
        let path = golden.dir.join(HEADER_FILE);
        fsx::write_atomic(&path, header.as_bytes())?;
        Ok(path)
    }

    /// Make pending goldens the accepted ones (all, or those whose scenario or
    /// `scenario/hardware` is named).
    pub fn accept(&self, filter: &[String]) -> Result<Vec<Pending>, GoldenError> {
        let chosen = self.select(filter)?;
        if self.ci {
            if let Some(p) = chosen.first() {
                return Err(GoldenError::CiRefused {
                    scenario: p.scenario.clone(),
                    hardware: p.hardware.clone(),
                });
            }
        }
        for p in &chosen {
            let header = pending_path(&p.dir, HEADER_FILE);
            let csv = pending_path(&p.dir, METRICS_FILE);
            if !header.exists() {
                return Err(GoldenError::TornPending {
                    path: p.dir.clone(),
                    missing: "golden.yaml.new",
                });
            }
            if csv.exists() {
                // Validate before replacing anything: a broken pending file must not win, nor
                // one whose rules read a metric its run never had (they would only ever say
                // `missing`).
                let g = read_golden(&p.scenario, &p.hardware, &p.dir, &csv, &header)?;
                let columns = g.table.columns();
                let rules = g
                    .rules
                    .as_ref()
                    .map(|r| r.golden.iter().map(|(m, _)| m.to_string()));
                if let Some(metric) = rules.into_iter().flatten().find(|m| !columns.contains(m)) {
                    return Err(GoldenError::RuleWithoutSeries {
                        dir: p.dir.clone(),
                        metric,
                    });
                }
                // The series first, the header last (see the module's note).
                fsx::rename(&csv, &p.dir.join(METRICS_FILE))?;
            } else if !finishes_an_accept(&p.dir)? {
                return Err(GoldenError::TornPending {
                    path: p.dir.clone(),
                    missing: "metrics.csv.new",
                });
            }
            fsx::rename(&header, &p.dir.join(HEADER_FILE))?;
        }
        Ok(chosen)
    }

    /// Delete pending goldens (all, or the named ones); the accepted ones stay.
    pub(crate) fn reject(&self, filter: &[String]) -> Result<Vec<Pending>, GoldenError> {
        let chosen = self.select(filter)?;
        for p in &chosen {
            for f in [METRICS_FILE, HEADER_FILE] {
                let path = pending_path(&p.dir, f);
                if path.exists() {
                    fsx::remove_file(&path)?;
                }
            }
        }
        Ok(chosen)
    }
}

/// Whether `dir` is an accept cut short: no pending series, and a pending header whose digest
/// is that of the series already in place.
fn finishes_an_accept(dir: &Path) -> Result<bool, GoldenError> {
    let header = pending_path(dir, HEADER_FILE);
    let accepted = dir.join(METRICS_FILE);
    if pending_path(dir, METRICS_FILE).exists() || !header.exists() || !accepted.exists() {
        return Ok(false);
    }
    let text = fsx::read_to_string(&header)?;
    parse_header(&text, &header)?;
    Ok(header_digest(&text)
        .is_some_and(|want| fsx::read(&accepted).is_ok_and(|bytes| metrics_digest(&bytes) == want)))
}

fn find_pending(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), GoldenError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(fsx::FsError {
                action: "list",
                path: dir.to_path_buf(),
                source,
            }
            .into())
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            // `_` and `.` folders are never goldens.
            if !name.starts_with('_') && !name.starts_with('.') {
                find_pending(&path, out)?;
            }
        } else if (name == format!("{METRICS_FILE}{PENDING_SUFFIX}")
            || name == format!("{HEADER_FILE}{PENDING_SUFFIX}"))
            && !out.iter().any(|d| d == dir)
        {
            // Either file marks a pending golden: a header alone is an accept cut short, or
            // a run that died before writing its series (`accept` tells them apart).
            out.push(dir.to_path_buf());
        }
    }
    Ok(())
}

fn read_golden(
    scenario: &str,
    hardware: &str,
    dir: &Path,
    csv: &Path,
    header: &Path,
) -> Result<Golden, GoldenError> {
    let table = MetricTable::read_csv(csv)?;
    let mut digest = GoldenDigest::default();
    let (provenance, rules, bands) = if header.exists() {
        let text = fsx::read_to_string(header)?;
        digest.golden =
            metrics_digest(&[fsx::read(csv)?.as_slice(), b"\n", text.as_bytes()].concat());
        let parsed = parse_header(&text, header)?;
        if let Some(want) = header_digest(&text) {
            let got = metrics_digest(&fsx::read(csv)?);
            if got != want {
                let accepted = header == dir.join(HEADER_FILE);
                let hint = if accepted && pending_path(dir, HEADER_FILE).exists() {
                    "; an interrupted `rlharness golden accept`: run it again to finish"
                } else {
                    "; the files were changed by hand or come from different runs"
                };
                return Err(GoldenError::Mismatch {
                    dir: dir.to_path_buf(),
                    want,
                    got,
                    hint,
                });
            }
        }
        parsed
    } else {
        return Err(GoldenError::Header {
            path: header.to_path_buf(),
            message: "the file is missing (every golden needs its provenance header)".into(),
        });
    };
    let calibration = calibration::Calibration::read(dir)?;
    if calibration.is_some() {
        digest.calibration = Some(metrics_digest(&fsx::read(
            &dir.join(calibration::CALIBRATION_FILE),
        )?));
    }
    Ok(Golden {
        scenario: scenario.into(),
        hardware: hardware.into(),
        table,
        provenance,
        rules,
        bands,
        dir: dir.to_path_buf(),
        calibration,
        digest,
        audit: super::audit_record::AuditRecord::read(dir)?,
    })
}

/// What a pending golden changes relative to the accepted one.
fn diff_summary(dir: &Path) -> Result<String, GoldenError> {
    let pending_csv = pending_path(dir, METRICS_FILE);
    if !pending_csv.exists() {
        return Ok(if finishes_an_accept(dir)? {
            "an accept cut short: the new series is in place, `golden accept` installs its header"
                .into()
        } else {
            "torn: golden.yaml.new without metrics.csv.new (a run died while writing it); \
             `golden reject` removes it"
                .into()
        });
    }
    let new = MetricTable::read_csv(&pending_csv)?;
    let old_path = dir.join(METRICS_FILE);
    if !old_path.exists() {
        return Ok(format!(
            "new golden: {} steps, {} metrics",
            new.len(),
            new.columns().len()
        ));
    }
    let old = MetricTable::read_csv(&old_path)?;
    Ok(summarize_change(&old, &new))
}

/// `20 -> 15 steps; 3 of 34 metrics changed (largest: critic/rewards/mean |Δ| 0.012 at step 7);
/// added: x; removed: y`.
pub(crate) fn summarize_change(old: &MetricTable, new: &MetricTable) -> String {
    let (oc, nc) = (old.columns(), new.columns());
    let added: Vec<&String> = nc.iter().filter(|c| !oc.contains(c)).collect();
    let removed: Vec<&String> = oc.iter().filter(|c| !nc.contains(c)).collect();
    let mut changed: Vec<(String, f64, u64)> = Vec::new();
    for c in nc.iter().filter(|c| oc.contains(c)) {
        let o = old.series(c);
        let mut worst: Option<(f64, u64)> = None;
        let mut differs = false;
        for (s, v) in new.series(c) {
            let Ok(i) = o.binary_search_by_key(&s, |(os, _)| *os) else {
                continue;
            };
            let ov = o[i].1;
            let same = ov == v || (ov.is_nan() && v.is_nan());
            if !same {
                differs = true;
                let d = (v - ov).abs();
                let d = if d.is_nan() { f64::INFINITY } else { d };
                if worst.is_none_or(|(w, _)| d > w) {
                    worst = Some((d, s));
                }
            }
        }
        if differs {
            if let Some((d, s)) = worst {
                changed.push((c.clone(), d, s));
            }
        }
    }
    let mut parts = Vec::new();
    if old.steps() != new.steps() {
        parts.push(format!("{} -> {} steps", old.len(), new.len()));
    } else {
        parts.push(format!("{} steps", new.len()));
    }
    if changed.is_empty() {
        parts.push("no value changed".into());
    } else {
        changed.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (m, d, s) = &changed[0];
        parts.push(format!(
            "{} of {} metrics changed (largest: {m} |Δ| {} at step {s})",
            changed.len(),
            nc.len(),
            crate::model::metrics::format_value(*d)
        ));
    }
    if !added.is_empty() {
        parts.push(format!(
            "added: {}",
            added
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !removed.is_empty() {
        parts.push(format!(
            "removed: {}",
            removed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    parts.join("; ")
}
