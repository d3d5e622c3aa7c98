//! The HTML writer of a [`Document`]: one self-contained page.

use super::{Block, Document, Inline, Row, Table, Target, Text};
use crate::util::html_escape as esc;

/// The document as an HTML page.
pub(crate) fn to_html(d: &Document) -> String {
    let mut o = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>{}</style></head><body>\n",
        esc(&d.title),
        d.style
    );
    for b in &d.blocks {
        o.push_str(&block(b));
    }
    o.push_str("</body></html>\n");
    o
}

fn class_attr(class: Option<&str>) -> String {
    class.map(|c| format!(" class=\"{c}\"")).unwrap_or_default()
}

fn block(b: &Block) -> String {
    match b {
        Block::Heading { level, class, text } => format!(
            "<h{level}{}>{}</h{level}>\n",
            class_attr(*class),
            inline(text)
        ),
        Block::Paragraph(text) => format!("<p>{}</p>\n", inline(text)),
        Block::Table(t) => table(t),
        Block::List(items) => {
            let items: String = items
                .iter()
                .map(|i| format!("<li>{}</li>", inline(i)))
                .collect();
            format!("<ul>{items}</ul>\n")
        }
        Block::Image { src, alt } => format!(
            "<p><img src=\"{}\" alt=\"{}\" style=\"max-width:100%\"></p>\n",
            esc(src),
            esc(alt)
        ),
    }
}

fn table(t: &Table) -> String {
    let head: String = t
        .head
        .iter()
        .map(|c| format!("<th>{}</th>", inline(c)))
        .collect();
    let mut o = format!("<table><tr>{head}</tr>\n");
    for Row { class, cells } in &t.rows {
        let cells: String = cells
            .iter()
            .map(|c| format!("<td>{}</td>", inline(c)))
            .collect();
        o.push_str(&format!("<tr{}>{cells}</tr>\n", class_attr(*class)));
    }
    o.push_str("</table>\n");
    o
}

fn inline(text: &Text) -> String {
    text.iter()
        .map(|i| match i {
            Inline::Plain(s) => esc(s),
            Inline::Code(s) => format!("<code>{}</code>", esc(s)),
            Inline::Strong(s) => format!("<strong>{}</strong>", esc(s)),
            Inline::Link { text, to } => {
                format!("<a href=\"{}\">{}</a>", esc(&href(to)), esc(text))
            }
        })
        .collect()
}

fn href(to: &Target) -> String {
    match to {
        Target::File(f) => f.clone(),
        Target::Report(dir) => format!("{dir}/report.html"),
    }
}
