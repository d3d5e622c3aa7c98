//! SVG plots through plotters: each checked metric against step with the golden's band shaded
//! and failing steps marked, and a run-against-run overlay for `compare RUN RUN2`.

use std::ops::Range;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{plot_file_name, Report};
use crate::compare::{PointCheck, RuleStatus};
use crate::metrics::MetricTable;

const SIZE: (u32, u32) = (720, 360);
const BAND: RGBColor = RGBColor(66, 133, 244);
const RUN: RGBColor = RGBColor(25, 25, 112);
const REFERENCE: RGBColor = RGBColor(130, 130, 130);
const FAIL: RGBColor = RGBColor(214, 39, 40);
const OTHER: RGBColor = RGBColor(230, 120, 20);

/// The y range that shows every finite value (band edges included), padded a little.
fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.08
    } else {
        (lo.abs() * 0.1).max(1e-6)
    };
    (lo - pad, hi + pad)
}

fn x_range(steps: impl Iterator<Item = u64>) -> (f64, f64) {
    let (mut lo, mut hi) = (u64::MAX, 0);
    for s in steps {
        lo = lo.min(s);
        hi = hi.max(s);
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    (lo as f64 - 0.6, hi as f64 + 0.6)
}

/// Break a series at non-finite values so a NaN leaves a gap instead of a spike.
fn finite_runs(series: &[(u64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![Vec::new()];
    for (s, v) in series {
        if v.is_finite() {
            if let Some(last) = out.last_mut() {
                last.push((*s as f64, *v));
            }
        } else if out.last().is_some_and(|l| !l.is_empty()) {
            out.push(Vec::new());
        }
    }
    out.retain(|r| !r.is_empty());
    out
}

type DrawResult = Result<(), String>;
type Root<'b> = DrawingArea<SVGBackend<'b>, Shift>;
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn e<E: std::fmt::Display>(err: E) -> String {
    format!("plot failed: {err}")
}

/// The SVG that `draw` writes, or a tiny SVG that says why it failed: a plot must never fail a
/// run.
fn svg_or_error(metric: &str, draw: impl FnOnce(&mut String) -> DrawResult) -> String {
    let mut svg = String::new();
    match draw(&mut svg) {
        Ok(()) => svg,
        Err(msg) => error_svg(metric, &msg),
    }
}

/// One metric's chart.
pub(crate) fn plot_metric(
    metric: &str,
    run: &[(u64, f64)],
    reference: Option<(&str, &[(u64, f64)])>,
    points: &[PointCheck],
    failing: &[u64],
) -> String {
    svg_or_error(metric, |svg| {
        draw_metric(svg, metric, run, reference, points, failing)
    })
}

fn error_svg(metric: &str, msg: &str) -> String {
    let esc = super::markdown::html_escape;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"40\">\
         <text x=\"4\" y=\"24\">{}: {}</text></svg>\n",
        SIZE.0,
        esc(metric),
        esc(msg)
    )
}

/// A white chart captioned with the metric, its mesh drawn, steps along x.
fn chart<'a, 'b>(
    root: &'a Root<'b>,
    metric: &str,
    x: Range<f64>,
    y: Range<f64>,
) -> Result<Chart<'a, 'b>, String> {
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(root)
        .caption(metric, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(e)?;
    Ok(chart)
}

/// A series as lines broken at non-finite values (`dots`: and a dot at each value), labelled
/// once in the legend.
fn draw_line(
    chart: &mut Chart,
    series: &[(u64, f64)],
    label: &str,
    color: RGBColor,
    dots: bool,
) -> DrawResult {
    let mut labelled = false;
    for part in finite_runs(series) {
        let s = chart
            .draw_series(LineSeries::new(part.clone(), color.stroke_width(2)))
            .map_err(e)?;
        if !labelled {
            labelled = true;
            s.label(label).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        }
        if dots {
            chart
                .draw_series(part.iter().map(|p| Circle::new(*p, 2, color.filled())))
                .map_err(e)?;
        }
    }
    Ok(())
}

/// Draw the legend and write the SVG out.
fn finish<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, root: &Root<'b>) -> DrawResult {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

fn draw_metric(
    svg: &mut String,
    metric: &str,
    run: &[(u64, f64)],
    reference: Option<(&str, &[(u64, f64)])>,
    points: &[PointCheck],
    failing: &[u64],
) -> DrawResult {
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
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    let mut chart = chart(&root, metric, x0..x1, y0..y1)?;

    // The band of each compared point; a window's band spans its steps.
    let clamp = |v: f64| v.clamp(y0, y1);
    let mut band_labelled = false;
    for p in points {
        let rect = Rectangle::new(
            [
                (p.first as f64 - 0.45, clamp(p.band.lo())),
                (p.last as f64 + 0.45, clamp(p.band.hi())),
            ],
            BAND.mix(0.18).filled(),
        );
        let s = chart.draw_series(std::iter::once(rect)).map_err(e)?;
        if !band_labelled {
            band_labelled = true;
            s.label("band").legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 16, y + 5)], BAND.mix(0.18).filled())
            });
        }
    }
    if let Some((label, series)) = reference {
        draw_line(&mut chart, series, label, REFERENCE, false)?;
    }
    draw_line(&mut chart, run, "run", RUN, true)?;
    // Failing steps: a red cross at the value; a non-finite value sits on the top edge.
    let marks: Vec<(f64, f64)> = failing
        .iter()
        .map(|s| {
            let v = run
                .iter()
                .find(|(rs, _)| rs == s)
                .map(|(_, v)| *v)
                .unwrap_or(f64::NAN);
            (*s as f64, if v.is_finite() { clamp(v) } else { y1 })
        })
        .collect();
    if !marks.is_empty() {
        chart
            .draw_series(
                marks
                    .iter()
                    .map(|p| Cross::new(*p, 6, FAIL.stroke_width(2))),
            )
            .map_err(e)?
            .label("failing")
            .legend(|(x, y)| Cross::new((x + 8, y), 5, FAIL.stroke_width(2)));
    }
    finish(&mut chart, &root)
}

/// One SVG per checked metric: `(file name, svg)`.
pub(crate) fn render_plots(r: &Report) -> Vec<(String, String)> {
    let Some(v) = &r.verdict else {
        return Vec::new();
    };
    r.checked_metrics()
        .iter()
        .map(|m| {
            let run = r.metrics.series(m);
            let reference = r
                .reference
                .as_ref()
                .map(|g| (g.label.clone(), g.table.series(m)));
            let points: Vec<PointCheck> = r
                .golden_rule(m)
                .map(|x| x.points.clone())
                .unwrap_or_default();
            let mut failing: Vec<u64> = v
                .rules
                .iter()
                .filter(|x| x.status != RuleStatus::Pass && x.metrics.iter().any(|n| n == m))
                .flat_map(|x| x.failing_steps.iter().copied())
                .collect();
            failing.sort_unstable();
            failing.dedup();
            let svg = plot_metric(
                m,
                &run,
                reference.as_ref().map(|(l, s)| (l.as_str(), s.as_slice())),
                &points,
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
    svg_or_error(metric, |svg| {
        let (x0, x1) = x_range(a.iter().chain(b.iter()).map(|(s, _)| *s));
        let (y0, y1) = y_range(a.iter().chain(b.iter()).map(|(_, v)| *v));
        let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
        let mut chart = chart(&root, metric, x0..x1, y0..y1)?;
        draw_line(&mut chart, &a, label_a, RUN, false)?;
        draw_line(&mut chart, &b, label_b, OTHER, false)?;
        finish(&mut chart, &root)
    })
}

/// A multi-seed run's plot of one metric: every seed's series, the golden's, the calibration's
/// spread per step (mean ± 2σ, shaded), and the windows the seeds were tested on, each with the
/// seeds' mean and the limit the test put on it.
pub(crate) fn render_seeds(
    metric: &str,
    seeds: &[(u64, Vec<(u64, f64)>)],
    golden: Option<&[(u64, f64)]>,
    spread: &[(u64, f64, f64)],
    points: &[PointCheck],
) -> String {
    svg_or_error(metric, |svg| {
        let all = seeds.iter().flat_map(|(_, s)| s.iter());
        let golden_pts: &[(u64, f64)] = golden.unwrap_or(&[]);
        let (x0, x1) = x_range(
            all.clone()
                .chain(golden_pts.iter())
                .map(|(s, _)| *s)
                .chain(spread.iter().map(|(s, _, _)| *s)),
        );
        let (y0, y1) = y_range(
            all.map(|(_, v)| *v)
                .chain(golden_pts.iter().map(|(_, v)| *v))
                .chain(spread.iter().flat_map(|(_, lo, hi)| [*lo, *hi]))
                .chain(points.iter().filter_map(|p| p.value)),
        );
        let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
        let mut chart = chart(&root, metric, x0..x1, y0..y1)?;
        let clamp = |v: f64| v.clamp(y0, y1);
        if !spread.is_empty() {
            let s = chart
                .draw_series(spread.iter().map(|(step, lo, hi)| {
                    Rectangle::new(
                        [
                            (*step as f64 - 0.5, clamp(*lo)),
                            (*step as f64 + 0.5, clamp(*hi)),
                        ],
                        BAND.mix(0.15).filled(),
                    )
                }))
                .map_err(e)?;
            s.label("calibration ±2σ").legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 16, y + 5)], BAND.mix(0.15).filled())
            });
        }
        if !golden_pts.is_empty() {
            draw_line(&mut chart, golden_pts, "golden", REFERENCE, false)?;
        }
        for (i, (seed, series)) in seeds.iter().enumerate() {
            let c = Palette99::pick(i).to_rgba();
            draw_line(
                &mut chart,
                series,
                &format!("seed {seed}"),
                RGBColor(c.0, c.1, c.2),
                false,
            )?;
        }
        // Each tested window: the seeds' mean (a bar over the window) and the test's limit.
        for p in points {
            let color = if p.status == RuleStatus::Pass {
                RUN
            } else {
                FAIL
            };
            if let Some(v) = p.value {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(p.first as f64, clamp(v)), (p.last as f64, clamp(v))],
                        color.stroke_width(4),
                    )))
                    .map_err(e)?;
            }
            for edge in [p.band.lo, p.band.hi].into_iter().flatten() {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(p.first as f64, clamp(edge)), (p.last as f64, clamp(edge))],
                        FAIL.mix(0.6).stroke_width(1),
                    )))
                    .map_err(e)?;
            }
        }
        finish(&mut chart, &root)
    })
}
