//! A history's trend chart: one value per run of a metric's window, against run number, with
//! the golden's value and blessed band across the runs, the failing runs crossed and each
//! change point drawn as a vertical line where the new level starts.

use plotters::prelude::*;

use super::{plot_over, x_range, y_range, Layers, PlotError, Swatch, BAND, OTHER, REFERENCE, RUN};

/// What one trend chart shows. Runs are numbered from 1 in the history's order.
pub(crate) struct TrendPlot<'a> {
    pub(crate) title: &'a str,
    /// `(run number, value)`; a run without a value is left out.
    pub(crate) values: &'a [(u64, f64)],
    pub(crate) golden: Option<f64>,
    /// The golden's band, `(lo, hi)`.
    pub(crate) band: Option<(f64, f64)>,
    /// Runs whose verdict was not a pass.
    pub(crate) failing: &'a [u64],
    /// Where each change is drawn: between the last run before it and the first at the new
    /// level (a run's x is its number).
    pub(crate) changes: &'a [f64],
}

pub(crate) const CHANGE_SERIES: &str = "change point";

/// The chart's SVG.
pub(crate) fn plot_trend(t: &TrendPlot) -> String {
    let runs = t.values.iter().map(|(r, _)| *r);
    let (x0, x1) = x_range(runs);
    let (y0, y1) = y_range(
        t.values
            .iter()
            .map(|(_, v)| *v)
            .chain(t.golden)
            .chain(t.band.into_iter().flat_map(|(lo, hi)| [lo, hi])),
    );
    let first = t.values.first().map_or(1, |(r, _)| *r);
    let last = t.values.last().map_or(1, |(r, _)| *r);
    plot_over(t.title, "run", x0..x1, y0..y1, |l| {
        if let Some((lo, hi)) = t.band {
            l.bands("golden band", &[(first, last, lo, hi)], BAND.mix(0.18))?;
        }
        if let Some(g) = t.golden {
            l.line("golden", &[(first, g), (last, g)], (REFERENCE, 2), false)?;
        }
        l.line("run", t.values, (RUN, 2), true)?;
        let value_of = |r: u64| {
            t.values
                .iter()
                .find(|(x, _)| *x == r)
                .map_or(f64::NAN, |(_, v)| *v)
        };
        let marks: Vec<(f64, f64)> = t
            .failing
            .iter()
            .map(|r| (*r as f64, value_of(*r)))
            .collect();
        l.failing(&marks)?;
        change_lines(l, t.changes, (y0, y1))
    })
}

/// A dashed-looking vertical line at each change.
fn change_lines(l: &mut Layers, changes: &[f64], (y0, y1): (f64, f64)) -> Result<(), PlotError> {
    if changes.is_empty() {
        return Ok(());
    }
    l.group("series", CHANGE_SERIES, Swatch::Line(OTHER, 2), |chart| {
        for c in changes {
            let x = *c;
            let dashes: Vec<_> = (0..20)
                .filter(|i| i % 2 == 0)
                .map(|i| {
                    let a = y0 + (y1 - y0) * i as f64 / 20.0;
                    let b = y0 + (y1 - y0) * (i + 1) as f64 / 20.0;
                    PathElement::new(vec![(x, a), (x, b)], OTHER.stroke_width(2))
                })
                .collect();
            chart.draw_series(dashes).map_err(super::e)?;
        }
        Ok(())
    })
}
