//! The HTML writer of a [`Document`]: one self-contained page (inline CSS and SVG, no script,
//! nothing fetched).
//!
//! Read in any browser as it comes: a status mark is drawn inline (no emoji font needed), a
//! number in scientific notation never breaks over lines, and a long name (a metric, a path)
//! may break after each `/` rather than widen a table past the page.

use std::collections::BTreeSet;

use super::{slug, Block, Column, Document, Figure, Inline, Row, Status, Table, Target, Text};
use crate::model::util::html_escape as esc;

/// The document as an HTML page.
pub(crate) fn to_html(d: &Document) -> String {
    let mut o = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>{}</style></head><body>\n",
        esc(&d.title),
        d.style
    );
    let mut ids = BTreeSet::new();
    for b in &d.blocks {
        o.push_str(&block(b, &mut ids));
    }
    o.push_str("</body></html>\n");
    o
}

fn class_attr(class: Option<&str>) -> String {
    class.map(|c| format!(" class=\"{c}\"")).unwrap_or_default()
}

/// A heading's id: its slug, numbered as GitHub numbers a repeated one (`-1`, `-2`).
fn heading_id(text: &Text, ids: &mut BTreeSet<String>) -> String {
    let base = slug(&super::text_of(text));
    let mut id = base.clone();
    let mut n = 0;
    while !ids.insert(id.clone()) {
        n += 1;
        id = format!("{base}-{n}");
    }
    id
}

fn block(b: &Block, ids: &mut BTreeSet<String>) -> String {
    match b {
        // The top heading is no link target: it has no id.
        Block::Heading { level, class, text } => {
            let id = match *level {
                1 => String::new(),
                _ => format!(" id=\"{}\"", esc(&heading_id(text, ids))),
            };
            format!(
                "<h{level}{}{id}>{}</h{level}>\n",
                class_attr(*class),
                inline(text, false)
            )
        }
        Block::Paragraph(text) => format!("<p>{}</p>\n", inline(text, true)),
        Block::Note(text) => format!("<p class=\"note\">{}</p>\n", inline(text, true)),
        Block::Table(t) => table(t),
        Block::List(items) => {
            let items: String = items
                .iter()
                .map(|i| format!("<li>{}</li>", inline(i, true)))
                .collect();
            format!("<ul>{items}</ul>\n")
        }
        Block::Image { src, alt } => format!(
            "<p><img src=\"{}\" alt=\"{}\" style=\"max-width:100%\"></p>\n",
            esc(src),
            esc(alt)
        ),
        Block::Figure(f) => figure(f),
        Block::Details { summary, blocks } => {
            let inner: String = blocks.iter().map(|b| block(b, ids)).collect();
            format!(
                "<details><summary>{}</summary>\n{inner}</details>\n",
                inline(summary, true)
            )
        }
        Block::Preformatted(text) => format!("<pre>{}</pre>\n", esc(text)),
    }
}

/// A figure: its caption, then the chart inline (our charts are prolog-free `<svg>` elements,
/// safe to write as they are).
fn figure(f: &Figure) -> String {
    let data: String = f
        .data
        .iter()
        .map(|(k, v)| format!(" data-{k}=\"{}\"", esc(v)))
        .collect();
    format!(
        "<figure{data}><figcaption>{}</figcaption>\n{}\n</figure>\n",
        inline(&f.caption, true),
        f.svg.trim()
    )
}

fn table(t: &Table) -> String {
    let mut o = String::from("<table>");
    if t.head.iter().any(|c| !c.is_empty()) {
        let head: String = t
            .head
            .iter()
            .map(|c| format!("<th>{}</th>", inline(c, true)))
            .collect();
        o.push_str(&format!("<tr>{head}</tr>"));
    }
    o.push('\n');
    for Row {
        class,
        anchor,
        cells,
    } in &t.rows
    {
        let cells: String = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if t.row_heads && i == 0 {
                    return format!("<th>{}</th>", inline(c, true));
                }
                let class = match t.columns.get(i) {
                    Some(Column::Number) => Some("n"),
                    Some(Column::NoWrap) => Some("nw"),
                    Some(Column::Wide) => Some("ev"),
                    Some(Column::Text) | None => None,
                };
                format!("<td{}>{}</td>", class_attr(class), inline(c, true))
            })
            .collect();
        let id = anchor
            .as_ref()
            .map(|a| format!(" id=\"{}\"", esc(a)))
            .unwrap_or_default();
        o.push_str(&format!("<tr{}{id}>{cells}</tr>\n", class_attr(*class)));
    }
    o.push_str("</table>\n");
    o
}

/// Inline pieces; `breakable`: a long name may break after each `/` (not in a heading).
fn inline(text: &Text, breakable: bool) -> String {
    let text_html = |s: &str| {
        if breakable {
            esc_numbers(s)
        } else {
            esc(s)
        }
    };
    text.iter()
        .map(|i| match i {
            Inline::Plain(s) => text_html(s),
            Inline::Code(s) if breakable => {
                format!("<code>{}</code>", break_after_kind(&text_html(s)))
            }
            Inline::Code(s) => format!("<code>{}</code>", text_html(s)),
            Inline::Strong(s) => format!("<strong>{}</strong>", text_html(s)),
            Inline::Alert(s) => format!("<b class=\"fail\">{}</b>", text_html(s)),
            Inline::Mark { status, label } => mark(*status, label),
            Inline::Link { text, to } => {
                format!(
                    "<a href=\"{}\">{}</a>",
                    esc(&href(to)),
                    inline(text, breakable)
                )
            }
        })
        .collect()
}

fn href(to: &Target) -> String {
    match to {
        Target::File(f) => f.clone(),
        Target::Report(dir) => format!("{dir}/report.html"),
        Target::Heading(title) => format!("#{}", slug(title)),
        Target::Row(anchor) => format!("#{anchor}"),
    }
}

/// A status mark as inline SVG (a coloured disc with a white glyph), labelled for screen
/// readers: no emoji font needed.
fn mark(s: Status, label: &str) -> String {
    const GREEN: &str = "#1a7f37";
    const RED: &str = "#cf222e";
    const AMBER: &str = "#9a6700";
    const GREY: &str = "#6e7781";
    let (fill, glyph) = match s {
        Status::Pass => (GREEN, "<path d=\"M4.5 8.3l2.4 2.4 4.6-4.9\"/>"),
        Status::Fail | Status::Broken => (RED, "<path d=\"M5.2 5.2l5.6 5.6M10.8 5.2l-5.6 5.6\"/>"),
        Status::Warn | Status::New => (AMBER, "<path d=\"M8 4v5M8 11.2v.6\"/>"),
        Status::Unknown => (
            GREY,
            "<path d=\"M6 6.2a2 2 0 1 1 2.8 1.8c-.6.3-.8.7-.8 1.4M8 11.2v.6\"/>",
        ),
        Status::Skip => (GREY, "<path d=\"M5 5l3 3-3 3M8.5 5l3 3-3 3\"/>"),
    };
    format!(
        "<svg class=\"mark\" width=\"1em\" height=\"1em\" viewBox=\"0 0 16 16\" role=\"img\" \
         aria-label=\"{}\"><circle cx=\"8\" cy=\"8\" r=\"8\" fill=\"{fill}\"/><g fill=\"none\" \
         stroke=\"#fff\" stroke-width=\"2\" stroke-linecap=\"round\">{glyph}</g></svg>",
        esc(label)
    )
}

/// Escaped code with a line break allowed after each `:` that a word follows (a rule's kind,
/// `golden:`; a device, `cuda:`), as after each `/`.
fn break_after_kind(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == ':'
            && chars
                .peek()
                .is_some_and(|n| !n.is_whitespace() && *n != '/')
        {
            out.push_str("<wbr>");
        }
    }
    out
}

/// `text` escaped, with a line break allowed after each `/` (metric names and paths are long
/// words that would widen a table past the page).
fn esc_breakable(text: &str) -> String {
    esc(text).replace('/', "/<wbr>")
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

    #[test]
    fn code_breaks_after_its_kind_and_each_slash() {
        assert_eq!(
            break_after_kind(&esc_numbers("golden:a/b c: d http://x")),
            "golden:<wbr>a/<wbr>b c: d http:/<wbr>/<wbr>x"
        );
    }
}
