//! What a history shows: one trend chart (SVG) per window, a page (HTML and Markdown) with each
//! scenario's windows, change points and runs, the Markdown a GitHub Actions step summary shows,
//! and the lines the terminal prints.

use crate::report::doc::{plain, to_html, to_markdown, Block, Document, Inline, Row, Table, Text};
use crate::report::{plot_trend, TrendPlot};

use super::collect::Collected;
use super::trend::{Change, ChangeKind, Trend, WindowTrend};

/// Everything a history writes, by file name, and what it prints.
pub struct Rendered {
    pub files: Vec<(String, String)>,
    pub gh_summary: String,
    pub terminal: String,
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:1em auto;padding:0 1em}\
table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;\
text-align:left;vertical-align:top}h2.fail{color:#b00}h2.pass{color:#070}tr.fail td{background:#fee}\
tr.warn td{background:#ffd}code{font-size:90%}";

/// A file name for a window's chart: the scenario, hardware, metric and steps, with anything
/// but letters, digits, `-` and `.` made `_`.
fn chart_name(t: &Trend, w: &WindowTrend) -> String {
    chart_name_of(&format!(
        "{}--{}--{}--{}-{}.svg",
        t.scenario, t.hardware, w.window.metric, w.window.first, w.window.last
    ))
}

/// `raw` with anything but letters, digits, `-` and `.` made `_`.
fn chart_name_of(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// An RFC 3339 time to the second, as `2026-12-05 14:32:05`; anything else as it is.
fn short_time(t: &str) -> String {
    match (t.get(..10), t.get(11..19)) {
        (Some(d), Some(h)) if t.as_bytes().get(10) == Some(&b'T') => format!("{d} {h}"),
        _ => t.to_string(),
    }
}

fn num(v: f64) -> String {
    crate::model::checks::expr::fmt_num(v)
}

/// What a change asks of the reader.
fn action(c: &Change) -> String {
    match c.kind {
        ChangeKind::Intentional => "intentional: a golden was blessed between these runs".into(),
        ChangeKind::Improvement => format!(
            "improvement: if it is wanted, re-bless the golden (`rlharness golden calibrate`, then \
             accept a run of {})",
            c.to
        ),
        ChangeKind::Suspect => format!("suspect: the change is between {} and {}", c.from, c.to),
    }
}

/// A change's size in noise units, or why there is none.
fn z_text(c: &Change) -> String {
    match c.z {
        Some(z) => format!("{z:+.1} sigma"),
        None => "no noise measured (sigma 0): any move is a change".into(),
    }
}

fn change_line(t: &Trend, w: &WindowTrend, c: &Change) -> String {
    format!(
        "{} on {}: {} moved {} -> {} ({}) at run {} of {}; {}",
        t.scenario,
        t.hardware,
        w.window.label(),
        num(c.before),
        num(c.after),
        z_text(c),
        c.run + 1,
        t.runs.len(),
        action(c)
    )
}

fn windows_table(t: &Trend) -> Table {
    let head = [
        "window",
        "noise (sigma)",
        "golden",
        "last run",
        "change points",
    ]
    .map(plain);
    let rows = t
        .windows
        .iter()
        .map(|w| {
            let golden = match (w.window.golden, w.window.band) {
                (Some(g), Some(b)) => format!("{} ± {}", num(g), num(b)),
                (Some(g), None) => num(g),
                _ => "–".into(),
            };
            let last = w
                .values
                .iter()
                .rev()
                .flatten()
                .next()
                .map_or("–".into(), |v| num(*v));
            let changes = if w.changes.is_empty() {
                "none".to_string()
            } else {
                w.changes
                    .iter()
                    .map(|c| format!("run {}: {} -> {}", c.run + 1, num(c.before), num(c.after)))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let suspect = w.changes.iter().any(|c| c.kind == ChangeKind::Suspect);
            Row {
                class: suspect.then_some("fail"),
                anchor: None,
                cells: vec![
                    vec![Inline::Code(w.window.label())],
                    plain(format!("{} ({})", num(w.sigma), w.sigma_from)),
                    plain(golden),
                    plain(last),
                    plain(changes),
                ],
            }
        })
        .collect();
    Table {
        head: head.to_vec(),
        rows,
        ..Table::default()
    }
}

fn changes_table(t: &Trend) -> Option<Table> {
    let rows: Vec<Row> = t
        .windows
        .iter()
        .flat_map(|w| w.changes.iter().map(move |c| (w, c)))
        .map(|(w, c)| Row {
            class: match c.kind {
                ChangeKind::Suspect => Some("fail"),
                ChangeKind::Improvement => Some("warn"),
                ChangeKind::Intentional => None,
            },
            anchor: None,
            cells: vec![
                vec![Inline::Code(w.window.label())],
                plain(format!("{}", c.run + 1)),
                plain(format!(
                    "{} -> {} ({})",
                    num(c.before),
                    num(c.after),
                    z_text(c)
                )),
                vec![Inline::Code(format!("{} .. {}", c.from, c.to))],
                plain(action(c)),
            ],
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        head: [
            "window",
            "first run at the new level",
            "move",
            "between",
            "what it asks",
        ]
        .map(plain)
        .to_vec(),
        rows,
        ..Table::default()
    })
}

fn runs_table(t: &Trend) -> Table {
    let rows = t
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| Row {
            class: if !r.passed_then() {
                Some("fail")
            } else {
                r.today().map(|_| "warn")
            },
            anchor: None,
            cells: vec![
                plain(format!("{}", i + 1)),
                plain(short_time(&r.started)),
                vec![Inline::Code(r.version())],
                plain(match (r.tables.len(), &r.at_the_time) {
                    (1, Some(v)) => v.clone(),
                    (n, Some(v)) => format!("{v} ({n} seeds)"),
                    (_, None) => "unknown (no verdict.json)".into(),
                }),
                plain(r.today().map_or(String::new(), |t| format!("⚠ {t}"))),
                vec![Inline::Code(r.dir.clone())],
            ],
        })
        .collect();
    Table {
        head: [
            "run",
            "started",
            "code",
            "verdict at the time",
            "today, where it differs or the golden changed",
            "directory",
        ]
        .map(plain)
        .to_vec(),
        rows,
        ..Table::default()
    }
}

fn scenario_blocks(t: &Trend, images: bool, overlay: usize) -> Vec<Block> {
    let suspect = t
        .windows
        .iter()
        .any(|w| w.changes.iter().any(|c| c.kind == ChangeKind::Suspect));
    let first = t
        .runs
        .first()
        .map_or(String::new(), |r| short_time(&r.started));
    let last = t
        .runs
        .last()
        .map_or(String::new(), |r| short_time(&r.started));
    let mut intro: Text = plain(format!("{} runs from {first} to {last}; ", t.runs.len()));
    intro.push(Inline::Plain(match t.blesses.as_slice() {
        [] => "no golden blessed.".into(),
        b => format!(
            "goldens blessed {}.",
            b.iter()
                .map(|d| short_time(d))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }));
    let mut blocks = vec![
        Block::Heading {
            level: 2,
            class: Some(if suspect { "fail" } else { "pass" }),
            text: plain(format!("{} on {}", t.scenario, t.hardware)),
        },
        Block::Paragraph(intro),
        Block::Table(windows_table(t)),
    ];
    if let Some(c) = changes_table(t) {
        blocks.push(Block::Table(c));
    }
    if images {
        for w in &t.windows {
            blocks.push(Block::Image {
                src: chart_name(t, w),
                alt: w.window.label(),
            });
        }
        if overlay > 0 {
            blocks.push(Block::Paragraph(plain(format!(
                "The last {} run(s), step by step:",
                overlay.min(t.runs.len())
            ))));
            for m in overlay_metrics(t) {
                blocks.push(Block::Image {
                    src: overlay_name(t, m),
                    alt: format!("{m}: the last {overlay} runs"),
                });
            }
        }
        blocks.push(Block::Table(runs_table(t)));
    }
    blocks
}

fn document(c: &Collected, images: bool, overlay: usize) -> Document {
    let runs: usize = c.trends.iter().map(|t| t.runs.len()).sum();
    let mut blocks = vec![
        Block::Heading {
            level: 1,
            class: None,
            text: plain("rlharness history"),
        },
        Block::Paragraph(plain(format!(
            "{runs} runs of {} scenario(s). Change points: PELT with the Gaussian mean-change \
             cost, the noise scale from each window's calibration (else the series' own), and a \
             penalty at which a series of noise alone shows a change at most 5 % of the time.",
            c.trends.len()
        ))),
    ];
    if c.calibrations > 0 {
        blocks.push(Block::Paragraph(plain(calibrations_line(c.calibrations))));
    }
    if !c.unreadable.is_empty() {
        let list: Vec<String> = c
            .unreadable
            .iter()
            .map(|(d, why)| format!("{}: {why}", d.display()))
            .collect();
        blocks.push(Block::Paragraph(plain(format!(
            "Left out, unreadable: {}",
            list.join("; ")
        ))));
    }
    for t in &c.trends {
        blocks.extend(scenario_blocks(t, images, overlay));
    }
    Document {
        title: "rlharness history".into(),
        style: STYLE,
        markdown_depth: 0,
        blocks,
    }
}

fn chart(t: &Trend, w: &WindowTrend) -> String {
    let values: Vec<(u64, f64)> = w
        .values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i as u64 + 1, v)))
        .collect();
    let failing: Vec<u64> = t
        .runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.passed_then())
        .map(|(i, _)| i as u64 + 1)
        .collect();
    // Between the last run before the change that has a value and the first after it.
    let changes: Vec<f64> = w
        .changes
        .iter()
        .map(|c| (c.prev + c.run) as f64 / 2.0 + 1.0)
        .collect();
    let band = w
        .window
        .golden
        .zip(w.window.band)
        .map(|(g, b)| (g - b, g + b));
    plot_trend(&TrendPlot {
        title: &format!("{} on {}: {}", t.scenario, t.hardware, w.window.label()),
        values: &values,
        golden: w.window.golden,
        band,
        failing: &failing,
        changes: &changes,
    })
}

fn terminal(c: &Collected) -> String {
    let mut out = Vec::new();
    for t in &c.trends {
        let n: usize = t.windows.iter().map(|w| w.changes.len()).sum();
        out.push(format!(
            "{} on {}: {} runs, {} windows, {n} change point(s)",
            t.scenario,
            t.hardware,
            t.runs.len(),
            t.windows.len()
        ));
        for w in &t.windows {
            for ch in &w.changes {
                out.push(format!("  {}", change_line(t, w, ch)));
            }
        }
        for (i, r) in t.runs.iter().enumerate() {
            if let Some(today) = r.today() {
                out.push(format!(
                    "  run {} ({}): {} at the time; {today}",
                    i + 1,
                    r.dir,
                    r.verdict_then()
                ));
            }
        }
    }
    if c.calibrations > 0 {
        out.push(calibrations_line(c.calibrations));
    }
    for (d, why) in &c.unreadable {
        out.push(format!("left out {}: {why}", d.display()));
    }
    out.join("\n") + "\n"
}

fn calibrations_line(n: usize) -> String {
    format!(
        "Left out: {n} calibration run(s) (`golden calibrate` measures the noise with them; they \
         are not runs of the scenario)"
    )
}

/// The metrics a scenario's overlay draws: those of its windows, in order, once each.
fn overlay_metrics(t: &Trend) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for w in &t.windows {
        if !out.contains(&w.window.metric.as_str()) {
            out.push(&w.window.metric);
        }
    }
    out
}

/// A scenario's overlay chart of `metric`: the file name.
fn overlay_name(t: &Trend, metric: &str) -> String {
    chart_name_of(&format!(
        "{}--{}--overlay--{metric}.svg",
        t.scenario, t.hardware
    ))
}

/// The last `n` runs' curves of `metric` (each run's first series: a multi-seed run's first
/// seed), oldest first, each named by its run number and code.
fn overlay_chart(t: &Trend, metric: &str, n: usize) -> String {
    let first = t.runs.len().saturating_sub(n);
    let runs: Vec<(String, Vec<(u64, f64)>)> = t.runs[first..]
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                format!("run {}: {}", first + i + 1, r.version()),
                r.tables
                    .first()
                    .map(|tb| tb.series(metric))
                    .unwrap_or_default(),
            )
        })
        .collect();
    crate::report::render_runs(metric, &runs)
}

/// Render a history; `overlay`: the last that many runs of each scenario drawn on one chart per
/// metric (0: none).
pub fn render(c: &Collected, overlay: usize) -> Rendered {
    let page = document(c, true, overlay);
    let mut files = vec![
        ("history.html".to_string(), to_html(&page)),
        ("history.md".to_string(), to_markdown(&page)),
    ];
    for t in &c.trends {
        for w in &t.windows {
            files.push((chart_name(t, w), chart(t, w)));
        }
        if overlay > 0 {
            for m in overlay_metrics(t) {
                files.push((overlay_name(t, m), overlay_chart(t, m, overlay)));
            }
        }
    }
    Rendered {
        files,
        gh_summary: to_markdown(&document(c, false, 0)),
        terminal: terminal(c),
    }
}
