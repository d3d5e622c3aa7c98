//! The combined verdict of one `rlharness run` over many scenarios: `OUT/index.md`,
//! `OUT/index.html` and `OUT/junit.xml`, one row (one JUnit test case) per scenario and one more
//! per seed of a multi-seed run. Built from what each run directory stores (`verdict.json`), so
//! a run directory collected from a Ray job is summarized exactly like a local one.

use std::path::{Path, PathBuf};

pub(crate) use crate::app::errors::IndexError;
use crate::model::error::ExitStatus;
use crate::report::doc::{
    plain, to_html, to_markdown, Block, Document, Inline, Row, Table, Target,
};
use crate::report::junit::{self, Case, CaseStatus, Junit, Problem, Suite};
use rlharness_arctic::fsx;

/// One scenario of the invocation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// The scenario file as given on the command line.
    pub(crate) file: String,
    /// The scenario's name (the file's stem when it could not be loaded).
    pub(crate) scenario: String,
    pub(crate) status: ExitStatus,
    /// The one-line summary (`passed`, `run failed: ...`).
    pub(crate) summary: String,
    /// Its run directory, when it has one.
    pub(crate) run_dir: Option<PathBuf>,
    /// Where it ran: `local`, `local (CUDA_VISIBLE_DEVICES=1)`, `ray job raysubmit_...`.
    pub(crate) placement: String,
    /// Wall-clock seconds from start (or submission) to its end.
    pub(crate) seconds: f64,
    /// A multi-seed run's seeds, read from `seed-<S>/verdict.json`.
    pub(crate) seeds: Vec<SeedEntry>,
    /// Skipped here (its requirements are not met).
    pub(crate) skipped: bool,
    /// The rules that did not pass: each rule's name and its plain line (rule, value,
    /// reference, band, step).
    pub(crate) failing: Vec<(String, String)>,
    /// It failed as its scenario declares (`expected_verdict`): a pass whose failing rules are
    /// what was caught.
    pub(crate) expected_failure: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeedEntry {
    pub(crate) seed: u64,
    pub(crate) status: ExitStatus,
    pub(crate) summary: String,
}

/// The part of `verdict.json` the index reads.
#[derive(Debug, serde::Deserialize)]
struct VerdictHead {
    scenario: String,
    exit_code: i32,
    summary: String,
}

/// Why a run directory's `verdict.json` does not say how the run ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerdictFileError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a verdict: {source}", path.display())]
    NotAVerdict {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: key `exit_code`: {code} is not an rlharness exit code", path.display())]
    ExitCode { path: PathBuf, code: i32 },
}

/// The scenario name, exit status and summary a run directory's `verdict.json` records.
pub(crate) fn read_verdict(dir: &Path) -> Result<(String, ExitStatus, String), VerdictFileError> {
    let path = dir.join("verdict.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(source) => return Err(VerdictFileError::Read { path, source }),
    };
    let head: VerdictHead = match serde_json::from_str(&text) {
        Ok(h) => h,
        Err(source) => return Err(VerdictFileError::NotAVerdict { path, source }),
    };
    let Some(status) = ExitStatus::from_code(head.exit_code) else {
        let code = head.exit_code;
        return Err(VerdictFileError::ExitCode { path, code });
    };
    Ok((head.scenario, status, head.summary))
}

/// The seeds of a multi-seed run directory (`seed-<S>/verdict.json`), in seed order; empty for
/// a single run.
pub(crate) fn read_seeds(dir: &Path) -> Vec<SeedEntry> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<SeedEntry> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let seed: u64 = name.strip_prefix("seed-")?.parse().ok()?;
            Some(match read_verdict(&e.path()) {
                Ok((_, status, summary)) => SeedEntry {
                    seed,
                    status,
                    summary,
                },
                Err(why) => SeedEntry {
                    seed,
                    status: ExitStatus::RunFailed,
                    summary: why.to_string(),
                },
            })
        })
        .collect();
    out.sort_by_key(|s| s.seed);
    out
}

/// The worst status of the entries (an empty invocation passes).
pub(crate) fn worst(entries: &[Entry]) -> ExitStatus {
    entries
        .iter()
        .fold(ExitStatus::Passed, |w, e| w.worst(e.status))
}

fn rel(out: &Path, dir: &Path) -> String {
    dir.strip_prefix(out).unwrap_or(dir).display().to_string()
}

fn counts(entries: &[Entry]) -> String {
    // A skipped scenario is counted apart, whatever status `--fail-on-skip` gave it.
    let n = |s: ExitStatus| {
        entries
            .iter()
            .filter(|e| e.status == s && !e.skipped)
            .count()
    };
    let skipped = entries.iter().filter(|e| e.skipped).count();
    format!(
        "{} scenario(s): {} passed, {}{} failed a check, {} run failed, {} invalid, {} without a \
         golden",
        entries.len(),
        n(ExitStatus::Passed),
        if skipped > 0 {
            format!("{skipped} skipped, ")
        } else {
            String::new()
        },
        n(ExitStatus::CheckFailed),
        n(ExitStatus::RunFailed),
        n(ExitStatus::InvalidInput),
        n(ExitStatus::NoGolden)
    )
}

/// The last line of `rlharness run`, as `cargo test` ends with its result line: the counts
/// (expected failures and skips among them named), the exit status and where the index is.
pub(crate) fn tally(out: &Path, entries: &[Entry]) -> String {
    let count = |f: &dyn Fn(&Entry) -> bool| entries.iter().filter(|e| f(e)).count();
    let mut extra = Vec::new();
    let expected = count(&|e| e.expected_failure);
    if expected > 0 {
        extra.push(format!("{expected} as an expected failure"));
    }
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(" ({})", extra.join(", "))
    };
    let w = worst(entries);
    format!(
        "combined: {}{extra}; exit {} ({}); {}",
        counts(entries),
        w.code(),
        w.word(),
        out.join("index.md").display()
    )
}

/// The index page's style sheet.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}\
     table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25rem .5rem;\
     text-align:left;vertical-align:top}th{background:#f5f5f5}.pass{color:#1a7f37}\
     .fail{color:#cf222e}.warn{color:#9a6700}.skip{color:#6e7781}";

/// The status class of an entry: a skip is its own, whatever its status.
fn entry_class(e: &Entry) -> &'static str {
    if e.skipped {
        "skip"
    } else {
        class(e.status)
    }
}

/// The status class of an exit status (the HTML writer colours by it).
fn class(s: ExitStatus) -> &'static str {
    match s {
        ExitStatus::Passed => "pass",
        ExitStatus::NoGolden => "warn",
        _ => "fail",
    }
}

/// The combined index of one invocation as a document: the worst exit, the counts, then a row
/// per scenario (and per seed of a multi-seed run) linking its report.
pub(crate) fn index_document(out: &Path, entries: &[Entry]) -> Document {
    let w = worst(entries);
    let head = ["scenario", "exit", "verdict", "where", "seconds", "report"];
    let mut rows = Vec::new();
    for e in entries {
        let report = match report_target(out, e) {
            Some((d, ReportKind::JobLog)) => vec![Inline::Link {
                text: plain("job log"),
                to: Target::File(format!("{d}/job.log")),
            }],
            Some((d, ReportKind::Report)) => vec![Inline::Link {
                text: plain("report"),
                to: Target::Report(d),
            }],
            None => plain("-"),
        };
        rows.push(Row {
            class: Some(entry_class(e)),
            anchor: None,
            cells: vec![
                vec![
                    Inline::Plain(format!("{} (", e.scenario)),
                    Inline::Code(e.file.clone()),
                    Inline::Plain(")".into()),
                ],
                plain(e.status.code().to_string()),
                plain(&e.summary),
                plain(&e.placement),
                plain(format!("{:.1}", e.seconds)),
                report,
            ],
        });
        for s in &e.seeds {
            rows.push(Row {
                class: Some(class(s.status)),
                anchor: None,
                cells: vec![
                    plain(format!("{} seed {}", e.scenario, s.seed)),
                    plain(s.status.code().to_string()),
                    plain(&s.summary),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                ],
            });
        }
    }
    Document {
        title: format!("rlharness run: exit {}", w.code()),
        style: STYLE,
        markdown_depth: 0,
        blocks: vec![
            Block::Heading {
                level: 1,
                class: Some(class(w)),
                text: plain(format!("rlharness run: exit {} ({})", w.code(), w.word())),
            },
            Block::Paragraph(plain(counts(entries))),
            Block::Table(Table {
                head: head.iter().map(|h| plain(*h)).collect(),
                rows,
                ..Table::default()
            }),
        ],
    }
}

/// What an index row links to: the run's reports, or only its job log (a Ray job that never
/// wrote a report).
enum ReportKind {
    Report,
    JobLog,
}

/// The run directory of a row, relative to OUT, and what in it the row links to.
fn report_target(out: &Path, e: &Entry) -> Option<(String, ReportKind)> {
    e.run_dir.as_ref().map(|d| {
        let kind = if !d.join("report.md").exists() && d.join("job.log").exists() {
            ReportKind::JobLog
        } else {
            ReportKind::Report
        };
        (rel(out, d), kind)
    })
}

fn case_status(status: ExitStatus, summary: &str, skipped: bool) -> CaseStatus {
    let problem = || Problem {
        message: format!("exit {}: {summary}", status.code()),
        kind: None,
        text: Some(summary.to_string()),
    };
    match status {
        ExitStatus::Passed if skipped => CaseStatus::Skip {
            message: Some(summary.to_string()),
        },
        ExitStatus::Passed => CaseStatus::Pass,
        ExitStatus::CheckFailed | ExitStatus::NoGolden => CaseStatus::Fail(problem()),
        ExitStatus::InvalidInput | ExitStatus::RunFailed => CaseStatus::Error(problem()),
    }
}

/// One JUnit document: a test case per scenario (classname: its file), and one per seed of a
/// multi-seed run (`<scenario> seed <S>`).
pub(crate) fn render_junit(entries: &[Entry]) -> String {
    let mut cases = Vec::new();
    for e in entries {
        let mut c = Case::new(
            e.scenario.as_str(),
            e.file.as_str(),
            case_status(e.status, &e.summary, e.skipped),
        );
        c.time = Some(std::time::Duration::from_secs_f64(e.seconds.max(0.0)));
        let mut out = format!("where: {}\n", e.placement);
        if let Some(d) = &e.run_dir {
            out.push_str(&format!("run directory: {}\n", d.display()));
        }
        c.out = Some(out);
        cases.push(c);
        for s in &e.seeds {
            cases.push(Case::new(
                format!("{} seed {}", e.scenario, s.seed),
                e.file.as_str(),
                case_status(s.status, &s.summary, false),
            ));
        }
    }
    junit::to_xml(&Junit {
        name: "rlharness".into(),
        time: None,
        suites: vec![Suite {
            name: "rlharness run".into(),
            cases,
        }],
    })
}

/// Write `OUT/index.md`, `OUT/index.html` and `OUT/junit.xml`.
/// The combined verdict as one document for scripts (`OUT/index.json`, `run --format json`;
/// `run --rerun-failed` reads it back).
pub(crate) fn json_document(out: &Path, entries: &[Entry]) -> serde_json::Value {
    use serde_json::json;
    let w = worst(entries);
    let scenarios: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            json!({
                "scenario": e.scenario,
                "file": e.file,
                "exit_code": e.status.code(),
                "summary": e.summary,
                "run_dir": e.run_dir.as_ref().map(|d| d.display().to_string()),
                "placement": e.placement,
                "seconds": e.seconds,
                "skipped": e.skipped,
                "expected_failure": e.expected_failure,
                "failing": e.failing.iter().map(|(rule, _)| rule).collect::<Vec<_>>(),
                "seeds": e.seeds.iter().map(|s| json!({
                    "seed": s.seed,
                    "exit_code": s.status.code(),
                    "summary": s.summary,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "schema": JSON_SCHEMA,
        "exit_code": w.code(),
        "verdict": w.word(),
        "index": out.join("index.md").display().to_string(),
        "scenarios": scenarios,
    })
}

/// The version of `index.json` (bumped when a key changes meaning or goes away).
pub(crate) const JSON_SCHEMA: u32 = 1;

/// The scenario files of `OUT/index.json` (the last `run` into OUT) that did not pass:
/// `run --rerun-failed`.
pub(crate) fn failed_files(out: &Path) -> Result<Vec<PathBuf>, IndexError> {
    let path = out.join("index.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(source) => return Err(IndexError::Read { path, source }),
    };
    let doc: serde_json::Value = match serde_json::from_str(&text) {
        Ok(d) => d,
        Err(source) => return Err(IndexError::NotAnIndex { path, source }),
    };
    let Some(scenarios) = doc["scenarios"].as_array() else {
        return Err(IndexError::NoScenarios { path });
    };
    Ok(scenarios
        .iter()
        .filter(|s| s["exit_code"].as_i64() != Some(0) && s["skipped"] != true)
        .filter_map(|s| s["file"].as_str().map(PathBuf::from))
        .collect())
}

/// This run's entries, then those of earlier runs into `out` (`OUT/index.json`) of scenario
/// files this run did not run, whose run directory is still there: a second `run` into one
/// `--out` adds to the combined index and JUnit instead of replacing them. A scenario run
/// again replaces its old entry. An unreadable `index.json` merges nothing.
pub(crate) fn merged_with_earlier(out: &Path, entries: &[Entry]) -> Vec<Entry> {
    let mut merged = entries.to_vec();
    let Ok(text) = std::fs::read_to_string(out.join("index.json")) else {
        return merged;
    };
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
        return merged;
    };
    let earlier = doc["scenarios"].as_array().cloned().unwrap_or_default();
    for s in earlier {
        let (Some(file), Some(scenario)) = (s["file"].as_str(), s["scenario"].as_str()) else {
            continue;
        };
        let Some(status) = s["exit_code"]
            .as_i64()
            .and_then(|c| ExitStatus::from_code(c as i32))
        else {
            continue;
        };
        let run_dir = s["run_dir"].as_str().map(PathBuf::from);
        let gone = run_dir.as_ref().is_some_and(|d| !d.exists());
        if gone || merged.iter().any(|e| e.file == file) {
            continue;
        }
        let seeds = s["seeds"].as_array().cloned().unwrap_or_default();
        merged.push(Entry {
            file: file.to_string(),
            scenario: scenario.to_string(),
            status,
            summary: s["summary"].as_str().unwrap_or_default().to_string(),
            run_dir,
            placement: match s["placement"].as_str() {
                Some(p) if p.starts_with("earlier run") => p.to_string(),
                Some(p) => format!("earlier run ({p})"),
                None => "earlier run".into(),
            },
            seconds: s["seconds"].as_f64().unwrap_or(0.0),
            seeds: seeds
                .iter()
                .filter_map(|x| {
                    Some(SeedEntry {
                        seed: x["seed"].as_u64()?,
                        status: ExitStatus::from_code(x["exit_code"].as_i64()? as i32)?,
                        summary: x["summary"].as_str().unwrap_or_default().to_string(),
                    })
                })
                .collect(),
            skipped: s["skipped"] == true,
            failing: s["failing"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r.as_str())
                .map(|r| (r.to_string(), r.to_string()))
                .collect(),
            expected_failure: s["expected_failure"] == true,
        });
    }
    merged
}

pub(crate) fn write_index(out: &Path, entries: &[Entry]) -> Result<(), fsx::FsError> {
    let doc = index_document(out, entries);
    let json = format!("{:#}\n", json_document(out, entries));
    fsx::write_atomic(&out.join("index.json"), json.as_bytes())?;
    fsx::write_atomic(&out.join("index.md"), to_markdown(&doc).as_bytes())?;
    fsx::write_atomic(&out.join("index.html"), to_html(&doc).as_bytes())?;
    fsx::write_atomic(&out.join("junit.xml"), render_junit(entries).as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, status: ExitStatus, summary: &str) -> Entry {
        Entry {
            file: format!("scenarios/{name}.yaml"),
            scenario: name.into(),
            status,
            summary: summary.into(),
            run_dir: Some(PathBuf::from(format!("reports/{name}/r1"))),
            placement: "local".into(),
            seconds: 1.5,
            seeds: Vec::new(),
            skipped: false,
            failing: Vec::new(),
            expected_failure: false,
        }
    }

    #[test]
    fn the_tally_names_expected_failures_skips_and_the_exit() {
        let mut caught = entry("caught", ExitStatus::Passed, "expected failure: regressed");
        caught.expected_failure = true;
        let mut skipped = entry("gpu", ExitStatus::CheckFailed, "skipped");
        skipped.skipped = true;
        let t = tally(
            Path::new("reports"),
            &[entry("ok", ExitStatus::Passed, "passed"), caught, skipped],
        );
        assert_eq!(
            t,
            "combined: 3 scenario(s): 2 passed, 1 skipped, 0 failed a check, 0 run failed, 0 \
             invalid, 0 without a golden (1 as an expected failure); exit 1 (FAIL); \
             reports/index.md"
        );
    }

    #[test]
    fn junit_has_one_case_per_scenario_and_per_seed() {
        let mut multi = entry("multi", ExitStatus::CheckFailed, "regressed");
        multi.seeds = vec![
            SeedEntry {
                seed: 1,
                status: ExitStatus::Passed,
                summary: "passed".into(),
            },
            SeedEntry {
                seed: 2,
                status: ExitStatus::CheckFailed,
                summary: "regressed".into(),
            },
        ];
        let entries = vec![
            entry("a", ExitStatus::Passed, "passed"),
            entry("b", ExitStatus::RunFailed, "run failed: killed"),
            multi,
        ];
        let xml = render_junit(&entries);
        assert_eq!(xml.matches("<testcase ").count(), 5, "{xml}");
        assert!(xml.contains("tests=\"5\""), "{xml}");
        assert!(xml.contains("errors=\"1\""), "{xml}");
        assert!(xml.contains("failures=\"2\""), "{xml}");
        assert!(xml.contains("name=\"multi seed 2\""), "{xml}");
        assert_eq!(worst(&entries), ExitStatus::RunFailed);
        let doc = index_document(Path::new("reports"), &entries);
        let md = to_markdown(&doc);
        assert!(md.starts_with("# rlharness run: exit 3"), "{md}");
        assert!(md.contains("[report](b/r1/report.md)"), "{md}");
        let html = to_html(&doc);
        assert!(html.contains("run failed: killed"), "{html}");
    }

    #[test]
    fn a_verdict_with_a_foreign_exit_code_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("verdict.json"),
            r#"{"scenario":"x","exit_code":9,"summary":"?"}"#,
        )
        .unwrap();
        let err = read_verdict(dir.path()).unwrap_err().to_string();
        assert!(err.contains("exit_code"), "{err}");
        std::fs::create_dir(dir.path().join("seed-3")).unwrap();
        let seeds = read_seeds(dir.path());
        assert_eq!(seeds.len(), 1);
        assert_eq!(seeds[0].status, ExitStatus::RunFailed);
    }
}
