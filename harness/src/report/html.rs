//! `report.html`: one self-contained file (inline CSS and SVG, no external assets) with the
//! same content as `report.md`, plus the plots.

use super::markdown::html_escape as esc;
use super::{render_plots, run_rows, status_cell, Headline, Piece, PointRow, Report, RuleRow};
use crate::compare::RuleStatus;

const STYLE: &str = "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;\
color:#222;max-width:1100px}h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:2rem}\
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;\
text-align:left;vertical-align:top}th{background:#f5f5f5}td.n{text-align:right;\
font-variant-numeric:tabular-nums}.pass{color:#1a7f37}.fail{color:#cf222e}.warn{color:#9a6700}\
.note{background:#fff8c5;padding:.5rem .75rem;border-left:4px solid #d4a72c}\
figure{margin:1rem 0}pre{background:#f6f8fa;padding:.75rem;overflow:auto}code{font-size:.9em}";

fn class(h: Headline) -> &'static str {
    match h {
        Headline::Passed | Headline::ExpectedFailure | Headline::Skipped => "pass",
        Headline::NoGolden => "warn",
        Headline::Failed | Headline::RunFailed => "fail",
    }
}

pub(crate) fn render_html(r: &Report) -> String {
    let mut o = String::new();
    head_section(&mut o, r);
    if r.skipped.is_some() {
        o.push_str("</body></html>\n");
        return o;
    }
    let reference = r.reference_label();
    rules_section(&mut o, r, reference);
    metrics_section(&mut o, r, reference);
    run_and_config_sections(&mut o, r);
    if let Some(tail) = &r.trainer_tail {
        o.push_str(&format!(
            "<details><summary>trainer output (last lines)</summary><pre>{}</pre></details>\n",
            esc(tail)
        ));
    }
    o.push_str("</body></html>\n");
    o
}

/// The document head, the headline, the declared verdict, notes, grid and lane.
fn head_section(o: &mut String, r: &Report) {
    let h = r.headline();
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    o.push_str(&format!(
        "<title>{}: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&r.scenario),
        esc(&r.summary())
    ));
    o.push_str(&format!(
        "<h1 class=\"{}\">{}: {}</h1>\n<p>Exit status {}.</p>\n",
        class(h),
        esc(&r.scenario),
        esc(&r.summary()),
        r.exit_status().code()
    ));
    if let Some(m) = r.expected_match() {
        let declared = r
            .expected
            .as_ref()
            .and_then(|e| serde_json::to_string(e).ok())
            .unwrap_or_default();
        match m {
            Ok(()) => o.push_str(&format!(
                "<p class=\"note\">Declared verdict <code>{}</code> matched.</p>\n",
                esc(&declared)
            )),
            Err(why) => o.push_str(&format!(
                "<p class=\"note\">Declared verdict <code>{}</code> <b>not matched</b>: {}</p>\n",
                esc(&declared),
                esc(&why)
            )),
        }
    }
    for n in &r.notes {
        o.push_str(&format!("<p class=\"note\"><b>Note:</b> {}</p>\n", esc(n)));
    }
    if let Some(g) = r.verdict.as_ref().and_then(|v| v.grid_mismatch.as_ref()) {
        o.push_str(&format!(
            "<p class=\"note\"><b>Step grid mismatch:</b> {}</p>\n",
            esc(g)
        ));
    }
    if let Some(l) = r.verdict.as_ref().and_then(|v| v.exact_lane.as_ref()) {
        let lane = if l.applied { "on" } else { "off" };
        o.push_str(&format!(
            "<p class=\"note\"><b>Exact lane {lane}:</b> {}</p>\n",
            esc(&l.message)
        ));
    }
}

/// The table of every rule with its evidence.
fn rules_section(o: &mut String, r: &Report, reference: &str) {
    if let Some(v) = &r.verdict {
        if !v.rules.is_empty() {
            o.push_str("<h2>Rules</h2>\n<table><tr><th>rule</th><th>status</th><th>at</th>");
            o.push_str(&format!(
                "<th>value</th><th>{}</th><th>band</th><th>margin</th><th>evidence</th></tr>\n",
                esc(reference)
            ));
            for x in v.rules.iter().map(RuleRow::new) {
                let cls = match x.status {
                    RuleStatus::Pass => "pass",
                    RuleStatus::Improved => "warn",
                    _ => "fail",
                };
                o.push_str(&format!(
                    "<tr><td><code>{}</code></td><td class=\"{cls}\">{}</td><td>{}</td>\
                     <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>\
                     <td class=\"n\">{}</td><td>{}</td></tr>\n",
                    esc(x.rule),
                    status_cell(x.status),
                    esc(x.at),
                    x.value,
                    x.golden,
                    x.band,
                    x.margin,
                    esc(x.evidence)
                ));
            }
            o.push_str("</table>\n");
        }
    }
}

/// A plot and the compared points of each checked metric.
fn metrics_section(o: &mut String, r: &Report, reference: &str) {
    let plots = render_plots(r);
    if !plots.is_empty() {
        o.push_str("<h2>Metrics</h2>\n");
        let metrics = r.checked_metrics();
        for (m, (_, svg)) in metrics.iter().zip(plots.iter()) {
            o.push_str(&format!(
                "<figure><figcaption><code>{}</code></figcaption>\n",
                esc(m)
            ));
            // plotters writes an XML prolog-free <svg> element: safe to inline as is.
            o.push_str(svg.trim());
            o.push_str("\n</figure>\n");
            o.push_str(&points_table(r, m, reference));
        }
    }
}

/// The Markdown's run and config sections, as HTML tables.
fn run_and_config_sections(o: &mut String, r: &Report) {
    o.push_str("<h2>Run</h2>\n<table>\n");
    for (k, pieces) in run_rows(r) {
        let v: String = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => esc(t),
                Piece::Code(c) => format!("<code>{}</code>", esc(c)),
            })
            .collect();
        o.push_str(&format!("<tr><th>{}</th><td>{v}</td></tr>\n", esc(k)));
    }
    o.push_str("</table>\n<h2>Config (differs from defaults)</h2>\n");
    if r.knobs.is_empty() {
        o.push_str("<p>Every knob has its default value.</p>\n");
    } else {
        o.push_str("<table><tr><th>key</th><th>default</th><th>value</th><th>origin</th></tr>\n");
        for k in &r.knobs {
            o.push_str(&format!(
                "<tr><td><code>{}</code></td><td><code>{}</code></td><td><code>{}</code></td>\
                 <td>{}</td></tr>\n",
                esc(&k.key),
                esc(k.default.as_deref().unwrap_or("–")),
                esc(&k.value),
                esc(&k.origin)
            ));
        }
        o.push_str("</table>\n");
    }
}

/// The golden rule's compared points for one metric, as in `report.md`.
fn points_table(r: &Report, metric: &str, reference: &str) -> String {
    let Some(rule) = r.golden_rule(metric) else {
        return String::new();
    };
    if rule.points.is_empty() {
        return String::new();
    }
    let mut o = format!(
        "<details><summary>{} points</summary><table><tr><th>at</th><th>value</th><th>{}</th>\
         <th>band</th><th>status</th></tr>\n",
        rule.points.len(),
        esc(reference)
    );
    for p in rule.points.iter().map(PointRow::new) {
        o.push_str(&format!(
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>\
             <td>{}</td></tr>\n",
            esc(&p.at),
            p.value,
            p.golden,
            p.band,
            status_cell(p.status)
        ));
    }
    o.push_str("</table></details>\n");
    o
}
