//! A run's report as one [`Document`], written as `report.md` and `report.html` alike: the
//! verdict first with the failing rules named, then the rules, each checked metric (its plot,
//! and its compared points or its values, folded), the overlay of `compare RUN RUN2`, the run,
//! the knobs that differ from the defaults, and an external trainer's last lines.
//!
//! `report.md` is sized for a CI step summary (its headings sit one level down, and the plots
//! are left out but for the overlay's pictures); `report.html` is one self-contained page that
//! draws every plot inline, read in any browser as it comes. CI opens it in headless Chromium
//! (harness/tests/browser/).

use super::doc::{
    self, plain, Block, Column, Document, Figure, Inline, Row, Status, Table, Target,
};
use super::format::{
    overlay_title, plot_file_name, rule_tally, run_rows, shared_texts, status_text, Piece,
    PointRow, RuleRow, HOW_TITLE,
};
use super::{num, render_plots, Headline, Report};
use crate::judge::RuleStatus;

const STYLE: &str = "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;\
color:#222;max-width:1100px}h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:2rem}\
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;\
text-align:left;vertical-align:top}th{background:#f5f5f5}td.n{text-align:right;\
font-variant-numeric:tabular-nums}td.n,td.nw,.nw{white-space:nowrap}td.ev{min-width:12em}.pass{color:#1a7f37}\
.fail{color:#cf222e}.warn{color:#9a6700}\
.note{background:#fff8c5;padding:.5rem .75rem;border-left:4px solid #d4a72c}\
.mark{vertical-align:-.15em;margin-right:.3em}figure{margin:1rem 0}\
figure svg{max-width:100%;height:auto}pre{background:#f6f8fa;padding:.75rem;overflow:auto}\
code{font-size:.9em}summary{margin:.25rem 0}";

/// The charts of a report: each checked metric's `(file name, SVG)`, and the two-run
/// overlay's `(file name, metric, SVG)`; drawn once, for the page and for `plots/`.
pub(crate) struct Charts {
    pub(crate) metrics: Vec<(String, String)>,
    pub(crate) overlay: Vec<(String, String, String)>,
}

impl Charts {
    pub(crate) fn of(r: &Report) -> Charts {
        Charts {
            metrics: render_plots(r),
            overlay: r.overlay_charts(),
        }
    }
}

/// `report.md` alone (`compare --format md`).
pub(crate) fn render_markdown(r: &Report) -> String {
    doc::to_markdown(&document(r, &Charts::of(r)))
}

/// `report.html` alone.
#[cfg(test)]
pub(crate) fn render_html(r: &Report) -> String {
    doc::to_html(&document(r, &Charts::of(r)))
}

/// The whole report; a skipped scenario's is its headline alone.
pub(crate) fn document(r: &Report, charts: &Charts) -> Document {
    let mut b = headline(r);
    if r.skipped.is_none() {
        rules(r, &mut b);
        metrics(r, &charts.metrics, &mut b);
        overlay(r, &charts.overlay, &mut b);
        run_and_config(r, &mut b);
        if let Some(tail) = &r.trainer_tail {
            b.push(Block::Details {
                summary: plain("trainer output (last lines)"),
                blocks: vec![Block::Preformatted(tail.clone())],
            });
        }
    }
    Document {
        title: format!("{}: {}", r.scenario, r.summary()),
        style: STYLE,
        markdown_depth: 1,
        blocks: b,
    }
}

fn heading(level: u8, text: &str) -> Block {
    Block::Heading {
        level,
        class: None,
        text: plain(text),
    }
}

/// A mark of a rule's status, named by its word.
fn status_mark(s: RuleStatus) -> Inline {
    let status = match s {
        RuleStatus::Pass => Status::Pass,
        RuleStatus::Regressed => Status::Fail,
        RuleStatus::Improved => Status::Warn,
        RuleStatus::Missing => Status::Unknown,
    };
    Inline::Mark {
        status,
        label: status_text(s).into(),
    }
}

/// A status cell: its mark and its word.
fn status_cell(s: RuleStatus) -> Vec<Inline> {
    vec![status_mark(s), Inline::Plain(status_text(s).into())]
}

/// The headline's mark and its status class.
fn headline_mark(h: Headline) -> (Inline, &'static str) {
    let (status, label, class) = match h {
        Headline::Passed => (Status::Pass, "passed", "pass"),
        Headline::ExpectedFailure => (Status::Pass, "expected failure", "pass"),
        Headline::Failed => (Status::Fail, "failed", "fail"),
        Headline::RunFailed => (Status::Broken, "run failed", "fail"),
        Headline::NoGolden => (Status::New, "no golden", "warn"),
        Headline::Skipped => (Status::Skip, "skipped", "pass"),
    };
    let label = label.into();
    (Inline::Mark { status, label }, class)
}

/// The id of a rule's row in the rules table, by its index, so the headline can link to it.
fn rule_anchor(index: usize) -> String {
    format!("rule-{}", index + 1)
}

/// A note that begins with a bold `title`; its text's `code` is set as code.
fn note(title: &str, text: &str) -> Block {
    let mut t = vec![Inline::Strong(title.into()), Inline::Plain(" ".into())];
    t.extend(doc::marked(text));
    Block::Note(t)
}

/// The headline, the exit status with the failing rules, the declared verdict, notes, budget,
/// grid and lane.
fn headline(r: &Report) -> Vec<Block> {
    let (mark, class) = headline_mark(r.headline());
    let mut b = vec![
        Block::Heading {
            level: 1,
            class: Some(class),
            text: vec![
                mark,
                Inline::Plain(format!("{}: {}", r.scenario, r.summary())),
            ],
        },
        Block::Paragraph(exit_line(r)),
    ];
    if let (Some(e), Some(m)) = (&r.expected, r.expected_match()) {
        let declared = serde_json::to_string(e).unwrap_or_default();
        let mut t = vec![
            Inline::Plain("Declared verdict ".into()),
            Inline::Code(declared),
        ];
        match m {
            Ok(()) => t.push(Inline::Plain(" matched.".into())),
            Err(why) => t.extend([
                Inline::Plain(" ".into()),
                Inline::Strong("not matched:".into()),
                Inline::Plain(format!(" {}", why.0)),
            ]),
        }
        b.push(Block::Note(t));
    }
    b.extend(r.notes.iter().map(|n| note("Note:", n)));
    if let Some(budget) = &r.budget {
        b.push(note("False-alarm budget:", &budget.text()));
    }
    if let Some(g) = r.verdict.as_ref().and_then(|v| v.grid_mismatch.as_ref()) {
        b.push(note("Step grid mismatch:", g));
    }
    if let Some(l) = r.verdict.as_ref().and_then(|v| v.exact_lane.as_ref()) {
        let lane = if l.applied { "on" } else { "off" };
        b.push(note(&format!("Exact lane {lane}:"), &l.message));
    }
    b
}

/// "Exit status 1. 7 rules, 4 pass; failing: `golden:...` regressed, ...", each failing rule
/// linking to its row.
fn exit_line(r: &Report) -> Vec<Inline> {
    let mut t = vec![Inline::Plain(format!(
        "Exit status {}.",
        r.exit_status().code()
    ))];
    let Some((total, failing)) = rule_tally(r) else {
        return t;
    };
    t.push(Inline::Plain(format!(
        " {total} rules, {} pass",
        total - failing.len()
    )));
    if failing.is_empty() {
        t.push(Inline::Plain(".".into()));
        return t;
    }
    t.extend([
        Inline::Plain("; ".into()),
        Inline::Alert("failing:".into()),
        Inline::Plain(" ".into()),
    ]);
    for (n, (i, x)) in failing.iter().enumerate() {
        if n > 0 {
            t.push(Inline::Plain(", ".into()));
        }
        t.push(Inline::Link {
            text: vec![Inline::Code(x.rule.clone())],
            to: Target::Row(rule_anchor(*i)),
        });
        t.push(Inline::Plain(format!(" {}", status_text(x.status))));
    }
    t.push(Inline::Plain(".".into()));
    t
}

/// The table of every rule with its evidence, then what rules of one kind share, said once.
fn rules(r: &Report, b: &mut Vec<Block>) {
    let Some(v) = r.verdict.as_ref().filter(|v| !v.rules.is_empty()) else {
        return;
    };
    use Column::{NoWrap, Number, Text, Wide};
    let head = [
        "rule",
        "status",
        "at",
        "value",
        r.reference_label(),
        "band",
        "margin",
    ];
    let rows = v
        .rules
        .iter()
        .map(RuleRow::new)
        .enumerate()
        .map(|(i, x)| {
            let mut evidence = plain(x.evidence);
            if x.shared {
                evidence.extend([
                    Inline::Plain(" (".into()),
                    Inline::Link {
                        text: plain(HOW_TITLE.to_lowercase()),
                        to: Target::Heading(HOW_TITLE.into()),
                    },
                    Inline::Plain(")".into()),
                ]);
            }
            Row {
                class: None,
                anchor: Some(rule_anchor(i)),
                cells: vec![
                    vec![Inline::Code(x.rule.into())],
                    status_cell(x.status),
                    plain(x.at),
                    plain(x.value),
                    plain(x.golden),
                    plain(x.band),
                    plain(x.margin),
                    evidence,
                ],
            }
        })
        .collect();
    b.push(heading(2, "Rules"));
    b.push(Block::Table(Table {
        head: head.into_iter().chain(["evidence"]).map(plain).collect(),
        columns: vec![Text, NoWrap, NoWrap, Number, Number, NoWrap, Number, Wide],
        row_heads: false,
        rows,
    }));
    let texts = shared_texts(r);
    if !texts.is_empty() {
        b.push(heading(2, HOW_TITLE));
        b.push(Block::List(
            texts
                .into_iter()
                .map(|(text, rules)| {
                    let mut t = Vec::new();
                    for (n, rule) in rules.into_iter().enumerate() {
                        if n > 0 {
                            t.push(Inline::Plain(", ".into()));
                        }
                        t.push(Inline::Code(rule.into()));
                    }
                    t.push(Inline::Plain(format!(": {text}")));
                    t
                })
                .collect(),
        ));
    }
}

/// Each checked metric: its plot, then (folded) the golden rule's compared points, or a short
/// summary of the run's series.
fn metrics(r: &Report, plots: &[(String, String)], b: &mut Vec<Block>) {
    let metrics = r.checked_metrics();
    if metrics.is_empty() {
        return;
    }
    b.push(heading(2, "Metrics"));
    for m in &metrics {
        if let Some((_, svg)) = plots.iter().find(|(f, _)| *f == plot_file_name(m)) {
            b.push(Block::Figure(Figure {
                svg: svg.clone(),
                caption: vec![Inline::Code(m.clone())],
                data: vec![("metric", m.clone())],
                file: None,
            }));
        }
        b.push(metric_details(r, m));
    }
}

/// The worst status of the rules that read `metric` (pass when none does).
fn worst_status(r: &Report, metric: &str) -> RuleStatus {
    let rank = |s: &RuleStatus| match s {
        RuleStatus::Pass => 0,
        RuleStatus::Improved => 1,
        RuleStatus::Missing => 2,
        RuleStatus::Regressed => 3,
    };
    r.verdict
        .iter()
        .flat_map(|v| v.rules.iter())
        .filter(|x| x.metrics.iter().any(|m| m == metric))
        .map(|x| x.status)
        .max_by_key(rank)
        .unwrap_or(RuleStatus::Pass)
}

/// One metric's folded table: its worst status, its steps and last value in the summary.
fn metric_details(r: &Report, metric: &str) -> Block {
    let worst = worst_status(r, metric);
    let series = r.metrics.series(metric);
    let mut summary = vec![
        status_mark(worst),
        Inline::Code(metric.into()),
        Inline::Plain(format!(": {}", status_text(worst))),
    ];
    let said = if r.is_multi_seed() {
        ", the seeds' window means".to_string()
    } else {
        let last = series.last().map_or("–".into(), |(_, v)| num(*v));
        format!(", {} steps, last {last}", series.len())
    };
    summary.push(Inline::Plain(said));
    let points = r
        .golden_rule(metric)
        .map_or(&[][..], |x| x.points.as_slice());
    let block = if !points.is_empty() {
        summary.push(Inline::Plain(format!("; {} compared points", points.len())));
        points_table(r, points)
    } else {
        match r.metrics.summary(metric) {
            None => Block::Paragraph(plain("The run has no value of this metric.")),
            Some(s) => Block::Table(Table {
                head: ["first", "last", "min", "max", "mean"].map(plain).to_vec(),
                columns: vec![Column::Number; 5],
                row_heads: false,
                rows: vec![Row {
                    cells: [s.first, s.last, s.min, s.max, s.mean]
                        .map(|v| plain(num(v)))
                        .to_vec(),
                    ..Row::default()
                }],
            }),
        }
    };
    Block::Details {
        summary,
        blocks: vec![block],
    }
}

/// The compared points of a metric's golden rule (a multi-seed run's distribution test).
fn points_table(r: &Report, points: &[crate::judge::PointCheck]) -> Block {
    use Column::{NoWrap, Number};
    let head = [
        "at",
        "value",
        r.reference_label(),
        "band",
        "margin",
        "status",
    ];
    Block::Table(Table {
        head: head.into_iter().map(plain).collect(),
        columns: vec![NoWrap, Number, Number, NoWrap, Number, NoWrap],
        row_heads: false,
        rows: points
            .iter()
            .map(PointRow::new)
            .map(|p| Row {
                cells: vec![
                    plain(p.at),
                    plain(p.value),
                    plain(p.golden),
                    plain(p.band),
                    plain(p.margin),
                    status_cell(p.status),
                ],
                ..Row::default()
            })
            .collect(),
    })
}

/// The two-run overlay (`compare RUN RUN2`): each chart inline, and as its file under
/// `plots/` (Markdown shows the files as pictures).
fn overlay(r: &Report, charts: &[(String, String, String)], b: &mut Vec<Block>) {
    let Some(o) = r.reference.as_ref().and_then(|x| x.overlay.as_ref()) else {
        return;
    };
    if charts.is_empty() {
        return;
    }
    b.push(heading(2, &overlay_title(o)));
    let names = format!("{} and {}", o.run, o.other);
    for (file, m, svg) in charts {
        let path = format!("plots/{file}");
        b.push(Block::Figure(Figure {
            svg: svg.clone(),
            caption: vec![
                Inline::Code(m.clone()),
                Inline::Plain(" (".into()),
                Inline::Link {
                    text: plain(path.clone()),
                    to: Target::File(path.clone()),
                },
                Inline::Plain(")".into()),
            ],
            data: vec![("overlay", m.clone()), ("file", path.clone())],
            file: Some((path, format!("{m}: {names}"))),
        }));
    }
}

/// Where and how the run ran, then the knobs that differ from their defaults, with where each
/// value came from.
fn run_and_config(r: &Report, b: &mut Vec<Block>) {
    let rows = run_rows(r)
        .into_iter()
        .map(|(k, pieces)| Row {
            cells: vec![
                plain(k),
                pieces
                    .into_iter()
                    .map(|p| match p {
                        Piece::Text(t) => Inline::Plain(t),
                        Piece::Code(c) => Inline::Code(c),
                    })
                    .collect(),
            ],
            ..Row::default()
        })
        .collect();
    b.push(heading(2, "Run"));
    b.push(Block::Table(Table {
        head: vec![Vec::new(), Vec::new()],
        columns: Vec::new(),
        row_heads: true,
        rows,
    }));
    b.push(heading(2, "Config (differs from defaults)"));
    if r.knobs.is_empty() {
        b.push(Block::Paragraph(plain("Every knob has its default value.")));
        return;
    }
    b.push(Block::Table(Table {
        head: ["key", "default", "value", "origin"].map(plain).to_vec(),
        rows: r
            .knobs
            .iter()
            .map(|k| Row {
                cells: vec![
                    vec![Inline::Code(k.key.clone())],
                    k.default
                        .as_ref()
                        .map_or(plain("–"), |d| vec![Inline::Code(d.clone())]),
                    vec![Inline::Code(k.value.clone())],
                    plain(&k.origin),
                ],
                ..Row::default()
            })
            .collect(),
        ..Table::default()
    }));
}
