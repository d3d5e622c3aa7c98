//! The per-step metric model: one row per training step, one column per metric name (verl's
//! names, e.g. `critic/rewards/mean`). `metrics.csv` is its on-disk form: `step` first, then
//! the metric columns in sorted order; an empty cell is a metric missing at that step;
//! non-finite values are written `NaN`, `inf`, `-inf`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rlharness_arctic::fsx;

pub(crate) mod json_f64;
mod range;
pub(crate) mod tensorboard;

pub(crate) use range::StepRange;
pub use rlharness_arctic::flops::ModelSpec;
pub(crate) use rlharness_arctic::flops::{promised_peak_flops, ModelShape};

/// The scenario's `metrics` block: what MFU is computed against, which metrics the watchdog
/// watches for non-finite values, and whether the series also goes to TensorBoard.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsSpec {
    /// The model shape for verl's FLOP formula (`perf/mfu/actor`).
    #[serde(default)]
    pub(crate) model: Option<ModelSpec>,
    /// The device whose promised peak divides MFU (`h200`, `a100`, ...).
    #[serde(default)]
    pub(crate) device: Option<String>,
    /// Metrics whose NaN or infinity aborts the run.
    #[serde(default)]
    pub(crate) watch: Vec<String>,
    /// Fault injection for self-tests: keep these metrics out of the series (at every step, or
    /// at `steps`), as an integration that stops logging a metric would. Recorded in the plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) suppress: Vec<Suppress>,
    /// Also write the series, step by step, as TensorBoard event files into
    /// `<run dir>/tensorboard/` (`tensorboard.rs`), with the golden and the bands after judging.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) tensorboard: bool,
}

/// One `metrics.suppress` entry: `{metric: perf/throughput, steps: "3..5"}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Suppress {
    pub(crate) metric: String,
    /// The steps it is missing at (default: every step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) steps: Option<StepRange>,
}

impl MetricsSpec {
    /// Remove the suppressed metrics from one step's values.
    pub(crate) fn suppress_in(&self, m: &mut StepMetrics) {
        for s in &self.suppress {
            if s.steps.is_none_or(|r| r.contains(m.step)) {
                m.values.remove(&s.metric);
            }
        }
    }
}

/// The metrics of one training step (steps start at 1, like verl's).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct StepMetrics {
    pub step: u64,
    pub(crate) values: BTreeMap<String, f64>,
}

impl StepMetrics {
    pub fn new(step: u64) -> Self {
        Self {
            step,
            values: BTreeMap::new(),
        }
    }
    pub fn insert(&mut self, name: impl Into<String>, value: f64) {
        self.values.insert(name.into(), value);
    }
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).copied()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(transparent)]
    Fs(#[from] fsx::FsError),
    #[error("{path}: line {line}: {message}")]
    Parse {
        path: PathBuf,
        line: u64,
        message: String,
    },
}

/// A series at a glance: its first and last values, its least, greatest and mean (each NaN
/// when any value is).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SeriesSummary {
    pub(crate) first: f64,
    pub(crate) last: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) mean: f64,
}

impl SeriesSummary {
    fn of(series: &[(u64, f64)]) -> Option<SeriesSummary> {
        let (first, last) = (series.first()?.1, series.last()?.1);
        let values = || series.iter().map(|(_, v)| *v);
        if values().any(f64::is_nan) {
            let nan = f64::NAN;
            return Some(SeriesSummary {
                first,
                last,
                min: nan,
                max: nan,
                mean: nan,
            });
        }
        Some(SeriesSummary {
            first,
            last,
            min: values().fold(f64::INFINITY, f64::min),
            max: values().fold(f64::NEG_INFINITY, f64::max),
            mean: values().sum::<f64>() / series.len() as f64,
        })
    }
}

/// All steps of a run (or of a golden), ordered by step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricTable {
    rows: Vec<StepMetrics>,
}

impl MetricTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// A table from named columns, row `i` at step `i + 1`; a column shorter than the longest
    /// has no value at the steps past its end. Values go in as given, NaN included.
    pub fn from_columns(cols: &[(&str, &[f64])]) -> Self {
        let mut t = Self::new();
        let n = cols.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        for i in 0..n {
            let mut m = StepMetrics::new(i as u64 + 1);
            for (name, v) in cols {
                if let Some(x) = v.get(i) {
                    m.insert(*name, *x);
                }
            }
            t.push(m);
        }
        t
    }

    /// Add or replace the row of `m.step`, keeping rows sorted by step.
    pub fn push(&mut self, m: StepMetrics) {
        match self.rows.binary_search_by_key(&m.step, |r| r.step) {
            Ok(i) => self.rows[i] = m,
            Err(i) => self.rows.insert(i, m),
        }
    }

    pub fn rows(&self) -> &[StepMetrics] {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn steps(&self) -> Vec<u64> {
        self.rows.iter().map(|r| r.step).collect()
    }

    pub(crate) fn last_step(&self) -> Option<u64> {
        self.rows.last().map(|r| r.step)
    }

    /// Every metric name seen at any step, sorted.
    pub fn columns(&self) -> Vec<String> {
        let mut set = BTreeSet::new();
        for r in &self.rows {
            set.extend(r.values.keys().cloned());
        }
        set.into_iter().collect()
    }

    /// `(step, value)` for every step that has the metric.
    pub fn series(&self, name: &str) -> Vec<(u64, f64)> {
        self.rows
            .iter()
            .filter_map(|r| r.get(name).map(|v| (r.step, v)))
            .collect()
    }

    /// One metric's series at a glance (`None` when no step has it).
    pub(crate) fn summary(&self, name: &str) -> Option<SeriesSummary> {
        SeriesSummary::of(&self.series(name))
    }

    pub fn row(&self, step: u64) -> Option<&StepMetrics> {
        self.rows
            .binary_search_by_key(&step, |r| r.step)
            .ok()
            .map(|i| &self.rows[i])
    }

    pub fn to_csv(&self) -> String {
        let cols = self.columns();
        let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
        let mut header = vec!["step".to_string()];
        header.extend(cols.iter().cloned());
        // Writing to a Vec cannot fail.
        w.write_record(&header).expect("csv write to memory");
        for r in &self.rows {
            let mut rec = vec![r.step.to_string()];
            for c in &cols {
                rec.push(r.get(c).map(format_value).unwrap_or_default());
            }
            w.write_record(&rec).expect("csv write to memory");
        }
        String::from_utf8(w.into_inner().expect("csv flush to memory")).expect("csv is utf-8")
    }

    pub(crate) fn from_csv_str(text: &str, path: &Path) -> Result<Self, MetricsError> {
        let perr = |line: u64, message: String| MetricsError::Parse {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut rdr = csv::ReaderBuilder::new().from_reader(text.as_bytes());
        let header = rdr
            .headers()
            .map_err(|e| perr(1, format!("bad header: {e}")))?
            .clone();
        if header.get(0) != Some("step") {
            return Err(perr(1, "the first column must be `step`".into()));
        }
        let mut table = MetricTable::new();
        for rec in rdr.records() {
            let rec = rec.map_err(|e| {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                perr(line, e.to_string())
            })?;
            let line = rec.position().map(|p| p.line()).unwrap_or(0);
            let step: u64 = rec[0]
                .trim()
                .parse()
                .map_err(|_| perr(line, format!("step `{}` is not an integer", &rec[0])))?;
            let mut m = StepMetrics::new(step);
            for (name, cell) in header.iter().zip(rec.iter()).skip(1) {
                let cell = cell.trim();
                if cell.is_empty() {
                    continue;
                }
                let v = parse_value(cell).ok_or_else(|| {
                    perr(line, format!("column `{name}`: `{cell}` is not a number"))
                })?;
                m.insert(name, v);
            }
            table.push(m);
        }
        Ok(table)
    }

    pub fn read_csv(path: &Path) -> Result<Self, MetricsError> {
        let text = fsx::read_to_string(path)?;
        Self::from_csv_str(&text, path)
    }
}

/// Shortest text that reads back to the same f64; non-finite as `NaN`, `inf`, `-inf`.
pub(crate) fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        let s = format!("{v}");
        s
    }
}

/// Read a metric cell: numbers, `NaN`/`nan`, `inf`/`Infinity` with sign.
pub(crate) fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" | "nan" | "NAN" => Some(f64::NAN),
        "inf" | "+inf" | "Infinity" | "+Infinity" => Some(f64::INFINITY),
        "-inf" | "-Infinity" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok(),
    }
}

/// Streams `metrics.csv` step by step. Each step rewrites the whole file atomically, so a
/// run killed at any moment leaves a complete, readable file with every finished step.
/// Runs are tens to hundreds of steps, so the rewrite costs nothing that matters.
#[derive(Debug)]
pub(crate) struct MetricsCsvWriter {
    path: PathBuf,
    table: MetricTable,
}

impl MetricsCsvWriter {
    pub(crate) fn create(path: &Path) -> Result<Self, MetricsError> {
        let w = Self {
            path: path.to_path_buf(),
            table: MetricTable::new(),
        };
        fsx::write_atomic(&w.path, w.table.to_csv().as_bytes())?;
        Ok(w)
    }

    pub(crate) fn push(&mut self, m: StepMetrics) -> Result<(), MetricsError> {
        self.table.push(m);
        fsx::write_atomic(&self.path, self.table.to_csv().as_bytes())?;
        Ok(())
    }

    pub(crate) fn table(&self) -> &MetricTable {
        &self.table
    }

    pub(crate) fn into_table(self) -> MetricTable {
        self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_from_columns_number_steps_from_one_and_keep_nan() {
        let t = MetricTable::from_columns(&[("a", &[1.0, f64::NAN, 3.0]), ("b", &[5.0])]);
        assert_eq!(t.len(), 3);
        assert_eq!(t.series("a").len(), 3);
        assert!(t.series("a")[1].1.is_nan());
        assert_eq!(t.series("b"), vec![(1, 5.0)]);
        assert_eq!(t.rows()[2].step, 3);
        assert!(MetricTable::from_columns(&[]).is_empty());
    }

    #[test]
    fn csv_round_trip_keeps_gaps_and_non_finite() {
        let mut t = MetricTable::new();
        let mut a = StepMetrics::new(2);
        a.insert("b", 0.1 + 0.2);
        a.insert("a", f64::NAN);
        t.push(a);
        let mut b = StepMetrics::new(1);
        b.insert("a", f64::NEG_INFINITY);
        t.push(b);
        let text = t.to_csv();
        assert_eq!(text.lines().next().unwrap(), "step,a,b");
        assert_eq!(text.lines().nth(1).unwrap(), "1,-inf,");
        let back = MetricTable::from_csv_str(&text, Path::new("m.csv")).unwrap();
        assert_eq!(back.steps(), vec![1, 2]);
        assert_eq!(back.row(2).unwrap().get("b"), Some(0.1 + 0.2));
        assert!(back.row(2).unwrap().get("a").unwrap().is_nan());
        assert_eq!(back.row(1).unwrap().get("b"), None);
    }

    #[test]
    fn csv_errors_name_file_line_and_column() {
        let e = MetricTable::from_csv_str("step,x\n1,2\n2,abc\n", Path::new("g/metrics.csv"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("g/metrics.csv") && e.contains("line 3") && e.contains("`x`"),
            "{e}"
        );
    }

    #[test]
    fn a_series_at_a_glance() {
        let t = MetricTable::from_columns(&[("x", &[2.0, 1.0, 6.0]), ("nan", &[1.0, f64::NAN])]);
        let s = t.summary("x").unwrap();
        assert_eq!(
            (s.first, s.last, s.min, s.max, s.mean),
            (2.0, 6.0, 1.0, 6.0, 3.0)
        );
        let s = t.summary("nan").unwrap();
        assert!(s.first == 1.0 && s.min.is_nan() && s.max.is_nan() && s.mean.is_nan());
        assert_eq!(t.summary("absent"), None);
    }
}
