//! The Markdown writer of a [`Document`], as GitHub renders it.

use super::{slug, Block, Column, Document, Figure, Inline, Row, Status, Table, Target, Text};
use crate::model::util::html_escape as esc;

/// The document as Markdown: blocks apart by a blank line.
pub(crate) fn to_markdown(d: &Document) -> String {
    blocks(&d.blocks, d.markdown_depth)
}

fn blocks(bs: &[Block], depth: u8) -> String {
    bs.iter()
        .map(|b| block(b, depth))
        .filter(|b| !b.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where inline text stands: its own block, one line (a heading, a note), or a table cell.
#[derive(Clone, Copy, PartialEq)]
enum At {
    Block,
    Line,
    Cell,
}

fn block(b: &Block, depth: u8) -> String {
    match b {
        Block::Heading { level, text, .. } => format!(
            "{} {}\n",
            "#".repeat(usize::from(level + depth)),
            inline(text, At::Line)
        ),
        Block::Paragraph(text) => format!("{}\n", inline(text, At::Block)),
        Block::Note(text) => format!("> {}\n", inline(text, At::Line)),
        Block::Table(t) => table(t),
        Block::List(items) => items
            .iter()
            .map(|i| format!("- {}\n", inline(i, At::Block)))
            .collect(),
        Block::Image { src, alt } => image(src, alt),
        Block::Figure(Figure { file, .. }) => file
            .as_ref()
            .map(|(src, alt)| image(src, alt))
            .unwrap_or_default(),
        Block::Details {
            summary,
            blocks: inner,
        } => format!(
            "<details><summary>{}</summary>\n\n{}\n</details>\n",
            summary_html(summary),
            blocks(inner, depth)
        ),
        Block::Preformatted(text) => {
            let mut o = format!("```text\n{}", text.replace("```", "'''"));
            if !text.ends_with('\n') {
                o.push('\n');
            }
            o.push_str("```\n");
            o
        }
    }
}

fn image(src: &str, alt: &str) -> String {
    format!("![{}]({src})\n", alt.replace(['[', ']'], ""))
}

fn table(t: &Table) -> String {
    let mut o = row(&t.head);
    let rule: String = (0..t.head.len())
        .map(|i| match t.columns.get(i) {
            Some(Column::Number) => "---:|",
            _ => "---|",
        })
        .collect();
    o.push_str(&format!("|{rule}\n"));
    for Row { cells, .. } in &t.rows {
        o.push_str(&row(cells));
    }
    o
}

/// One table row; an empty cell is a single space between its pipes.
fn row(cells: &[Text]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| match inline(c, At::Cell) {
            s if s.is_empty() => " ".to_string(),
            s => format!(" {s} "),
        })
        .collect();
    format!("|{}|\n", cells.join("|"))
}

/// A status mark as an emoji.
fn emoji(s: Status) -> &'static str {
    match s {
        Status::Pass => "✅",
        Status::Fail => "❌",
        Status::Broken => "💥",
        Status::New => "🆕",
        Status::Warn => "⚠️",
        Status::Unknown => "❓",
        Status::Skip => "⏭️",
    }
}

/// Inline pieces; on one line a line break becomes a space, and in a table cell a pipe is
/// escaped too. A mark is its emoji and a space.
fn inline(text: &Text, at: At) -> String {
    let flat = |s: &str| match at {
        At::Block => s.to_string(),
        At::Line => s.replace('\n', " "),
        At::Cell => s.replace('|', "\\|").replace('\n', " "),
    };
    let out: String = text
        .iter()
        .map(|i| match i {
            Inline::Plain(s) | Inline::Alert(s) => flat(s),
            Inline::Code(s) => format!("`{}`", flat(s).replace('`', "'")),
            Inline::Strong(s) => format!("**{}**", flat(s)),
            Inline::Mark { status, .. } => format!("{} ", emoji(*status)),
            Inline::Link { text, to } => match href(to) {
                Some(h) => format!("[{}]({h})", inline(text, at)),
                None => inline(text, at),
            },
        })
        .collect();
    out.trim_end().to_string()
}

/// A folded section's summary: HTML inside the Markdown (GitHub reads no Markdown marks
/// there), with marks as emoji.
fn summary_html(text: &Text) -> String {
    text.iter()
        .map(|i| match i {
            Inline::Plain(s) | Inline::Alert(s) => esc(s),
            Inline::Code(s) => format!("<code>{}</code>", esc(s)),
            Inline::Strong(s) => format!("<strong>{}</strong>", esc(s)),
            Inline::Mark { status, .. } => format!("{} ", emoji(*status)),
            Inline::Link { text, to } => match href(to) {
                Some(h) => format!("<a href=\"{}\">{}</a>", esc(&h), summary_html(text)),
                None => summary_html(text),
            },
        })
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// Where a link points in Markdown; `None` where Markdown cannot point (a table row).
fn href(to: &Target) -> Option<String> {
    match to {
        Target::File(f) => Some(f.clone()),
        Target::Report(dir) => Some(format!("{dir}/report.md")),
        Target::Heading(title) => Some(format!("#{}", slug(title))),
        Target::Row(_) => None,
    }
}
