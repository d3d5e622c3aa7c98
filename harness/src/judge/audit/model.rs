//! The generative model of a run the audit draws from: the calibration runs' mean plus a
//! random combination of their deviations (`super` says why).

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;

use crate::judge::budget::standard_normal;
use crate::model::checks::domain::positive;
use crate::model::golden::calibration::Calibration;
use crate::model::metrics::{MetricTable, StepMetrics};

/// The generative model of a run: every (metric, step) cell of the calibration.
pub(super) struct Model {
    cells: Vec<Cell>,
    /// Deviations of each run from the cells' means, one row per run (values mode).
    deviations: Vec<Vec<f64>>,
    pub(super) runs: usize,
}

struct Cell {
    metric: String,
    step: u64,
    mean: f64,
    /// Spread for step-by-step draws (summaries mode).
    std: f64,
    log: bool,
}

impl Model {
    pub(super) fn of(cal: &Calibration) -> Model {
        let mut cells = Vec::new();
        let mut columns: Vec<Vec<f64>> = Vec::new();
        let values = cal
            .steps
            .values()
            .flatten()
            .any(|p| p.values.len() == cal.runs && cal.runs > 1);
        for (metric, points) in &cal.steps {
            for p in points {
                let aligned = p.values.len() == cal.runs && cal.runs > 1;
                let log = positive(metric) && p.min > 0.0 && less_skewed_in_log(&p.values);
                let xs: Vec<f64> = if aligned {
                    p.values
                        .iter()
                        .map(|v| if log { v.ln() } else { *v })
                        .collect()
                } else {
                    Vec::new()
                };
                let (mean, std) = if !xs.is_empty() {
                    (xs.iter().sum::<f64>() / xs.len() as f64, 0.0)
                } else if log {
                    let s2 = (1.0 + (p.std / p.mean).powi(2)).ln();
                    (p.mean.ln() - s2 / 2.0, s2.sqrt())
                } else {
                    (p.mean, p.std)
                };
                columns.push(xs.iter().map(|x| x - mean).collect());
                cells.push(Cell {
                    metric: metric.clone(),
                    step: p.first,
                    mean,
                    std: if values { 0.0 } else { std },
                    log,
                });
            }
        }
        let runs = if values { cal.runs } else { 0 };
        let deviations = (0..runs)
            .map(|i| {
                columns
                    .iter()
                    .map(|c| c.get(i).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect();
        Model {
            cells,
            deviations,
            runs,
        }
    }

    /// One synthetic run.
    pub(super) fn draw(&self, rng: &mut ChaCha8Rng) -> MetricTable {
        let z: Vec<f64> = (0..self.runs).map(|_| standard_normal(rng)).collect();
        let scale = 1.0 / ((self.runs.max(2) - 1) as f64).sqrt();
        self.table(|j, c| {
            if self.runs > 0 {
                let mixed: f64 = z.iter().zip(&self.deviations).map(|(z, d)| z * d[j]).sum();
                c.mean + scale * mixed
            } else {
                c.mean + c.std * standard_normal(rng)
            }
        })
    }

    /// The calibration's own runs, rebuilt from their stored values (values mode only).
    pub(super) fn calibration_runs(&self) -> Vec<MetricTable> {
        (0..self.runs)
            .map(|i| self.table(|j, c| c.mean + self.deviations[i][j]))
            .collect()
    }

    /// A run whose cell `j` is `value(j, cell)` (on the cell's scale: a log cell is exp'ed).
    fn table(&self, mut value: impl FnMut(usize, &Cell) -> f64) -> MetricTable {
        let mut rows: BTreeMap<u64, StepMetrics> = BTreeMap::new();
        for (j, c) in self.cells.iter().enumerate() {
            let x = value(j, c);
            rows.entry(c.step)
                .or_insert_with(|| StepMetrics::new(c.step))
                .insert(c.metric.clone(), if c.log { x.exp() } else { x });
        }
        let mut t = MetricTable::new();
        for (_, r) in rows {
            t.push(r);
        }
        t
    }
}

/// Whether a positive metric's runs look log-normal rather than normal: their values are less
/// skewed on the log scale (a gradient norm's right tail) than as they are. Without values
/// (summaries only), a positive metric is drawn on the log scale.
fn less_skewed_in_log(values: &[f64]) -> bool {
    if values.len() < 3 {
        return true;
    }
    let skew = |xs: &[f64]| {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt();
        if sd == 0.0 {
            return 0.0;
        }
        xs.iter().map(|x| ((x - m) / sd).powi(3)).sum::<f64>() / n
    };
    let ln: Vec<f64> = values.iter().map(|v| v.ln()).collect();
    skew(&ln).abs() < skew(values).abs()
}
