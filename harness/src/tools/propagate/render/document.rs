//! The propagation report as one [`Document`], written as `propagation.md` and
//! `propagation.html` alike: the verdict, then what to act on (keys the manifest does not
//! account for, flagged knobs, then what the manifest claims and does not hold), then the whole
//! matrix, then the rest.

use super::{flag_text, headline, PropagationReport, UNLISTED_UNSEEN};
use crate::report::doc::{marked, plain, Block, Document, Inline, Row, Table, Text};
use crate::tools::propagate::verdict::KnobResult;

/// The sections' titles (level-2 headings), in the order a report shows those it has.
pub(crate) mod titles {
    // first the manifest's unaccounted keys (`accounted::TITLE`)
    pub(crate) const FLAGGED: &str = "Flagged knobs";
    pub(crate) const CLOSED: &str = "Known gaps that closed";
    pub(crate) const UNLISTED: &str = "Knobs the manifest does not list";
    pub(crate) const CLAIMS: &str = "Claims of the manifest that no run observes";
    pub(crate) const MATRIX: &str = "Every knob";
    // then the environment (`environ::TITLE`)
    pub(crate) const UNOBSERVED: &str = "Knobs not observed";
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
     td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}\
     table{width:100%;table-layout:fixed}th:nth-child(1){width:26%}th:nth-child(2){width:15%}\
     th:nth-child(3){width:9%}td,li{overflow-wrap:anywhere}\
     tr.flagged td{background:#fde8e8}tr.known td{background:#fdf6e3}tr.ok td{background:#e9f7ec}\
     h1.fail,h2.fail{color:#a00}h1.pass{color:#070}code{font-size:90%}";

fn heading(level: u8, text: Text) -> Block {
    Block::Heading {
        level,
        class: None,
        text,
    }
}

fn section(title: &str) -> Block {
    heading(2, plain(title))
}

/// The report's verdict in one line: passed or failed, and the counts.
pub(crate) fn verdict_line(r: &PropagationReport) -> String {
    format!(
        "{}: {}",
        if r.passed() { "Passed" } else { "Failed" },
        r.summary()
    )
}

/// The whole report.
pub(crate) fn document(r: &PropagationReport) -> Document {
    let mut b = vec![
        Block::Heading {
            level: 1,
            class: Some(if r.passed() { "pass" } else { "fail" }),
            text: plain(format!(
                "Knob propagation: {} ({} backend)",
                r.scenario, r.backend
            )),
        },
        Block::Paragraph(plain(verdict_line(r))),
        Block::Paragraph(marked(&r.provenance())),
    ];
    // A key the manifest does not account for fails before any flag: nothing could show
    // whether it reaches the server.
    if !r.unaccounted.is_empty() {
        b.extend(crate::tools::propagate::accounted::blocks(
            &r.unaccounted,
            &r.manifest,
        ));
    }
    flagged(r, &mut b);
    if !r.closed_gaps.is_empty() {
        b.push(section(titles::CLOSED));
        b.push(Block::List(
            r.closed_gaps.iter().map(|c| marked(c)).collect(),
        ));
    }
    unlisted(r, &mut b);
    let claims: Vec<Text> = r
        .knobs
        .iter()
        .flat_map(|k| {
            k.claims.iter().map(|c| {
                let mut t = vec![Inline::Code(k.path.clone()), Inline::Plain(": ".into())];
                t.extend(marked(c));
                t
            })
        })
        .collect();
    if !claims.is_empty() {
        b.push(section(titles::CLAIMS));
        b.push(Block::List(claims));
    }
    b.push(section(titles::MATRIX));
    b.push(Block::Table(matrix(r)));
    b.extend(crate::tools::propagate::environ::blocks(&r.environment));
    let unobserved = r.unobserved_paths();
    if !unobserved.is_empty() {
        let mut title = plain(titles::UNOBSERVED);
        if r.require_observed {
            title.extend([
                Inline::Plain(" (".into()),
                Inline::Code("--require-observed".into()),
                Inline::Plain(": each fails the check)".into()),
            ]);
        }
        b.push(heading(2, title));
        b.push(Block::List(
            unobserved
                .iter()
                .map(|p| vec![Inline::Code(p.to_string())])
                .collect(),
        ));
    }
    Document {
        title: format!("Knob propagation: {}", r.scenario),
        style: STYLE,
        markdown_depth: 0,
        blocks: b,
    }
}

/// Each flagged knob with the whole of its evidence.
fn flagged(r: &PropagationReport, b: &mut Vec<Block>) {
    let flagged: Vec<&KnobResult> = r.knobs.iter().filter(|k| k.flagged).collect();
    if flagged.is_empty() {
        return;
    }
    b.push(Block::Heading {
        level: 2,
        class: flagged
            .iter()
            .any(|k| k.known_gap.is_none())
            .then_some("fail"),
        text: plain(titles::FLAGGED),
    });
    for k in flagged {
        b.push(heading(
            3,
            vec![
                Inline::Code(k.path.clone()),
                Inline::Plain(format!(": {}", k.verdict_text())),
            ],
        ));
        let mut items: Vec<Text> = Vec::new();
        if let Some(g) = &k.known_gap {
            items.push(plain(format!("known gap: {g}")));
        }
        items.extend(k.problems.iter().map(|p| plain(p.clone())));
        items.extend(k.evidence().iter().map(|e| plain(format!("observed: {e}"))));
        if let Some(n) = &k.note {
            items.push(plain(format!("note (manifest): {n}")));
        }
        b.push(Block::List(items));
    }
}

/// Keys of the trainer's resolved backend block that the manifest does not list.
fn unlisted(r: &PropagationReport, b: &mut Vec<Block>) {
    b.push(section(titles::UNLISTED));
    match &r.unlisted.seen_in {
        None => b.push(Block::Paragraph(plain(format!("{UNLISTED_UNSEEN}.")))),
        Some(from) if r.unlisted.knobs.is_empty() => b.push(Block::Paragraph(plain(format!(
            "None: every key of the backend block in {from} is listed."
        )))),
        Some(from) => {
            b.push(Block::Paragraph(plain(format!(
                "Keys of the backend block in {from}:"
            ))));
            b.push(Block::List(
                r.unlisted
                    .knobs
                    .iter()
                    .map(|k| {
                        let mut t = vec![
                            Inline::Code(k.path.clone()),
                            Inline::Plain(format!(" = {}: ", k.value)),
                        ];
                        match &k.known_gap {
                            Some(g) => t.push(Inline::Plain(format!("known gap: {g}"))),
                            None => t.extend([
                                Inline::Strong("FLAGGED".into()),
                                Inline::Plain(": add it to the manifest".into()),
                            ]),
                        }
                        t
                    })
                    .collect(),
            ));
        }
    }
}

/// One row a knob: its verdict, whether it is flagged, the short evidence.
fn matrix(r: &PropagationReport) -> Table {
    Table {
        head: ["knob", "verdict", "flagged", "evidence"]
            .into_iter()
            .map(plain)
            .collect(),
        rows: r
            .knobs
            .iter()
            .map(|k| Row {
                class: Some(match (k.flagged, &k.known_gap) {
                    (false, _) => "ok",
                    (true, Some(_)) => "known",
                    (true, None) => "flagged",
                }),
                anchor: None,
                cells: vec![
                    vec![Inline::Code(k.path.clone())],
                    plain(k.verdict_text()),
                    marked(flag_text(k)),
                    plain(headline(k)),
                ],
            })
            .collect(),
        ..Table::default()
    }
}
