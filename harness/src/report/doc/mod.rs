//! One document model for every markup (hyperfine's exporter idea): a report is built once as
//! a [`Document`] of headings, paragraphs, tables of inline text, code and links, and images,
//! then written as Markdown ([`to_markdown`]) or HTML ([`to_html`]). A builder says what to
//! show; each writer alone knows its syntax and escaping.

mod html;
mod markdown;

pub(crate) use html::to_html;
pub(crate) use markdown::to_markdown;

/// A whole document: its title (the HTML `<title>`), its style sheet, its blocks.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Document {
    pub(crate) title: String,
    /// CSS for the HTML writer (Markdown has none).
    pub(crate) style: &'static str,
    pub(crate) blocks: Vec<Block>,
}

/// A block of the document, in reading order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Block {
    Heading {
        level: u8,
        /// A status class for the HTML writer (`pass`, `fail`, `warn`).
        class: Option<&'static str>,
        text: Text,
    },
    Paragraph(Text),
    Table(Table),
    /// A bulleted list, one item a [`Text`].
    List(Vec<Text>),
    /// A picture file beside the document (an SVG chart), with the text that stands for it.
    Image {
        src: String,
        alt: String,
    },
}

/// A table: a header row, then rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Table {
    pub(crate) head: Vec<Text>,
    pub(crate) rows: Vec<Row>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Row {
    /// A status class for the HTML writer.
    pub(crate) class: Option<&'static str>,
    pub(crate) cells: Vec<Text>,
}

/// A run of inline pieces.
pub(crate) type Text = Vec<Inline>;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Inline {
    Plain(String),
    Code(String),
    /// Text that stands out (a flag).
    Strong(String),
    Link {
        text: String,
        to: Target,
    },
}

/// Where a link points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// A file, as given.
    File(String),
    /// The report of the run directory given (relative to the document): in the writer's own
    /// markup, `report.md` or `report.html`.
    Report(String),
}

/// Plain text as a one-piece [`Text`].
pub(crate) fn plain(s: impl Into<String>) -> Text {
    vec![Inline::Plain(s.into())]
}

/// Text in Markdown's inline marks, as pieces: `` `code` `` and `**strong**` (unpaired marks
/// stay as they are), for text written once for every markup.
pub(crate) fn marked(s: &str) -> Text {
    /// `s` split at `mark`: the pieces between pairs are `inside`, the rest `outside`; text with
    /// an unpaired mark is all `outside`.
    fn split(
        s: &str,
        mark: &str,
        inside: &dyn Fn(&str, &mut Text),
        outside: &dyn Fn(&str, &mut Text),
        out: &mut Text,
    ) {
        let parts: Vec<&str> = s.split(mark).collect();
        if parts.len() % 2 == 0 {
            return outside(s, out);
        }
        for (i, p) in parts.iter().enumerate() {
            if i % 2 == 1 {
                inside(p, out);
            } else if !p.is_empty() {
                outside(p, out);
            }
        }
    }
    let plain = |p: &str, out: &mut Text| out.push(Inline::Plain(p.to_string()));
    let code = |p: &str, out: &mut Text| out.push(Inline::Code(p.to_string()));
    let strong = |p: &str, out: &mut Text| out.push(Inline::Strong(p.to_string()));
    let outside = |p: &str, out: &mut Text| split(p, "`", &code, &plain, out);
    let mut out = Vec::new();
    split(s, "**", &strong, &outside, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Document {
        Document {
            title: "t <1>".into(),
            style: "p{}",
            blocks: vec![
                Block::Heading {
                    level: 1,
                    class: Some("fail"),
                    text: plain("run: exit 1"),
                },
                Block::Paragraph(plain("a & b")),
                Block::Table(Table {
                    head: vec![plain("name"), plain("report")],
                    rows: vec![Row {
                        class: Some("pass"),
                        cells: vec![
                            vec![
                                Inline::Plain("x|y (".into()),
                                Inline::Code("f.yaml".into()),
                                Inline::Plain(")".into()),
                            ],
                            vec![Inline::Link {
                                text: "report".into(),
                                to: Target::Report("r/1".into()),
                            }],
                        ],
                    }],
                }),
            ],
        }
    }

    #[test]
    fn marks_become_pieces() {
        assert_eq!(
            marked("a `b` **C** d"),
            vec![
                Inline::Plain("a ".into()),
                Inline::Code("b".into()),
                Inline::Plain(" ".into()),
                Inline::Strong("C".into()),
                Inline::Plain(" d".into()),
            ]
        );
        let list = Document {
            blocks: vec![Block::List(vec![marked("x <y>"), marked("**z**")])],
            ..Document::default()
        };
        assert_eq!(to_markdown(&list), "- x <y>\n- **z**\n");
        assert!(
            to_html(&list).contains("<ul><li>x &lt;y&gt;</li><li><strong>z</strong></li></ul>\n")
        );
    }

    #[test]
    fn one_document_is_written_as_markdown_and_as_html() {
        assert_eq!(
            to_markdown(&doc()),
            "# run: exit 1\n\na & b\n\n| name | report |\n|---|---|\n\
             | x\\|y (`f.yaml`) | [report](r/1/report.md) |\n"
        );
        assert_eq!(
            to_html(&doc()),
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>t &lt;1&gt;\
             </title><style>p{}</style></head><body>\n<h1 class=\"fail\">run: exit 1</h1>\n\
             <p>a &amp; b</p>\n<table><tr><th>name</th><th>report</th></tr>\n<tr class=\"pass\">\
             <td>x|y (<code>f.yaml</code>)</td><td><a href=\"r/1/report.html\">report</a></td>\
             </tr>\n</table>\n</body></html>\n"
        );
    }
}
