//! SVG plots through plotters: each checked metric against step with the golden's band shaded
//! and failing points marked, a multi-seed run's seeds against the calibration, and a
//! run-against-run overlay for `compare RUN RUN2`.
//!
//! Made to be read at a glance: the legend sits beside the chart, never over the data; the y
//! axis is labelled with the metric; tick labels carry as many digits as tell neighbouring
//! ticks apart (`1e-6`, not `0.0`); a windowed rule's judged value (the window's mean or
//! median) is drawn as a step line over its band, since the rule never judged a single step.
//! Every series is a named group (`<g class="series" data-series="run">`, see `grouped`), as
//! are the bands, the axes and the legend. The output is deterministic: plotters lays text out
//! without fonts (no `ttf` feature), so snapshot tests may compare the SVG text.
//!
//! `axes` holds the ranges, tick labels and step lines the plots share; `grouped` the SVG
//! backend that names the groups; `trend` a scenario's history plot.

use std::ops::Range;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

mod axes;
mod grouped;
mod trend;

use axes::{finite_runs, is_windowed, tick_label, window_steps, x_range, y_range};
use grouped::{GroupedSvg, SvgDoc};
pub(crate) use trend::{plot_trend, TrendPlot};

use super::{plot_file_name, Report};
use crate::judge::{PointCheck, RuleStatus};
use crate::model::metrics::MetricTable;

/// The whole plot; the legend takes `LEGEND_WIDTH` of it on the right.
const SIZE: (u32, u32) = (880, 360);
const LEGEND_WIDTH: u32 = 200;
const BAND: RGBColor = RGBColor(66, 133, 244);
const RUN: RGBColor = RGBColor(25, 25, 112);
/// `RUN` at half strength over white, for a run's per-step values under a windowed rule.
const RUN_LIGHT: RGBColor = RGBColor(140, 140, 184);
const REFERENCE: RGBColor = RGBColor(130, 130, 130);
const FAIL: RGBColor = RGBColor(214, 39, 40);
const OTHER: RGBColor = RGBColor(230, 120, 20);
const WINDOW: RGBColor = RGBColor(0, 150, 100);
const SPREAD: RGBColor = RGBColor(120, 120, 120);

/// The names of the series, as the legend and `data-series` give them.
pub(crate) const RUN_SERIES: &str = "run";
pub(crate) const WINDOW_SERIES: &str = "window value (judged)";
pub(crate) const SEEDS_WINDOW_SERIES: &str = "seeds' window mean";
pub(crate) const FAILING_SERIES: &str = "failing";
/// The golden rule's band, and a default stability rule's (`stability:<metric>`).
pub(crate) const BAND_SERIES: &str = "band";
pub(crate) const STABILITY_BAND_SERIES: &str = "stability band";

/// Why plotters could not draw a chart; the chart's place then shows the message.
#[derive(Debug, thiserror::Error)]
#[error("plot failed: {0}")]
pub(crate) struct PlotError(String);

type DrawResult = Result<(), PlotError>;
type Chart<'a> = ChartContext<'a, GroupedSvg, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn e<E: std::fmt::Display>(err: E) -> PlotError {
    PlotError(err.to_string())
}

fn error_svg(metric: &str, msg: &str) -> String {
    let esc = crate::model::util::html_escape;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"40\">\
         <text x=\"4\" y=\"24\">{}: {}</text></svg>\n",
        SIZE.0,
        esc(metric),
        esc(msg)
    )
}

/// How a legend entry shows its series.
#[derive(Clone, Copy)]
enum Swatch {
    Line(RGBColor, u32),
    Area(RGBAColor),
    Cross(RGBColor),
}

/// One plot being drawn: the chart, the document its groups go into, the legend so far.
struct Layers<'a, 'd> {
    chart: Chart<'a>,
    doc: &'d SvgDoc,
    legend: Vec<(String, Swatch)>,
    y: (f64, f64),
}

impl Layers<'_, '_> {
    fn clamp(&self, v: f64) -> f64 {
        v.clamp(self.y.0, self.y.1)
    }

    /// Draw in a named group (`class` is `series` or `band`), listed in the legend.
    fn group(
        &mut self,
        class: &str,
        name: &str,
        swatch: Swatch,
        draw: impl FnOnce(&mut Chart) -> DrawResult,
    ) -> DrawResult {
        self.doc.open(class, Some(name));
        let drawn = draw(&mut self.chart);
        self.doc.close();
        drawn?;
        self.legend.push((name.to_string(), swatch));
        Ok(())
    }

    /// A series as lines broken at non-finite values (`dots`: and a dot at each value).
    fn line(
        &mut self,
        name: &str,
        series: &[(u64, f64)],
        style: (RGBColor, u32),
        dots: bool,
    ) -> DrawResult {
        let (color, width) = style;
        self.group("series", name, Swatch::Line(color, width), |chart| {
            for part in finite_runs(series) {
                chart
                    .draw_series(LineSeries::new(part.clone(), color.stroke_width(width)))
                    .map_err(e)?;
                if dots {
                    chart
                        .draw_series(part.iter().map(|p| Circle::new(*p, 2, color.filled())))
                        .map_err(e)?;
                }
            }
            Ok(())
        })
    }

    /// Rectangles `(first step, last step, lo, hi)`, shaded, each spanning its steps.
    fn bands(
        &mut self,
        name: &str,
        rects: &[(u64, u64, f64, f64)],
        color: RGBAColor,
    ) -> DrawResult {
        if rects.is_empty() {
            return Ok(());
        }
        let rects: Vec<_> = rects
            .iter()
            .map(|(a, b, lo, hi)| {
                Rectangle::new(
                    [
                        (*a as f64 - 0.45, self.clamp(*lo)),
                        (*b as f64 + 0.45, self.clamp(*hi)),
                    ],
                    color.filled(),
                )
            })
            .collect();
        self.group("band", name, Swatch::Area(color), |chart| {
            chart.draw_series(rects).map_err(e).map(|_| ())
        })
    }

    /// The step line of a windowed rule's judged values.
    fn windows(&mut self, name: &str, points: &[PointCheck]) -> DrawResult {
        let lines = window_steps(points, |v| self.clamp(v));
        if lines.is_empty() {
            return Ok(());
        }
        self.group("series", name, Swatch::Line(WINDOW, 3), |chart| {
            for line in lines {
                chart
                    .draw_series(LineSeries::new(line, WINDOW.stroke_width(3)))
                    .map_err(e)?;
            }
            Ok(())
        })
    }

    /// Red crosses at the failing points (a non-finite value sits on the top edge).
    fn failing(&mut self, marks: &[(f64, f64)]) -> DrawResult {
        if marks.is_empty() {
            return Ok(());
        }
        let top = self.y.1;
        let crosses: Vec<_> = marks
            .iter()
            .map(|(x, v)| {
                let y = if v.is_finite() { self.clamp(*v) } else { top };
                Cross::new((*x, y), 6, FAIL.stroke_width(2))
            })
            .collect();
        self.group("series", FAILING_SERIES, Swatch::Cross(FAIL), |chart| {
            chart.draw_series(crosses).map_err(e).map(|_| ())
        })
    }
}

/// Draw one plot: a white chart of `metric` over `x` and `y`, with its axes labelled, what
/// `draw` adds, and the legend beside it. A plot never fails a run: an error becomes a small
/// SVG that says what failed.
fn plot(
    metric: &str,
    x: Range<f64>,
    y: Range<f64>,
    draw: impl FnOnce(&mut Layers) -> DrawResult,
) -> String {
    plot_over(metric, "step", x, y, draw)
}

/// [`plot`] over another x axis than steps (`x_desc`: its label).
fn plot_over(
    metric: &str,
    x_desc: &str,
    x: Range<f64>,
    y: Range<f64>,
    draw: impl FnOnce(&mut Layers) -> DrawResult,
) -> String {
    let doc = SvgDoc::new(SIZE);
    match draw_plot(&doc, metric, x_desc, x, y, draw) {
        Ok(()) => doc.finish(),
        Err(err) => error_svg(metric, &err.to_string()),
    }
}

fn draw_plot(
    doc: &SvgDoc,
    metric: &str,
    x_desc: &str,
    x: Range<f64>,
    y: Range<f64>,
    draw: impl FnOnce(&mut Layers) -> DrawResult,
) -> DrawResult {
    let root = doc.backend().into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
    let (y0, y1) = (y.start, y.end);
    doc.open("axes", None);
    let mut chart = ChartBuilder::on(&area)
        .caption(metric, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(84)
        .build_cartesian_2d(x, y)
        .map_err(e)?;
    // Steps (and runs) are whole numbers: a tick between two gets no label.
    let x_tick = |v: &f64| {
        if (v - v.round()).abs() < 1e-9 {
            format!("{v:.0}")
        } else {
            String::new()
        }
    };
    let y_tick = |v: &f64| tick_label(*v, y0, y1);
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(metric)
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(e)?;
    doc.close();
    let mut layers = Layers {
        chart,
        doc,
        legend: Vec::new(),
        y: (y0, y1),
    };
    draw(&mut layers)?;
    draw_legend(doc, &legend_area, &layers.legend)?;
    root.present().map_err(e)
}

/// The legend, in its own area beside the chart: a swatch and a name per series.
fn draw_legend(
    doc: &SvgDoc,
    area: &DrawingArea<GroupedSvg, Shift>,
    entries: &[(String, Swatch)],
) -> DrawResult {
    if entries.is_empty() {
        return Ok(());
    }
    doc.open("legend", None);
    let drawn = (|| -> DrawResult {
        for (i, (name, swatch)) in entries.iter().enumerate() {
            let y = 48 + 22 * i as i32;
            let (x0, x1) = (8, 30);
            match *swatch {
                Swatch::Line(c, w) => area
                    .draw(&PathElement::new(vec![(x0, y), (x1, y)], c.stroke_width(w)))
                    .map_err(e)?,
                Swatch::Area(c) => area
                    .draw(&Rectangle::new([(x0, y - 6), (x1, y + 6)], c.filled()))
                    .map_err(e)?,
                Swatch::Cross(c) => area
                    .draw(&Cross::new((x0 + 11, y), 5, c.stroke_width(2)))
                    .map_err(e)?,
            }
            let label: String = if name.chars().count() > 24 {
                name.chars().take(23).chain(['…']).collect()
            } else {
                name.clone()
            };
            area.draw(&Text::new(
                label,
                (x1 + 8, y - 7),
                ("sans-serif", 13).into_font().color(&BLACK),
            ))
            .map_err(e)?;
        }
        Ok(())
    })();
    doc.close();
    drawn
}

/// One metric's chart: the band of each compared point, the reference and the run; for a
/// windowed rule, its judged window values as a step line; failing points crossed in red.
/// `failing` holds the failing steps of the other rules on this metric (`expect:`, `exact:`).
#[cfg(test)]
pub(crate) fn plot_metric(
    metric: &str,
    run: &[(u64, f64)],
    reference: Option<(&str, &[(u64, f64)])>,
    points: &[PointCheck],
    failing: &[u64],
) -> String {
    plot_metric_with(metric, run, reference, (BAND_SERIES, points), failing)
}

/// [`plot_metric`] with the band's name in the legend: the golden rule's band, or a stability
/// rule's.
fn plot_metric_with(
    metric: &str,
    run: &[(u64, f64)],
    reference: Option<(&str, &[(u64, f64)])>,
    (band, points): (&str, &[PointCheck]),
    failing: &[u64],
) -> String {
    let ref_series: &[(u64, f64)] = reference.map(|(_, s)| s).unwrap_or(&[]);
    let (x0, x1) = x_range(
        run.iter()
            .chain(ref_series.iter())
            .map(|(s, _)| *s)
            .chain(points.iter().flat_map(|p| [p.first, p.last])),
    );
    let (y0, y1) = y_range(
        run.iter()
            .chain(ref_series.iter())
            .map(|(_, v)| *v)
            .chain(points.iter().flat_map(|p| [p.band.lo(), p.band.hi()])),
    );
    let windowed = is_windowed(points);
    plot(metric, x0..x1, y0..y1, |l| {
        let rects: Vec<_> = points
            .iter()
            .map(|p| (p.first, p.last, p.band.lo(), p.band.hi()))
            .collect();
        l.bands(band, &rects, BAND.mix(0.18))?;
        if let Some((label, series)) = reference {
            l.line(label, series, (REFERENCE, 2), false)?;
        }
        // Under a windowed rule a step's value was never judged alone: the run's per-step line
        // is drawn lighter, under the judged window values.
        if windowed {
            l.line(RUN_SERIES, run, (RUN_LIGHT, 1), true)?;
            l.windows(WINDOW_SERIES, points)?;
        } else {
            l.line(RUN_SERIES, run, (RUN, 2), true)?;
        }
        let value_at = |s: u64| {
            run.iter()
                .find(|(rs, _)| *rs == s)
                .map_or(f64::NAN, |(_, v)| *v)
        };
        let mut marks: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.status != RuleStatus::Pass)
            .map(|p| ((p.first + p.last) as f64 / 2.0, p.value.unwrap_or(f64::NAN)))
            .collect();
        marks.extend(failing.iter().map(|s| (*s as f64, value_at(*s))));
        l.failing(&marks)
    })
}

/// One SVG per checked metric: `(file name, svg)`. A multi-seed run's plots draw its seeds.
pub(crate) fn render_plots(r: &Report) -> Vec<(String, String)> {
    let Some(v) = &r.verdict else {
        return Vec::new();
    };
    if let Some(seeds) = &r.seed_series {
        return r
            .checked_metrics()
            .iter()
            .map(|m| (plot_file_name(m), seeds.plot(r, m)))
            .collect();
    }
    r.checked_metrics()
        .iter()
        .map(|m| {
            let run = r.metrics.series(m);
            let reference = r
                .reference
                .as_ref()
                .map(|g| (g.label.clone(), g.table.series(m)));
            // The band of the metric's golden rule, else of its default stability rule (a
            // metric has one or the other): the points the judge compared, as it gave them.
            let (band, golden_rule) = match r.golden_rule(m) {
                Some(g) => (BAND_SERIES, Some(g)),
                None => (STABILITY_BAND_SERIES, r.stability_rule(m)),
            };
            let points: Vec<PointCheck> = golden_rule.map(|x| x.points.clone()).unwrap_or_default();
            // The golden rule's failing points are drawn from its points; the other rules'
            // from their failing steps.
            let mut failing: Vec<u64> = v
                .rules
                .iter()
                .filter(|x| x.status != RuleStatus::Pass && x.metrics.iter().any(|n| n == m))
                .filter(|x| golden_rule.is_none_or(|g| g.rule != x.rule))
                .flat_map(|x| x.failing_steps.iter().copied())
                .collect();
            failing.sort_unstable();
            failing.dedup();
            let svg = plot_metric_with(
                m,
                &run,
                reference.as_ref().map(|(l, s)| (l.as_str(), s.as_slice())),
                (band, &points),
                &failing,
            );
            (plot_file_name(m), svg)
        })
        .collect()
}

/// Two runs of one metric on one chart (`rlharness compare RUN RUN2`).
pub(crate) fn render_overlay(
    run_a: &MetricTable,
    run_b: &MetricTable,
    metric: &str,
    label_a: &str,
    label_b: &str,
) -> String {
    let (a, b) = (run_a.series(metric), run_b.series(metric));
    let (x0, x1) = x_range(a.iter().chain(b.iter()).map(|(s, _)| *s));
    let (y0, y1) = y_range(a.iter().chain(b.iter()).map(|(_, v)| *v));
    plot(metric, x0..x1, y0..y1, |l| {
        l.line(label_a, &a, (RUN, 2), false)?;
        l.line(label_b, &b, (OTHER, 2), false)
    })
}

/// Many runs' curves of one metric on one chart, each named (a history's last runs, oldest
/// first: the newest drawn last and thickest).
pub(crate) fn render_runs(metric: &str, runs: &[(String, Vec<(u64, f64)>)]) -> String {
    const PALETTE: [RGBColor; 6] = [
        RGBColor(140, 140, 184),
        RGBColor(0, 150, 100),
        RGBColor(230, 120, 20),
        RGBColor(148, 103, 189),
        RGBColor(214, 39, 40),
        RGBColor(25, 25, 112),
    ];
    let all = || runs.iter().flat_map(|(_, s)| s.iter());
    let (x0, x1) = x_range(all().map(|(s, _)| *s));
    let (y0, y1) = y_range(all().map(|(_, v)| *v));
    plot(metric, x0..x1, y0..y1, |l| {
        let n = runs.len();
        for (i, (name, series)) in runs.iter().enumerate() {
            let color = PALETTE[(PALETTE.len() + i).saturating_sub(n) % PALETTE.len()];
            let width = if i + 1 == n { 3 } else { 1 };
            l.line(name, series, (color, width), false)?;
        }
        Ok(())
    })
}

/// A multi-seed run's plot of one metric: the calibration's spread per step (mean ± 2σ,
/// shaded grey), the band the test put on each window's seeds' mean (shaded blue), the
/// golden's series, every seed's, and the seeds' window means as a step line, a failing
/// window crossed in red.
pub(crate) fn render_seeds(
    metric: &str,
    seeds: &[(u64, Vec<(u64, f64)>)],
    golden: Option<&[(u64, f64)]>,
    spread: &[(u64, f64, f64)],
    points: &[PointCheck],
) -> String {
    let all = seeds.iter().flat_map(|(_, s)| s.iter());
    let golden_pts: &[(u64, f64)] = golden.unwrap_or(&[]);
    let (x0, x1) = x_range(
        all.clone()
            .chain(golden_pts.iter())
            .map(|(s, _)| *s)
            .chain(spread.iter().map(|(s, _, _)| *s))
            .chain(points.iter().flat_map(|p| [p.first, p.last])),
    );
    let (y0, y1) = y_range(
        all.map(|(_, v)| *v)
            .chain(golden_pts.iter().map(|(_, v)| *v))
            .chain(spread.iter().flat_map(|(_, lo, hi)| [*lo, *hi]))
            .chain(points.iter().filter_map(|p| p.value))
            .chain(points.iter().flat_map(|p| [p.band.lo(), p.band.hi()])),
    );
    plot(metric, x0..x1, y0..y1, |l| {
        let spread: Vec<_> = spread
            .iter()
            .map(|(s, lo, hi)| (*s, *s, *lo, *hi))
            .collect();
        l.bands("calibration ±2σ", &spread, SPREAD.mix(0.15))?;
        let limits: Vec<_> = points
            .iter()
            .map(|p| (p.first, p.last, p.band.lo(), p.band.hi()))
            .collect();
        l.bands("band of the seeds' mean", &limits, BAND.mix(0.18))?;
        if !golden_pts.is_empty() {
            l.line("golden", golden_pts, (REFERENCE, 2), false)?;
        }
        for (i, (seed, series)) in seeds.iter().enumerate() {
            let c = Palette99::pick(i).to_rgba();
            l.line(
                &format!("seed {seed}"),
                series,
                (RGBColor(c.0, c.1, c.2), 1),
                false,
            )?;
        }
        l.windows(SEEDS_WINDOW_SERIES, points)?;
        let marks: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.status != RuleStatus::Pass)
            .map(|p| ((p.first + p.last) as f64 / 2.0, p.value.unwrap_or(f64::NAN)))
            .collect();
        l.failing(&marks)
    })
}

#[cfg(test)]
mod tests;
