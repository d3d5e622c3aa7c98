//! `report.html`: one self-contained file (inline CSS and SVG, no external assets) with the
//! same content as `report.md`, plus the plots.
//!
//! Read in any browser as it comes: the status marks are inline SVG (no emoji font needed), a
//! number never wraps inside a table cell, and the verdict with the failing rules is on top,
//! before the tables and plots. CI opens it in headless Chromium (harness/tests/browser/).

use super::format::{shared_texts, HOW_ANCHOR, HOW_TITLE};
use super::markdown::html_escape as esc;
use super::{
    render_plots, rule_tally, run_rows, status_text, Headline, Piece, PointRow, Report, RuleRow,
};
use crate::compare::RuleStatus;

const STYLE: &str = "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;\
color:#222;max-width:1100px}h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:2rem}\
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;\
text-align:left;vertical-align:top}th{background:#f5f5f5}td.n{text-align:right;\
font-variant-numeric:tabular-nums}td.n,td.nw,.nw{white-space:nowrap}td.ev{min-width:12em}.pass{color:#1a7f37}\
.fail{color:#cf222e}.warn{color:#9a6700}\
.note{background:#fff8c5;padding:.5rem .75rem;border-left:4px solid #d4a72c}\
.mark{vertical-align:-.15em;margin-right:.3em}figure{margin:1rem 0}\
figure svg{max-width:100%;height:auto}pre{background:#f6f8fa;padding:.75rem;overflow:auto}\
code{font-size:.9em}";

fn class(h: Headline) -> &'static str {
    match h {
        Headline::Passed | Headline::ExpectedFailure | Headline::Skipped => "pass",
        Headline::NoGolden => "warn",
        Headline::Failed | Headline::RunFailed => "fail",
    }
}

/// The shape of a status mark.
#[derive(Clone, Copy)]
enum Mark {
    Pass,
    Fail,
    Warn,
    Unknown,
    Skip,
}

/// A status mark as inline SVG (a coloured disc with a white glyph), labelled for screen
/// readers: no emoji font needed.
fn mark(m: Mark, label: &str) -> String {
    let (fill, glyph) = match m {
        Mark::Pass => ("#1a7f37", "<path d=\"M4.5 8.3l2.4 2.4 4.6-4.9\"/>"),
        Mark::Fail => (
            "#cf222e",
            "<path d=\"M5.2 5.2l5.6 5.6M10.8 5.2l-5.6 5.6\"/>",
        ),
        Mark::Warn => ("#9a6700", "<path d=\"M8 4v5M8 11.2v.6\"/>"),
        Mark::Unknown => (
            "#6e7781",
            "<path d=\"M6 6.2a2 2 0 1 1 2.8 1.8c-.6.3-.8.7-.8 1.4M8 11.2v.6\"/>",
        ),
        Mark::Skip => ("#6e7781", "<path d=\"M5 5l3 3-3 3M8.5 5l3 3-3 3\"/>"),
    };
    format!(
        "<svg class=\"mark\" width=\"1em\" height=\"1em\" viewBox=\"0 0 16 16\" role=\"img\" \
         aria-label=\"{}\"><circle cx=\"8\" cy=\"8\" r=\"8\" fill=\"{fill}\"/><g fill=\"none\" \
         stroke=\"#fff\" stroke-width=\"2\" stroke-linecap=\"round\">{glyph}</g></svg>",
        esc(label)
    )
}

fn status_mark(s: RuleStatus) -> String {
    let m = match s {
        RuleStatus::Pass => Mark::Pass,
        RuleStatus::Regressed => Mark::Fail,
        RuleStatus::Improved => Mark::Warn,
        RuleStatus::Missing => Mark::Unknown,
    };
    mark(m, status_text(s))
}

/// A status cell: its mark and its word.
fn status_cell(s: RuleStatus) -> String {
    format!("{}{}", status_mark(s), status_text(s))
}

fn headline_mark(h: Headline) -> String {
    let (m, label) = match h {
        Headline::Passed => (Mark::Pass, "passed"),
        Headline::ExpectedFailure => (Mark::Pass, "expected failure"),
        Headline::Failed => (Mark::Fail, "failed"),
        Headline::RunFailed => (Mark::Fail, "run failed"),
        Headline::NoGolden => (Mark::Warn, "no golden"),
        Headline::Skipped => (Mark::Skip, "skipped"),
    };
    mark(m, label)
}

/// `text` escaped, with a line break allowed after each `/` (metric names and paths are long
/// words that would widen a table past the page).
fn esc_breakable(text: &str) -> String {
    esc(text).replace('/', "/<wbr>")
}

/// A rule id escaped, with a line break allowed after its kind (`golden:`) and each `/`.
fn esc_rule(rule: &str) -> String {
    match rule.split_once(':') {
        Some((kind, rest)) => format!("{}:<wbr>{}", esc(kind), esc_breakable(rest)),
        None => esc_breakable(rule),
    }
}

/// `text` escaped, each number in scientific notation (`2.000e-6`) kept on one line (a browser
/// may break a line after its minus sign), and a line break allowed after each `/`.
fn esc_numbers(text: &str) -> String {
    let b = text.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let digits_from = |mut i: usize| {
        while digit(i) {
            i += 1;
        }
        i
    };
    let mut out = String::with_capacity(text.len());
    let (mut done, mut i) = (0, 0);
    while i < b.len() {
        let starts =
            digit(i) && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = digits_from(i);
        if b.get(j) == Some(&b'.') && digit(j + 1) {
            j = digits_from(j + 1);
        }
        if b.get(j) == Some(&b'e') && matches!(b.get(j + 1), Some(b'-' | b'+')) && digit(j + 2) {
            let end = digits_from(j + 2);
            out.push_str(&esc_breakable(&text[done..i]));
            out.push_str(&format!("<span class=\"nw\">{}</span>", &text[i..end]));
            done = end;
            j = end;
        }
        i = j;
    }
    out.push_str(&esc_breakable(&text[done..]));
    out
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
    overlay_section(&mut o, r);
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

/// The document head, the headline with the failing rules, the declared verdict, notes, grid
/// and lane.
fn head_section(o: &mut String, r: &Report) {
    let h = r.headline();
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    o.push_str(&format!(
        "<title>{}: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&r.scenario),
        esc(&r.summary())
    ));
    o.push_str(&format!(
        "<h1 class=\"{}\">{}{}: {}</h1>\n<p>Exit status {}.",
        class(h),
        headline_mark(h),
        esc(&r.scenario),
        esc(&r.summary()),
        r.exit_status().code()
    ));
    if let Some((total, failing)) = rule_tally(r) {
        o.push_str(&format!(" {total} rules, {} pass", total - failing.len()));
        if failing.is_empty() {
            o.push('.');
        } else {
            let named: Vec<String> = failing
                .iter()
                .map(|(i, x)| {
                    format!(
                        "<a href=\"#{}\"><code>{}</code></a> {}",
                        rule_anchor(*i),
                        esc(&x.rule),
                        status_text(x.status)
                    )
                })
                .collect();
            o.push_str(&format!(
                "; <b class=\"fail\">failing:</b> {}.",
                named.join(", ")
            ));
        }
    }
    o.push_str("</p>\n");
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
                esc_numbers(&why.0)
            )),
        }
    }
    for n in &r.notes {
        o.push_str(&format!(
            "<p class=\"note\"><b>Note:</b> {}</p>\n",
            esc_numbers(n)
        ));
    }
    if let Some(b) = &r.budget {
        o.push_str(&format!(
            "<p class=\"note\"><b>False-alarm budget:</b> {}</p>\n",
            esc_numbers(&b.text())
        ));
    }
    if let Some(g) = r.verdict.as_ref().and_then(|v| v.grid_mismatch.as_ref()) {
        o.push_str(&format!(
            "<p class=\"note\"><b>Step grid mismatch:</b> {}</p>\n",
            esc_numbers(g)
        ));
    }
    if let Some(l) = r.verdict.as_ref().and_then(|v| v.exact_lane.as_ref()) {
        let lane = if l.applied { "on" } else { "off" };
        o.push_str(&format!(
            "<p class=\"note\"><b>Exact lane {lane}:</b> {}</p>\n",
            esc_numbers(&l.message)
        ));
    }
}

/// The id of a rule's row in the rules table, by its index, so the headline can link to it.
fn rule_anchor(index: usize) -> String {
    format!("rule-{}", index + 1)
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
            for (i, x) in v.rules.iter().map(RuleRow::new).enumerate() {
                let cls = match x.status {
                    RuleStatus::Pass => "pass",
                    RuleStatus::Improved => "warn",
                    _ => "fail",
                };
                o.push_str(&format!(
                    "<tr id=\"{}\"><td><code>{}</code></td><td class=\"nw {cls}\">{}</td>\
                     <td class=\"nw\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                     <td class=\"nw\">{}</td><td class=\"n\">{}</td><td class=\"ev\">{}</td></tr>\n",
                    rule_anchor(i),
                    esc_rule(x.rule),
                    status_cell(x.status),
                    esc(x.at),
                    x.value,
                    x.golden,
                    x.band,
                    x.margin,
                    if x.shared {
                        format!(
                            "{} (<a href=\"#{HOW_ANCHOR}\">{}</a>)",
                            esc_numbers(x.evidence),
                            HOW_TITLE.to_lowercase()
                        )
                    } else {
                        esc_numbers(x.evidence)
                    }
                ));
            }
            o.push_str("</table>\n");
            how_section(o, r);
        }
    }
}

/// What rules of one kind share, said once (the rules' evidence links here).
fn how_section(o: &mut String, r: &Report) {
    let texts = shared_texts(r);
    if texts.is_empty() {
        return;
    }
    o.push_str(&format!("<h2 id=\"{HOW_ANCHOR}\">{HOW_TITLE}</h2>\n<ul>\n"));
    for (text, rules) in texts {
        let rules: Vec<String> = rules
            .iter()
            .map(|x| format!("<code>{}</code>", esc_rule(x)))
            .collect();
        o.push_str(&format!(
            "<li>{}: {}</li>\n",
            rules.join(", "),
            esc_numbers(&text)
        ));
    }
    o.push_str("</ul>\n");
}

/// A plot and the compared points of each checked metric.
fn metrics_section(o: &mut String, r: &Report, reference: &str) {
    let plots = render_plots(r);
    if !plots.is_empty() {
        o.push_str("<h2>Metrics</h2>\n");
        let metrics = r.checked_metrics();
        for (m, (_, svg)) in metrics.iter().zip(plots.iter()) {
            o.push_str(&format!(
                "<figure data-metric=\"{0}\"><figcaption><code>{0}</code></figcaption>\n",
                esc(m)
            ));
            // Our plots are prolog-free <svg> elements: safe to inline as they are.
            o.push_str(svg.trim());
            o.push_str("\n</figure>\n");
            o.push_str(&points_table(r, m, reference));
        }
    }
}

/// The two-run overlay (`compare RUN RUN2`), its charts inline as the metrics' plots are (the
/// same charts are files under `plots/`).
fn overlay_section(o: &mut String, r: &Report) {
    let charts = r.overlay_charts();
    let Some(overlay) = r.reference.as_ref().and_then(|x| x.overlay.as_ref()) else {
        return;
    };
    if charts.is_empty() {
        return;
    }
    o.push_str(&format!(
        "<h2 id=\"overlay\">{}</h2>\n",
        esc(&super::format::overlay_title(overlay))
    ));
    for (file, m, svg) in charts {
        o.push_str(&format!(
            "<figure data-overlay=\"{0}\" data-file=\"plots/{1}\"><figcaption><code>{0}</code> \
             (<a href=\"plots/{1}\">plots/{1}</a>)</figcaption>\n",
            esc(&m),
            esc(&file)
        ));
        o.push_str(svg.trim());
        o.push_str("\n</figure>\n");
    }
}

/// The Markdown's run and config sections, as HTML tables.
fn run_and_config_sections(o: &mut String, r: &Report) {
    o.push_str("<h2>Run</h2>\n<table>\n");
    for (k, pieces) in run_rows(r) {
        let v: String = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => esc_numbers(t),
                Piece::Code(c) => format!("<code>{}</code>", esc_breakable(c)),
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
                esc_numbers(k.default.as_deref().unwrap_or("–")),
                esc_numbers(&k.value),
                esc_breakable(&k.origin)
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
         <th>band</th><th>margin</th><th>status</th></tr>\n",
        rule.points.len(),
        esc(reference)
    );
    for p in rule.points.iter().map(PointRow::new) {
        o.push_str(&format!(
            "<tr><td class=\"nw\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"nw\">{}</td><td class=\"n\">{}</td><td class=\"nw\">{}</td></tr>\n",
            esc(&p.at),
            p.value,
            p.golden,
            p.band,
            p.margin,
            status_cell(p.status)
        ));
    }
    o.push_str("</table></details>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_scientific_notation_stay_on_one_line() {
        assert_eq!(
            esc_numbers("margin 2.000e-6 < 1e+3, seed-11, 7e-3x, a1e-5 & 0.5 in a/b"),
            "margin <span class=\"nw\">2.000e-6</span> &lt; <span class=\"nw\">1e+3</span>, \
             seed-11, <span class=\"nw\">7e-3</span>x, a1e-5 &amp; 0.5 in a/<wbr>b"
        );
        assert_eq!(esc_numbers("σ 0.0105 → ∞"), "σ 0.0105 → ∞");
        assert_eq!(esc_numbers("ends 3e-"), "ends 3e-");
    }
}
