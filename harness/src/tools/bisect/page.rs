//! A bisect's report: `bisect.json` (the [`BisectReport`] as data) and `bisect.md` (the same,
//! for reading), both in the bisect's folder.

use std::path::{Path, PathBuf};

use super::{BisectError, BisectReport, Verdict};
use crate::judge::expr::fmt_num;
use crate::report::doc::{self, plain, Block, Document, Inline, Row, Table};
use rlharness_arctic::fsx;

/// Write `bisect.json` and `bisect.md` into `dir`; their paths.
pub(crate) fn write(dir: &Path, r: &BisectReport) -> Result<Vec<PathBuf>, BisectError> {
    fsx::create_dir_all(dir)?;
    let mut json = serde_json::to_string_pretty(r)
        .map_err(|e| BisectError::Git(format!("bisect.json: {e}")))?;
    json.push('\n');
    let md = doc::to_markdown(&document(r));
    let mut written = Vec::new();
    for (name, text) in [("bisect.json", json), ("bisect.md", md)] {
        let path = dir.join(name);
        fsx::write_atomic(&path, text.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

fn code(s: impl Into<String>) -> Inline {
    Inline::Code(s.into())
}

fn document(r: &BisectReport) -> Document {
    let mut blocks = vec![Block::Heading {
        level: 1,
        class: Some(if r.first_bad.is_some() {
            "fail"
        } else {
            "warn"
        }),
        text: plain(format!("bisect {}: {}", r.scenario, r.headline())),
    }];
    blocks.push(Block::Paragraph(vec![
        Inline::Plain("Repository ".into()),
        code(&r.repo),
        Inline::Plain(" (its commits reach the scenario through ".into()),
        code(&r.source_var),
        Inline::Plain(format!(
            "), good {} \"{}\", bad {} \"{}\": {} commits after the good one; mode: {}.",
            r.good.short(),
            r.good.subject,
            r.bad.short(),
            r.bad.subject,
            r.range,
            r.mode
        )),
    ]));
    if let Some(t) = &r.test {
        blocks.push(Block::Paragraph(plain(format!(
            "Each commit is judged by Wald's sequential probability ratio test on `{}` ({} of \
             steps {}-{}), one value per seed: good when its mean is the calibrated {} (σ {}), \
             bad when it is {} (an effect of {}, {}). Error rates: α = {} (a good commit called \
             bad), β = {} (a bad one called good); seeds are added until a bound is crossed, at \
             most {}, else the commit is skipped as unclear. Calibration: {}.",
            t.metric,
            if t.median { "median" } else { "mean" },
            t.window.0,
            t.window.1,
            fmt_num(t.good_mean),
            fmt_num(t.sigma),
            fmt_num(t.bad_mean),
            fmt_num(t.effect),
            t.effect_from,
            fmt_num(t.alpha),
            fmt_num(t.beta),
            t.max_seeds,
            t.calibration
        ))));
    }
    blocks.push(Block::Paragraph(plain(r.tally())));
    let rows = r
        .tested
        .iter()
        .map(|t| Row {
            class: Some(match t.verdict {
                Verdict::Good => "pass",
                Verdict::Bad => "fail",
                Verdict::Skip => "warn",
            }),
            anchor: None,
            cells: vec![
                vec![code(t.commit.short())],
                plain(&t.commit.subject),
                plain(t.verdict.word()),
                plain(t.runs().to_string()),
                plain(t.cached_runs.to_string()),
                plain(&t.evidence),
            ],
        })
        .collect();
    blocks.push(Block::Heading {
        level: 2,
        class: None,
        text: plain("Commits tested, in order"),
    });
    blocks.push(Block::Table(Table {
        head: [
            "commit",
            "subject",
            "verdict",
            "runs",
            "from cache",
            "evidence",
        ]
        .into_iter()
        .map(plain)
        .collect(),
        rows,
        ..Table::default()
    }));
    if let Some(p) = &r.problem {
        blocks.push(Block::Paragraph(plain(format!("No answer: {p}."))));
    }
    blocks.push(Block::Paragraph(vec![
        Inline::Plain("Cache: ".into()),
        code(&r.cache),
        Inline::Plain(" (a rerun reuses it).".into()),
    ]));
    Document {
        title: format!("bisect {}", r.scenario),
        style: "",
        markdown_depth: 0,
        blocks,
    }
}
