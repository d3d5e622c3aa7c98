//! `report.md`: sized for a CI step summary. The verdict first, then the rules, a table per
//! checked metric (folded), the run, and the knobs that differ from the defaults.

use super::format::{shared_texts, HOW_ANCHOR, HOW_TITLE};
use super::{
    num, rule_tally, run_rows, status_cell, status_icon, status_text, Headline, Piece, PointRow,
    Report, RuleRow,
};
use crate::compare::RuleStatus;

fn icon(h: Headline) -> &'static str {
    match h {
        Headline::Passed => "✅",
        Headline::ExpectedFailure => "✅",
        Headline::Failed => "❌",
        Headline::RunFailed => "💥",
        Headline::NoGolden => "🆕",
        Headline::Skipped => "⏭️",
    }
}

/// Table cells cannot hold `|` or newlines.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn code(s: &str) -> String {
    format!("`{}`", cell(s).replace('`', "'"))
}

pub(crate) fn render_markdown(r: &Report) -> String {
    let mut out = String::new();
    headline_section(&mut out, r);
    if r.skipped.is_some() {
        return out;
    }
    let reference = r.reference_label();
    rules_section(&mut out, r, reference);
    let metrics = r.checked_metrics();
    if !metrics.is_empty() {
        out.push_str("### Metrics\n\n");
        for m in &metrics {
            out.push_str(&metric_section(r, m, reference));
        }
    }
    overlay_section(&mut out, r);
    run_section(&mut out, r);
    config_section(&mut out, r);
    trainer_tail_section(&mut out, r);
    out
}

/// The headline, the exit status and rule count, the declared verdict, notes, grid and lane.
/// The two-run overlay (`compare RUN RUN2`): each chart, a file under `plots/`.
fn overlay_section(out: &mut String, r: &Report) {
    let Some(o) = r.reference.as_ref().and_then(|x| x.overlay.as_ref()) else {
        return;
    };
    if o.metrics.is_empty() {
        return;
    }
    out.push_str(&format!(
        "### {}\n\n",
        crate::report::format::overlay_title(o)
    ));
    for m in &o.metrics {
        out.push_str(&format!(
            "![{m}: {} and {}](plots/overlay_{})\n\n",
            o.run.replace(['[', ']'], ""),
            o.other.replace(['[', ']'], ""),
            crate::report::plot_file_name(m)
        ));
    }
}

fn headline_section(out: &mut String, r: &Report) {
    let h = r.headline();
    out.push_str(&format!(
        "## {} {}: {}\n\n",
        icon(h),
        r.scenario,
        r.summary()
    ));
    out.push_str(&format!("Exit status {}.", r.exit_status().code()));
    if let Some((total, failing)) = rule_tally(r) {
        let failing: Vec<String> = failing
            .iter()
            .map(|(_, x)| format!("{} {}", code(&x.rule), status_text(x.status)))
            .collect();
        out.push_str(&format!(
            " {total} rules, {} pass{}",
            total - failing.len(),
            if failing.is_empty() {
                ".".to_string()
            } else {
                format!("; failing: {}.", failing.join(", "))
            }
        ));
    }
    out.push_str("\n\n");
    if let Some(e) = &r.expected {
        let declared = serde_json::to_string(e).unwrap_or_default();
        match r.expected_match() {
            Some(Ok(())) => out.push_str(&format!(
                "> Declared verdict {} matched.\n\n",
                code(&declared)
            )),
            Some(Err(why)) => out.push_str(&format!(
                "> **Declared verdict {} not matched:** {}\n\n",
                code(&declared),
                cell(&why.0)
            )),
            None => {}
        }
    }
    for n in &r.notes {
        out.push_str(&format!("> **Note:** {}\n\n", cell(n)));
    }
    if let Some(b) = &r.budget {
        out.push_str(&format!(
            "> **False-alarm budget:** {}\n\n",
            cell(&b.text())
        ));
    }
    if let Some(g) = r.verdict.as_ref().and_then(|v| v.grid_mismatch.as_ref()) {
        out.push_str(&format!("> **Step grid mismatch:** {g}\n\n"));
    }
    if let Some(l) = r.verdict.as_ref().and_then(|v| v.exact_lane.as_ref()) {
        let lane = if l.applied { "on" } else { "off" };
        out.push_str(&format!(
            "> **Exact lane {lane}:** {}\n\n",
            cell(&l.message)
        ));
    }
}

/// The table of every rule with its evidence.
fn rules_section(out: &mut String, r: &Report, reference: &str) {
    if let Some(v) = &r.verdict {
        if !v.rules.is_empty() {
            out.push_str("### Rules\n\n");
            out.push_str(&format!(
                "| rule | status | at | value | {reference} | band | margin | evidence |\n\
                 |---|---|---|---:|---:|---|---:|---|\n"
            ));
            for x in v.rules.iter().map(RuleRow::new) {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    code(x.rule),
                    status_cell(x.status),
                    cell(x.at),
                    x.value,
                    x.golden,
                    x.band,
                    x.margin,
                    if x.shared {
                        format!(
                            "{} ([{}](#{HOW_ANCHOR}))",
                            cell(x.evidence),
                            HOW_TITLE.to_lowercase()
                        )
                    } else {
                        cell(x.evidence)
                    },
                ));
            }
            out.push('\n');
            how_section(out, r);
        }
    }
}

/// What rules of one kind share, said once: each distinct text and the rules it is about.
fn how_section(out: &mut String, r: &Report) {
    let texts = shared_texts(r);
    if texts.is_empty() {
        return;
    }
    out.push_str(&format!("### {HOW_TITLE}\n\n"));
    for (text, rules) in texts {
        let rules: Vec<String> = rules.iter().map(|x| code(x)).collect();
        out.push_str(&format!("- {}: {}\n", rules.join(", "), cell(&text)));
    }
    out.push('\n');
}

/// Where and how the run ran.
fn run_section(out: &mut String, r: &Report) {
    out.push_str("### Run\n\n| | |\n|---|---|\n");
    for (k, pieces) in run_rows(r) {
        let v: String = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Code(c) => code(c),
            })
            .collect();
        out.push_str(&format!("| {k} | {} |\n", cell(&v)));
    }
    out.push('\n');
}

/// The knobs that differ from their defaults, with where each value came from.
fn config_section(out: &mut String, r: &Report) {
    out.push_str("### Config (differs from defaults)\n\n");
    if r.knobs.is_empty() {
        out.push_str("Every knob has its default value.\n\n");
    } else {
        out.push_str("| key | default | value | origin |\n|---|---|---|---|\n");
        for k in &r.knobs {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                code(&k.key),
                k.default.as_deref().map(code).unwrap_or_else(|| "–".into()),
                code(&k.value),
                cell(&k.origin)
            ));
        }
        out.push('\n');
    }
}

/// An external trainer's last output lines, folded.
fn trainer_tail_section(out: &mut String, r: &Report) {
    if let Some(tail) = &r.trainer_tail {
        out.push_str("<details><summary>trainer output (last lines)</summary>\n\n```text\n");
        out.push_str(&tail.replace("```", "'''"));
        if !tail.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("```\n\n</details>\n");
    }
}

/// A folded table for one metric: the golden rule's points when it has one, otherwise a short
/// summary of the run's series.
fn metric_section(r: &Report, metric: &str, reference: &str) -> String {
    let mut out = String::new();
    let rule = r.golden_rule(metric);
    let worst = r
        .verdict
        .as_ref()
        .map(|v| {
            v.rules
                .iter()
                .filter(|x| x.metrics.iter().any(|m| m == metric))
                .map(|x| x.status)
                .max_by_key(|s| match s {
                    RuleStatus::Pass => 0,
                    RuleStatus::Improved => 1,
                    RuleStatus::Missing => 2,
                    RuleStatus::Regressed => 3,
                })
                .unwrap_or(RuleStatus::Pass)
        })
        .unwrap_or(RuleStatus::Pass);
    let series = r.metrics.series(metric);
    let last = series.last().map(|(_, v)| num(*v)).unwrap_or("–".into());
    if r.is_multi_seed() {
        out.push_str(&format!(
            "<details><summary>{} <code>{}</code>: {}, the seeds' window means</summary>\n\n",
            status_icon(worst),
            html_escape(metric),
            status_text(worst),
        ));
    } else {
        out.push_str(&format!(
            "<details><summary>{} <code>{}</code>: {}, {} steps, last {}</summary>\n\n",
            status_icon(worst),
            html_escape(metric),
            status_text(worst),
            series.len(),
            last
        ));
    }
    match rule {
        Some(rule) if !rule.points.is_empty() => {
            out.push_str(&format!(
                "| at | value | {reference} | band | margin | |\n|---|---:|---:|---|---:|---|\n"
            ));
            for p in rule.points.iter().map(PointRow::new) {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} |\n",
                    p.at,
                    p.value,
                    p.golden,
                    p.band,
                    p.margin,
                    status_icon(p.status)
                ));
            }
        }
        _ => {
            let vals: Vec<f64> = series.iter().map(|(_, v)| *v).collect();
            if vals.is_empty() {
                out.push_str("The run has no value of this metric.\n");
            } else {
                use crate::compare::expr::{aggregate, AggFn};
                out.push_str("| first | last | min | max | mean |\n|---:|---:|---:|---:|---:|\n");
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} |\n",
                    num(vals[0]),
                    num(vals[vals.len() - 1]),
                    num(aggregate(AggFn::Min, &vals)),
                    num(aggregate(AggFn::Max, &vals)),
                    num(aggregate(AggFn::Mean, &vals)),
                ));
            }
        }
    }
    out.push_str("\n</details>\n\n");
    out
}

pub(crate) use crate::util::html_escape;
