//! The Markdown writer of a [`Document`].

use super::{Block, Document, Inline, Row, Table, Target, Text};

/// The document as Markdown: blocks apart by a blank line.
pub(crate) fn to_markdown(d: &Document) -> String {
    d.blocks.iter().map(block).collect::<Vec<_>>().join("\n")
}

fn block(b: &Block) -> String {
    match b {
        Block::Heading { level, text, .. } => {
            format!(
                "{} {}\n",
                "#".repeat(usize::from(*level)),
                inline(text, false)
            )
        }
        Block::Paragraph(text) => format!("{}\n", inline(text, false)),
        Block::Table(t) => table(t),
        Block::List(items) => items
            .iter()
            .map(|i| format!("- {}\n", inline(i, false)))
            .collect(),
        Block::Image { src, alt } => format!("![{}]({src})\n", alt.replace(['[', ']'], "")),
    }
}

fn table(t: &Table) -> String {
    let mut o = row(&t.head);
    o.push_str(&format!("|{}\n", "---|".repeat(t.head.len())));
    for Row { cells, .. } in &t.rows {
        o.push_str(&row(cells));
    }
    o
}

/// One table row; an empty cell is a single space between its pipes.
fn row(cells: &[Text]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| match inline(c, true) {
            s if s.is_empty() => " ".to_string(),
            s => format!(" {s} "),
        })
        .collect();
    format!("|{}|\n", cells.join("|"))
}

/// Inline pieces; inside a table cell a pipe is escaped and a line break becomes a space.
fn inline(text: &Text, in_cell: bool) -> String {
    let cell = |s: &str| {
        if in_cell {
            s.replace('|', "\\|").replace('\n', " ")
        } else {
            s.to_string()
        }
    };
    text.iter()
        .map(|i| match i {
            Inline::Plain(s) => cell(s),
            Inline::Code(s) => format!("`{}`", cell(s)),
            Inline::Strong(s) => format!("**{}**", cell(s)),
            Inline::Link { text, to } => format!("[{}]({})", cell(text), href(to)),
        })
        .collect()
}

fn href(to: &Target) -> String {
    match to {
        Target::File(f) => f.clone(),
        Target::Report(dir) => format!("{dir}/report.md"),
    }
}
