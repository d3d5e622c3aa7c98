//! One document model for every markup (hyperfine's exporter idea): a report is built once as
//! a [`Document`] of headings, paragraphs, notes, tables of inline text (code, links, status
//! marks), lists, pictures, folded sections and preformatted text, then written as Markdown
//! ([`to_markdown`]) or HTML ([`to_html`]). A builder says what to show; each writer alone
//! knows its syntax and escaping, and what it does with what its markup cannot show (a
//! figure drawn inline in HTML is a picture link in Markdown, or left out).

mod html;
mod markdown;

pub(crate) use html::to_html;
pub(crate) use markdown::to_markdown;

/// A whole document: its title (the HTML `<title>`), its style sheet, its blocks.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Document {
    pub(crate) title: String,
    /// CSS for the HTML writer (Markdown has none). The HTML writer sets the classes `note` (a
    /// [`Block::Note`]), `mark` (a [`Inline::Mark`]), `n`, `nw` and `ev` (a [`Column`]'s
    /// cells, and `nw` around a number that must not break), and a block's own class.
    pub(crate) style: &'static str,
    /// How many levels lower every heading sits in Markdown (1: a document CI appends under a
    /// heading of its own, as a step summary); HTML pages start at `<h1>`.
    pub(crate) markdown_depth: u8,
    pub(crate) blocks: Vec<Block>,
}

/// A block of the document, in reading order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Block {
    /// A heading; one below the top level is a link target ([`Target::Heading`]).
    Heading {
        level: u8,
        /// A status class for the HTML writer (`pass`, `fail`, `warn`).
        class: Option<&'static str>,
        text: Text,
    },
    Paragraph(Text),
    /// A paragraph set apart: something the reader must not miss.
    Note(Text),
    Table(Table),
    /// A bulleted list, one item a [`Text`].
    List(Vec<Text>),
    /// A picture file beside the document (an SVG chart), with the text that stands for it.
    Image {
        src: String,
        alt: String,
    },
    Figure(Figure),
    /// A folded section: its one-line summary, and what unfolds.
    Details {
        summary: Text,
        blocks: Vec<Block>,
    },
    /// Text as it is, lines and all (a program's output).
    Preformatted(String),
}

/// A chart drawn in the page where the markup can (HTML), with its caption.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Figure {
    /// The chart as an SVG element, written into the page as it is.
    pub(crate) svg: String,
    pub(crate) caption: Text,
    /// What the figure shows, for machines reading the page (HTML `data-*` attributes).
    pub(crate) data: Vec<(&'static str, String)>,
    /// The same chart as a file beside the document (`src`) and the text that stands for it
    /// (`alt`): where the markup cannot draw inline (Markdown), a picture of the file; `None`,
    /// the figure is left out there.
    pub(crate) file: Option<(String, String)>,
}

/// A table: a header row, then rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Table {
    pub(crate) head: Vec<Text>,
    /// How each column's cells are set, by position (a column past the list is [`Column::Text`]).
    pub(crate) columns: Vec<Column>,
    /// The first cell of each row names the row (a key-value table; HTML `<th>`).
    pub(crate) row_heads: bool,
    pub(crate) rows: Vec<Row>,
}

/// How a column's cells are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Column {
    #[default]
    Text,
    /// Numbers: aligned right, never broken over lines.
    Number,
    /// Short values never broken over lines (a band, a step, a status).
    NoWrap,
    /// Long prose that may take the table's room (evidence).
    Wide,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Row {
    /// A status class for the HTML writer.
    pub(crate) class: Option<&'static str>,
    /// The row's name as a link target ([`Target::Row`]).
    pub(crate) anchor: Option<String>,
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
    /// Text in the failing colour, where the markup has colours (HTML); plain elsewhere.
    Alert(String),
    /// A status mark (an emoji in Markdown, a drawn mark in HTML, which needs no emoji font),
    /// named `label` for screen readers.
    Mark {
        status: Status,
        label: String,
    },
    Link {
        text: Text,
        to: Target,
    },
}

/// What a status mark shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Pass,
    Fail,
    /// A run that broke (crashed, timed out): a failure of its own kind.
    Broken,
    /// Nothing to compare with yet (no golden).
    New,
    Warn,
    Unknown,
    Skip,
}

/// Where a link points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// A file, as given.
    File(String),
    /// The report of the run directory given (relative to the document): in the writer's own
    /// markup, `report.md` or `report.html`.
    Report(String),
    /// The heading of this document with this text (below the top level).
    Heading(String),
    /// The table row of this document with this anchor; where the markup cannot name rows
    /// (Markdown), the link's text stands alone.
    Row(String),
}

/// A heading's link target as GitHub makes it from its text: lower case, letters, digits, `-`
/// and `_` kept, each space a `-`, anything else dropped.
pub(crate) fn slug(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// The text of inline pieces, without their marks (a mark is its label).
pub(crate) fn text_of(text: &Text) -> String {
    text.iter()
        .map(|i| match i {
            Inline::Plain(s) | Inline::Code(s) | Inline::Strong(s) | Inline::Alert(s) => s.clone(),
            Inline::Mark { label, .. } => label.clone(),
            Inline::Link { text, .. } => text_of(text),
        })
        .collect()
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
            markdown_depth: 0,
            blocks: vec![
                Block::Heading {
                    level: 1,
                    class: Some("fail"),
                    text: plain("run: exit 1"),
                },
                Block::Paragraph(plain("a & b")),
                Block::Table(Table {
                    head: vec![plain("name"), plain("report")],
                    columns: Vec::new(),
                    row_heads: false,
                    rows: vec![Row {
                        class: Some("pass"),
                        anchor: None,
                        cells: vec![
                            vec![
                                Inline::Plain("x|y (".into()),
                                Inline::Code("f.yaml".into()),
                                Inline::Plain(")".into()),
                            ],
                            vec![Inline::Link {
                                text: plain("report"),
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

    /// The blocks HTML draws and Markdown cannot: each written in its own way, nothing lost.
    #[test]
    fn figures_folds_marks_and_links_in_each_markup() {
        let mark = |status| Inline::Mark {
            status,
            label: "regressed".into(),
        };
        let d = Document {
            markdown_depth: 1,
            blocks: vec![
                Block::Heading {
                    level: 2,
                    class: None,
                    text: plain("How it judges"),
                },
                Block::Note(vec![
                    Inline::Strong("Note:".into()),
                    Inline::Plain(" a\nb".into()),
                ]),
                Block::Table(Table {
                    head: vec![plain("rule"), plain("value")],
                    columns: vec![Column::Text, Column::Number],
                    row_heads: false,
                    rows: vec![Row {
                        anchor: Some("rule-1".into()),
                        cells: vec![
                            vec![mark(Status::Fail), Inline::Code("a/b".into())],
                            plain("2.000e-6"),
                        ],
                        ..Row::default()
                    }],
                }),
                Block::Paragraph(vec![
                    Inline::Link {
                        text: vec![Inline::Code("a/b".into())],
                        to: Target::Row("rule-1".into()),
                    },
                    Inline::Plain(" (".into()),
                    Inline::Link {
                        text: plain("how"),
                        to: Target::Heading("How it judges".into()),
                    },
                    Inline::Plain(")".into()),
                ]),
                Block::Figure(Figure {
                    svg: "<svg>x</svg>\n".into(),
                    caption: plain("inline only"),
                    data: vec![("metric", "a/b".into())],
                    file: None,
                }),
                Block::Figure(Figure {
                    svg: "<svg>y</svg>".into(),
                    caption: plain("also a file"),
                    data: Vec::new(),
                    file: Some(("plots/y.svg".into(), "y [run]".into())),
                }),
                Block::Details {
                    summary: vec![mark(Status::Broken), Inline::Code("x<y".into())],
                    blocks: vec![Block::Preformatted("out ``` put".into())],
                },
            ],
            ..Document::default()
        };
        assert_eq!(
            to_markdown(&d),
            "### How it judges\n\n> **Note:** a b\n\n| rule | value |\n|---|---:|\n\
             | ❌ `a/b` | 2.000e-6 |\n\n`a/b` ([how](#how-it-judges))\n\n\
             ![y run](plots/y.svg)\n\n<details><summary>💥 <code>x&lt;y</code></summary>\n\n\
             ```text\nout \'\'\' put\n```\n\n</details>\n"
        );
        let html = to_html(&d);
        for part in [
            "<h2 id=\"how-it-judges\">How it judges</h2>",
            "<p class=\"note\"><strong>Note:</strong> a\nb</p>",
            "<tr id=\"rule-1\"><td><svg class=\"mark\"",
            "aria-label=\"regressed\">",
            "<code>a/<wbr>b</code></td><td class=\"n\"><span class=\"nw\">2.000e-6</span></td>",
            "<a href=\"#rule-1\"><code>a/<wbr>b</code></a> (<a href=\"#how-it-judges\">how</a>)",
            "<figure data-metric=\"a/b\"><figcaption>inline only</figcaption>\n<svg>x</svg>\n</figure>",
            "<figcaption>also a file</figcaption>\n<svg>y</svg>",
            "<pre>out ``` put</pre>",
        ] {
            assert!(html.contains(part), "{part} not in {html}");
        }
        assert!(!html.contains("💥") && !html.contains("❌"), "{html}");
    }
}
