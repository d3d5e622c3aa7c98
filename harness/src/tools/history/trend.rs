//! One scenario's trend: its runs in order, one value per run for each window the judge uses,
//! the golden's value and band there, and the change points with the commits they fall
//! between.

use crate::judge::default_direction;
use crate::model::checks::{window_value as judge_window_value, Direction};
use crate::model::golden::Golden;
use crate::model::metrics::MetricTable;

use super::changepoint::{detect_weighted, robust_sigma, ALPHA};

/// One run of the series, in the order the history puts them.
#[derive(Debug, Clone)]
pub struct RunPoint {
    /// The run directory, as found.
    pub dir: String,
    /// When the run started (RFC 3339).
    pub started: String,
    /// The harness checkout's commit.
    pub commit: Option<String>,
    /// The trainer's sources (`git describe` of a command scenario's sources, or `--label`).
    pub trainer: Option<String>,
    /// The run's verdict today, judged against the golden in force, as its exit status says it
    /// (`pass`, `FAIL`, ...), and whether it passed.
    pub verdict: String,
    pub passed: bool,
    /// The verdict the run got when it ran, from its own `verdict.json` (`None` when it has
    /// none, e.g. a run killed before it was judged).
    pub at_the_time: Option<String>,
    /// What changed in the golden or its calibration since the run was judged (`None` when
    /// nothing did, or the run did not record what it was judged against).
    pub golden_changed: Option<String>,
    /// The run's series: one table, or one a seed for a multi-seed run (one point of the
    /// history, valued at the seeds' mean).
    pub tables: Vec<MetricTable>,
}

impl RunPoint {
    /// What identifies the code a run ran: the trainer's version when recorded, the harness
    /// commit otherwise.
    pub fn version(&self) -> String {
        match (&self.trainer, &self.commit) {
            (Some(t), Some(c)) => format!("{t} (harness {c})"),
            (Some(t), None) => t.clone(),
            (None, Some(c)) => c.clone(),
            (None, None) => "unknown".into(),
        }
    }

    /// The verdict it got when it ran, else (no `verdict.json`) today's.
    pub fn verdict_then(&self) -> &str {
        self.at_the_time.as_deref().unwrap_or(&self.verdict)
    }

    /// Whether it passed when it ran (today's verdict where it recorded none).
    pub fn passed_then(&self) -> bool {
        self.verdict_then() == "pass"
    }

    /// Today's verdict, when it is to be shown beside the one at the time: the golden or its
    /// calibration changed since, or the verdict today differs; with why, in words.
    pub fn today(&self) -> Option<String> {
        let differs = self
            .at_the_time
            .as_deref()
            .is_some_and(|t| t != self.verdict);
        match (&self.golden_changed, differs) {
            (Some(what), _) => Some(format!("{} today ({what} changed since)", self.verdict)),
            (None, true) => Some(format!(
                "{} today (the same golden, read by today's judge)",
                self.verdict
            )),
            (None, false) => None,
        }
    }

    /// The steps of the run's longest series.
    fn last_step(&self) -> Option<u64> {
        self.tables
            .iter()
            .filter_map(|t| t.steps().last().copied())
            .max()
    }

    fn has(&self, metric: &str) -> bool {
        self.tables.iter().any(|t| !t.series(metric).is_empty())
    }
}

/// A span of steps the judge reads as one value: its mean, or its median.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub metric: String,
    pub first: u64,
    pub last: u64,
    pub median: bool,
    /// The calibration's spread of this window across seeds, when calibrated.
    pub sigma: Option<f64>,
    /// The golden's value of the window, and the half-width of its blessed band.
    pub golden: Option<f64>,
    pub band: Option<f64>,
}

impl Window {
    pub fn label(&self) -> String {
        let stat = if self.median { "median" } else { "mean" };
        format!(
            "{} ({stat} of steps {}-{})",
            self.metric, self.first, self.last
        )
    }

    /// The window's value in one run: `None` when the run has none of its steps.
    pub fn value(&self, table: &MetricTable) -> Option<f64> {
        window_value(table, &self.metric, self.first, self.last, self.median)
    }

    /// A run's value of the window (the mean over its seeds' values) and how many seeds have
    /// one.
    pub fn run_value(&self, run: &RunPoint) -> Option<(f64, usize)> {
        let v: Vec<f64> = run.tables.iter().filter_map(|t| self.value(t)).collect();
        (!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64, v.len()))
    }
}

/// The judge's point of a window in one table; `None` when it has none of the window's steps
/// or a value that is not finite.
fn window_value(
    table: &MetricTable,
    metric: &str,
    first: u64,
    last: u64,
    median: bool,
) -> Option<f64> {
    let xs: Vec<f64> = table
        .series(metric)
        .into_iter()
        .filter(|(s, _)| (first..=last).contains(s))
        .map(|(_, v)| v)
        .collect();
    Some(judge_window_value(&xs, median)).filter(|v| v.is_finite())
}

/// The windows of a scenario: its calibration's (each golden rule's windows, with their
/// spread), else its golden's blessed bands, else the last ten steps of the reward, the MFU
/// and the step time.
pub(crate) fn windows_of(golden: Option<&Golden>, runs: &[RunPoint]) -> Vec<Window> {
    let golden_value = |metric: &str, first, last, median| {
        golden.and_then(|g| window_value(&g.table, metric, first, last, median))
    };
    let band_of = |metric: &str, first: u64, last: u64| {
        golden
            .and_then(|g| g.bands.as_ref())
            .and_then(|b| b.get(metric))
            .and_then(|ws| ws.iter().find(|w| w.0 == first && w.1 == last))
            .map(|w| w.2)
    };
    if let Some(cal) = golden.and_then(|g| g.calibration.as_ref()) {
        let mut out = Vec::new();
        for (metric, points) in &cal.windows {
            for p in points {
                let median = p.median.unwrap_or(false);
                out.push(Window {
                    metric: metric.clone(),
                    first: p.first,
                    last: p.last,
                    median,
                    sigma: Some(p.std),
                    golden: golden_value(metric, p.first, p.last, median),
                    band: band_of(metric, p.first, p.last),
                });
            }
        }
        return out;
    }
    if let Some(bands) = golden.and_then(|g| g.bands.as_ref()) {
        return bands
            .iter()
            .flat_map(|(metric, ws)| {
                ws.iter().map(move |&(first, last, half)| Window {
                    metric: metric.clone(),
                    first,
                    last,
                    median: false,
                    sigma: None,
                    golden: golden_value(metric, first, last, false),
                    band: Some(half),
                })
            })
            .collect();
    }
    let last_step = runs
        .iter()
        .filter_map(RunPoint::last_step)
        .max()
        .unwrap_or(0);
    let first = last_step.saturating_sub(9).max(1);
    ["critic/rewards/mean", "perf/mfu/actor", "timing_s/step"]
        .into_iter()
        .filter(|m| runs.iter().any(|r| r.has(m)))
        .map(|metric| Window {
            metric: metric.to_string(),
            first,
            last: last_step,
            median: false,
            sigma: None,
            golden: golden_value(metric, first, last_step, false),
            band: None,
        })
        .collect()
}

/// What a change point is taken to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeKind {
    /// A golden was blessed between the two runs: the move was accepted on purpose.
    Intentional,
    /// The metric moved the way its direction calls better: re-bless if it is wanted.
    Improvement,
    /// The metric moved the wrong way (or, two-sided, at all): the commits between are suspect.
    Suspect,
}

/// One change point of one window's series.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The first run (index into the scenario's runs) at the new level.
    pub run: usize,
    pub before: f64,
    pub after: f64,
    /// The move in noise units; `None` when the noise measured is zero (a deterministic
    /// series: any move is a change, and no multiple of zero means anything).
    pub z: Option<f64>,
    /// The last run (index) before the change that has a value of the window.
    pub prev: usize,
    /// The code of the last run before, and of the first run after.
    pub from: String,
    pub to: String,
    pub kind: ChangeKind,
}

/// One window's series over the runs and where it changed.
#[derive(Debug, Clone)]
pub struct WindowTrend {
    pub window: Window,
    /// One value per run (`None` where a run has none).
    pub values: Vec<Option<f64>>,
    /// The noise scale the change points were judged with, and where it came from.
    pub sigma: f64,
    pub sigma_from: &'static str,
    pub changes: Vec<Change>,
}

/// A scenario's runs, ordered, and each window's trend.
#[derive(Debug, Clone)]
pub struct Trend {
    pub scenario: String,
    pub hardware: String,
    pub runs: Vec<RunPoint>,
    pub windows: Vec<WindowTrend>,
    /// When its goldens were blessed (RFC 3339), oldest first.
    pub blesses: Vec<String>,
}

/// Whether a golden was blessed between two runs' start times.
fn blessed_between(blesses: &[String], before: &str, after: &str) -> bool {
    blesses
        .iter()
        .any(|d| before < d.as_str() && d.as_str() <= after)
}

/// The trend of `runs` (already in order) against the golden in force, with the dates its
/// goldens were blessed.
pub(crate) fn analyse(
    scenario: &str,
    hardware: &str,
    runs: Vec<RunPoint>,
    golden: Option<&Golden>,
    blesses: Vec<String>,
    min_change: f64,
) -> Trend {
    let windows = windows_of(golden, &runs)
        .into_iter()
        .map(|w| window_trend(w, &runs, &blesses, min_change))
        .collect();
    Trend {
        scenario: scenario.to_string(),
        hardware: hardware.to_string(),
        runs,
        windows,
        blesses,
    }
}

/// The trend of one window. A change point smaller than `min_change` (a fraction of the level
/// before it) is significant but too small to matter, and is not reported: with a tiny noise
/// (a simulated time), a 0.1 % move can be many noise units.
fn window_trend(
    window: Window,
    runs: &[RunPoint],
    blesses: &[String],
    min_change: f64,
) -> WindowTrend {
    let valued: Vec<Option<(f64, usize)>> = runs.iter().map(|r| window.run_value(r)).collect();
    let values: Vec<Option<f64>> = valued.iter().map(|v| v.map(|(x, _)| x)).collect();
    let present: Vec<(usize, f64, f64)> = valued
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|(x, w)| (i, x, w as f64)))
        .collect();
    let xs: Vec<f64> = present.iter().map(|p| p.1).collect();
    let weights: Vec<f64> = present.iter().map(|p| p.2).collect();
    let (sigma, sigma_from) = match window.sigma {
        Some(s) => (s, "calibration"),
        // The series' own spread is that of its points, each the mean of its seeds: scaled
        // back to one seed's noise by the square root of the seeds a point has on average.
        None => {
            let per_point = robust_sigma(&xs).unwrap_or(0.0);
            let seeds = weights.iter().sum::<f64>() / weights.len().max(1) as f64;
            (per_point * seeds.max(1.0).sqrt(), "the series itself")
        }
    };
    let direction = default_direction(&window.metric);
    let changes = detect_weighted(&xs, &weights, sigma, ALPHA)
        .into_iter()
        .filter(|c| (c.after - c.before).abs() >= min_change * c.before.abs())
        .map(|c| {
            let (prev, run) = (present[c.index - 1].0, present[c.index].0);
            let better = match direction {
                Direction::HigherIsBetter => c.after > c.before,
                Direction::LowerIsBetter => c.after < c.before,
                Direction::TwoSided => false,
            };
            let kind = if blessed_between(blesses, &runs[prev].started, &runs[run].started) {
                ChangeKind::Intentional
            } else if better {
                ChangeKind::Improvement
            } else {
                ChangeKind::Suspect
            };
            Change {
                run,
                before: c.before,
                after: c.after,
                z: (sigma > 0.0).then_some(c.z),
                prev,
                from: runs[prev].version(),
                to: runs[run].version(),
                kind,
            }
        })
        .collect();
    WindowTrend {
        window,
        values,
        sigma,
        sigma_from,
        changes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(i: usize, value: Option<f64>) -> RunPoint {
        let table = match value {
            Some(v) => MetricTable::from_columns(&[("timing_s/step", &[v])]),
            None => MetricTable::from_columns(&[("other", &[1.0])]),
        };
        RunPoint {
            dir: format!("r{i}"),
            started: format!("2026-12-0{i}T00:00:00Z"),
            commit: None,
            trainer: Some(format!("build-{i}")),
            verdict: "pass".into(),
            passed: true,
            at_the_time: Some("pass".into()),
            golden_changed: None,
            tables: vec![table],
        }
    }

    /// A deterministic series (a calibration that measured σ = 0): the change sits where the
    /// series moves, between the last run before it that has a value and the first after,
    /// and carries no multiple of a zero σ.
    #[test]
    fn a_zero_sigma_gives_no_sigma_multiple_and_the_change_where_the_series_moves() {
        let values = [Some(1.0), Some(1.0), None, Some(2.0), Some(2.0), Some(2.0)];
        let runs: Vec<RunPoint> = values
            .iter()
            .enumerate()
            .map(|(i, v)| run(i + 1, *v))
            .collect();
        let window = Window {
            metric: "timing_s/step".into(),
            first: 1,
            last: 1,
            median: false,
            sigma: Some(0.0),
            golden: None,
            band: None,
        };
        let t = window_trend(window, &runs, &[], 0.01);
        assert_eq!(t.changes.len(), 1, "{:?}", t.changes);
        let c = &t.changes[0];
        assert_eq!((c.prev, c.run, c.z), (1, 3, None));
        assert_eq!((c.before, c.after), (1.0, 2.0));
        assert_eq!((c.from.as_str(), c.to.as_str()), ("build-2", "build-4"));
    }

    /// Today's verdict is shown beside the one at the time only where it differs or the golden
    /// changed since.
    #[test]
    fn todays_verdict_is_shown_where_it_differs_or_the_golden_changed() {
        let mut r = run(1, Some(1.0));
        assert_eq!(r.today(), None);
        r.golden_changed = Some("its calibration (sha a → b)".into());
        assert_eq!(
            r.today().as_deref(),
            Some("pass today (its calibration (sha a → b) changed since)")
        );
        r.golden_changed = None;
        r.verdict = "FAIL".into();
        assert!(r
            .today()
            .unwrap()
            .starts_with("FAIL today (the same golden"));
        r.at_the_time = None;
        assert_eq!(r.verdict_then(), "FAIL");
    }
}
