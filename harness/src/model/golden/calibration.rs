//! Bands calibrated from measured noise: `rlharness golden calibrate` runs a scenario N times
//! (one seed or a range of seeds) and stores, beside its golden, the statistics of every
//! metric at every step and of every golden rule's windows: n, mean, standard deviation, min,
//! max, and the host and numeric fingerprint they were measured on. A golden rule may then say
//! `calibrated: {k: 3, floor: 0.02}`: each of its windows then gets the band
//! `mean ± max(k × σ × √(1 + 1/n), floor)`, the mean, σ and n being the calibration's for that
//! window (a prediction interval for one more run, centred on the calibration's mean rather
//! than on the golden, which is one seed's draw), instead of a hand-picked number. The report
//! says where each band came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::checks::{ChecksSpec, GoldenRule};
use crate::model::metrics::MetricTable;
use rlharness_arctic::fsx;

pub(crate) const CALIBRATION_FILE: &str = "calibration.json";

/// Why `calibration.json` could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error(transparent)]
    Fs(#[from] fsx::FsError),
    #[error(transparent)]
    Encode(serde_json::Error),
    #[error("invalid calibration {}: {source}", path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// The statistics of one point (a step, or a window `first..=last`) over the calibration runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PointStats {
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) n: usize,
    pub(crate) mean: f64,
    /// Sample standard deviation (n − 1); 0 for a single run.
    pub(crate) std: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// Runs whose value here was not finite, left out of the statistics above (never
    /// silently: `golden calibrate` refuses them on a golden rule's metric, and counts them
    /// here for the other series).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) non_finite: usize,
    /// A rule window's point was its median (`true`) or mean (`false`) in every run; absent
    /// for a step, and in calibrations made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) median: Option<bool>,
    /// Every run's finite value here, in the calibration's run order (`seeds`), so a band can
    /// be checked against the runs it came from and `golden audit` can resample them; empty in
    /// calibrations made before they were kept (only the summaries above are then known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) values: Vec<f64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl PointStats {
    fn of(first: u64, last: u64, xs: &[f64]) -> Option<PointStats> {
        let all = xs.len();
        let xs: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        if xs.is_empty() {
            return None;
        }
        let non_finite = all - xs.len();
        let n = xs.len();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Some(PointStats {
            first,
            last,
            n,
            mean,
            std: var.sqrt(),
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            non_finite,
            median: None,
            values: xs,
        })
    }

    /// The window's centre and spread on the log scale: the mean and sample standard deviation
    /// of ln x over the runs' values, or, for a calibration that kept only summaries, those of
    /// the log-normal with this mean and σ. `None` unless every value is positive.
    pub(crate) fn log_stats(&self) -> Option<(f64, f64)> {
        if !self.values.is_empty() {
            if self.values.iter().any(|v| *v <= 0.0) {
                return None;
            }
            let ln: Vec<f64> = self.values.iter().map(|v| v.ln()).collect();
            let n = ln.len() as f64;
            let mean = ln.iter().sum::<f64>() / n;
            let var = if ln.len() > 1 {
                ln.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
            } else {
                0.0
            };
            return Some((mean, var.sqrt()));
        }
        if self.min <= 0.0 || self.mean <= 0.0 {
            return None;
        }
        let s2 = (1.0 + (self.std / self.mean).powi(2)).ln();
        Some((self.mean.ln() - s2 / 2.0, s2.sqrt()))
    }
}

/// What `golden calibrate` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Calibration {
    pub(crate) scenario: String,
    pub(crate) hardware: String,
    /// RFC 3339.
    pub(crate) date: String,
    pub(crate) host: String,
    pub(crate) git_commit: Option<String>,
    pub(crate) numeric_fingerprint: Option<String>,
    pub(crate) runs: usize,
    pub(crate) seeds: Vec<u64>,
    /// Per metric, per step.
    pub(crate) steps: BTreeMap<String, Vec<PointStats>>,
    /// Per golden rule (metric), per window of that rule.
    pub(crate) windows: BTreeMap<String, Vec<PointStats>>,
}

/// The steps a rule compares, chunked into its windows (as the judge chunks them).
fn rule_windows(rule: &GoldenRule, steps: &[u64]) -> Vec<(u64, u64, Vec<u64>)> {
    let range = rule.steps.unwrap_or_default();
    let inside: Vec<u64> = steps
        .iter()
        .copied()
        .filter(|s| range.contains(*s))
        .collect();
    let w = rule.window.unwrap_or(1).max(1) as usize;
    inside
        .chunks(w)
        .map(|c| (c[0], c[c.len() - 1], c.to_vec()))
        .collect()
}

impl Calibration {
    /// Statistics of `runs` (one table per run) for every metric and every golden rule.
    pub(crate) fn measure(
        runs: &[MetricTable],
        checks: &ChecksSpec,
    ) -> (
        BTreeMap<String, Vec<PointStats>>,
        BTreeMap<String, Vec<PointStats>>,
    ) {
        let mut columns: Vec<String> = runs.iter().flat_map(|t| t.columns()).collect();
        columns.sort();
        columns.dedup();
        let mut steps: Vec<u64> = runs.iter().flat_map(|t| t.steps()).collect();
        steps.sort_unstable();
        steps.dedup();
        let value = |t: &MetricTable, m: &str, s: u64| t.row(s).and_then(|r| r.get(m));
        let mut per_step = BTreeMap::new();
        for m in &columns {
            let points: Vec<PointStats> = steps
                .iter()
                .filter_map(|s| {
                    let xs: Vec<f64> = runs.iter().filter_map(|t| value(t, m, *s)).collect();
                    PointStats::of(*s, *s, &xs)
                })
                .collect();
            per_step.insert(m.clone(), points);
        }
        let mut windows = BTreeMap::new();
        for (m, rule) in checks.golden.iter() {
            let points: Vec<PointStats> = rule_windows(rule, &steps)
                .into_iter()
                .filter_map(|(first, last, ws)| {
                    // One window point per run (its mean, or its median for a `median` rule),
                    // over the window's steps that run has.
                    let xs: Vec<f64> = runs
                        .iter()
                        .filter_map(|t| {
                            let v: Vec<f64> = ws.iter().filter_map(|s| value(t, m, *s)).collect();
                            (!v.is_empty()).then(|| rule.window_value(&v))
                        })
                        .collect();
                    PointStats::of(first, last, &xs).map(|p| PointStats {
                        median: Some(rule.median),
                        ..p
                    })
                })
                .collect();
            windows.insert(m.to_string(), points);
        }
        (per_step, windows)
    }

    pub(crate) fn read(dir: &Path) -> Result<Option<Calibration>, CalibrationError> {
        let path = dir.join(CALIBRATION_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = fsx::read_to_string(&path)?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| CalibrationError::Invalid { path, source })
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<PathBuf, CalibrationError> {
        let path = dir.join(CALIBRATION_FILE);
        let mut text = serde_json::to_string_pretty(self).map_err(CalibrationError::Encode)?;
        text.push('\n');
        fsx::create_dir_all(dir)?;
        fsx::write_atomic(&path, text.as_bytes())?;
        Ok(path)
    }

    /// The largest σ measured over a rule's windows (whether the metric was calibrated at all;
    /// the bands themselves are per window).
    pub(crate) fn sigma(&self, metric: &str) -> Option<f64> {
        self.windows
            .get(metric)
            .filter(|p| !p.is_empty())
            .map(|p| p.iter().map(|x| x.std).fold(0.0, f64::max))
    }

    /// Per metric, per step: the runs' mean ± `sigmas` σ, as `(step, low, high)` (what a
    /// multi-seed report's plots shade).
    pub(crate) fn spread(&self, sigmas: f64) -> BTreeMap<String, Vec<(u64, f64, f64)>> {
        self.steps
            .iter()
            .map(|(m, ps)| {
                let band = ps
                    .iter()
                    .map(|p| (p.first, p.mean - sigmas * p.std, p.mean + sigmas * p.std))
                    .collect();
                (m.clone(), band)
            })
            .collect()
    }

    /// Where a calibrated band came from, for the rule's evidence.
    pub(crate) fn source(&self) -> String {
        format!(
            "{} runs on {} (seeds {}{})",
            self.runs,
            self.host,
            seeds_text(&self.seeds),
            self.numeric_fingerprint
                .as_deref()
                .map(|f| format!(", fingerprint {f}"))
                .unwrap_or_default()
        )
    }
}

fn seeds_text(seeds: &[u64]) -> String {
    let (Some(a), Some(b)) = (seeds.iter().min(), seeds.iter().max()) else {
        return "-".into();
    };
    let mut distinct = seeds.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() == 1 {
        format!("{a} only")
    } else {
        format!("{a}..{b}")
    }
}

#[cfg(test)]
impl Calibration {
    /// What `golden calibrate` would write for `runs` (seeds 1 to n, scenario `s` on `cpu`).
    pub(crate) fn of_test_runs(runs: &[MetricTable], checks: &ChecksSpec) -> Self {
        let (steps, windows) = Self::measure(runs, checks);
        Calibration {
            scenario: "s".into(),
            hardware: "cpu".into(),
            date: "d".into(),
            host: "h".into(),
            git_commit: None,
            numeric_fingerprint: None,
            runs: runs.len(),
            seeds: (1..=runs.len() as u64).collect(),
            steps,
            windows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(vals: &[f64]) -> MetricTable {
        MetricTable::from_columns(&[("r", vals)])
    }

    #[test]
    fn steps_and_windows_get_their_statistics() {
        let runs = [run(&[0.1, 0.3, 0.5, 0.7]), run(&[0.3, 0.3, 0.7, 0.7])];
        let checks: ChecksSpec =
            serde_json::from_str(r#"{"golden": {"r": {"window": 2, "calibrated": {"k": 3}}}}"#)
                .unwrap();
        let c = Calibration {
            numeric_fingerprint: Some("abc".into()),
            ..Calibration::of_test_runs(&runs, &checks)
        };
        let s1 = &c.steps["r"][0];
        assert_eq!((s1.n, s1.mean, s1.min, s1.max), (2, 0.2, 0.1, 0.3));
        assert!((s1.std - 0.141421356).abs() < 1e-6, "{s1:?}");
        let w = &c.windows["r"];
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].first, w[0].last), (1, 2));
        // Window means per run: (0.2, 0.3) then (0.6, 0.7).
        assert!((w[0].mean - 0.25).abs() < 1e-12);
        assert!((w[1].std - 0.070710678).abs() < 1e-6, "{:?}", w[1]);
        assert!((c.sigma("r").unwrap() - 0.070710678).abs() < 1e-6);
        assert_eq!(c.sigma("nope"), None);
        assert_eq!(c.source(), "2 runs on h (seeds 1..2, fingerprint abc)");
    }
}
