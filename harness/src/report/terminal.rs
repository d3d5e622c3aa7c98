//! What a person reads on the terminal after a run or a `compare`: the outcome, each rule that
//! did not pass with its value, reference, band and step, and where the reports are. Coloured
//! as `--color` says (by default on a terminal, unless `NO_COLOR` is set), plain otherwise. The
//! Markdown, HTML and JUnit go to files; `compare --format md|json` prints those for scripts.

use super::{Headline, Report, RuleRow};
use crate::judge::RuleStatus;

pub(crate) use crate::model::util::stdout_color;

fn paint(text: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// The summary of one judged scenario; `reports` is the folder its files were written to.
pub(crate) fn render_terminal(r: &Report, reports: Option<&str>, color: bool) -> String {
    let code = match r.headline() {
        Headline::Passed | Headline::ExpectedFailure => "32",
        Headline::Skipped | Headline::NoGolden => "33",
        Headline::Failed | Headline::RunFailed => "31",
    };
    let mut out = format!(
        "{}: {}\n",
        paint(&r.scenario, "1", color),
        paint(&r.summary(), code, color)
    );
    out.push_str(&print_failing(
        &failing_rules(r),
        r.headline() == Headline::ExpectedFailure,
        color,
    ));
    for n in r
        .notes
        .iter()
        .filter(|n| n.starts_with(super::multi_seed::GOLDEN_CHANGED))
    {
        out.push_str(&format!(
            "  {}\n",
            paint(&format!("note: {n}"), "33", color)
        ));
    }
    if let Some(dir) = reports.filter(|d| !d.is_empty()) {
        out.push_str(&format!(
            "  reports: {dir}/report.md, report.html, junit.xml\n"
        ));
    }
    out
}

/// One plain line per rule that did not pass: rule, status, step or window, value, reference
/// and band (or the evidence's message when there is no value).
pub(crate) fn failing_rules(r: &Report) -> Vec<String> {
    failing_rules_named(r).into_iter().map(|(_, l)| l).collect()
}

/// [`failing_rules`], each line with the name of its rule (`golden:<metric>`, ...).
pub(crate) fn failing_rules_named(r: &Report) -> Vec<(String, String)> {
    let Some(v) = &r.verdict else {
        return Vec::new();
    };
    v.rules
        .iter()
        .filter(|x| x.status != RuleStatus::Pass)
        .map(|x| {
            let row = RuleRow::new(x);
            let mut line = format!("{} {}", row.rule, super::status_text(row.status));
            if row.at != "–" {
                line.push_str(&format!(" at {}", row.at));
            }
            if row.value != "–" || row.golden != "–" {
                line.push_str(&format!(": {} (reference {}", row.value, row.golden));
                if row.band != "–" {
                    line.push_str(&format!(", band {}", row.band));
                }
                line.push(')');
            } else if !row.evidence.is_empty() {
                line.push_str(&format!(": {}", row.evidence));
            }
            (x.rule.clone(), line)
        })
        .collect()
}

/// The failing-rule lines of a finished scenario, as `render_terminal` prints them: a red `✗`
/// each, or, for a scenario that failed as it declares (`expected`), a green `✓` and
/// `expected:` (the harness caught what it had to; nothing to fix).
pub(crate) fn print_failing(lines: &[String], expected: bool, color: bool) -> String {
    lines
        .iter()
        .map(|l| {
            if expected {
                format!("  {} expected: {l}\n", paint("✓", "32", color))
            } else {
                format!("  {} {l}\n", paint("✗", "31", color))
            }
        })
        .collect()
}
