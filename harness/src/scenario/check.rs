//! `rlharness check` and `rlharness list` as library functions: they compute an outcome and
//! render it to text; the binary prints and picks the exit code (2 on any check error).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::config::scenarios_root;
use super::lint::{layer_files, lint_file, LintIssue};
use super::{discover, load_scenario, SpecError, SpecErrors};

/// A scenario's problems: errors (exit 2 from `check` and `run`), lints (exit 2 from `check`)
/// and warnings.
#[derive(Debug, Default)]
pub struct Problems {
    pub errors: Vec<SpecError>,
    pub lints: Vec<SpecError>,
    pub warnings: Vec<SpecError>,
}

/// What `check` asks of a scenario that loads, against the goldens under the third path (the
/// command layer's preflight: the judge's lint of the rules, the trainer program, the shapes).
pub type Preflight<'a> = &'a dyn Fn(&Path, &super::Scenario, &Path) -> Problems;

/// Whether a scenario that loads can be planned: the errors of its plan (the builtin driver's
/// translation of its config, the options of a server the harness starts), which `check` and
/// `list` count as the file's, as `run` refuses them. The layer that plans hands it in.
pub type Planned<'a> = &'a dyn Fn(&super::Scenario) -> Result<(), SpecErrors>;

/// `path` loaded and planned: the scenario, or the errors of its file or its plan.
fn load_planned(path: &Path, planned: Planned) -> Result<super::Scenario, SpecErrors> {
    let s = load_scenario(path, &[])?;
    planned(&s)?;
    Ok(s)
}

/// What kind of file a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Scenario,
    /// A backend or defaults file (linted for verl's config format).
    LayerFile,
}

/// One problem found by `check`.
#[derive(Debug, Clone, PartialEq)]
pub enum Diagnostic {
    Spec(SpecError),
    Lint(LintIssue),
}

/// The outcome of one file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileReport {
    pub(crate) path: PathBuf,
    pub(crate) kind: FileKind,
    pub errors: Vec<Diagnostic>,
    /// What `check` says without failing (a calibration too small for its windows).
    pub(crate) warnings: Vec<SpecError>,
}

/// The outcome of `check`. An error that is about no single file (a path that does not exist)
/// is a report of its own with that path.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CheckOutcome {
    pub files: Vec<FileReport>,
}

impl CheckOutcome {
    pub fn is_ok(&self) -> bool {
        self.files.iter().all(|f| f.errors.is_empty())
    }

    pub fn error_count(&self) -> usize {
        self.files.iter().map(|f| f.errors.len()).sum()
    }
}

/// Validate every scenario under `paths` (default `scenarios/` when empty), each loaded and
/// planned (`planned`), and lint the layer files (`backends/`, `defaults/`) of every scenarios
/// root involved.
pub fn check(paths: &[PathBuf], planned: Planned, problems: Preflight) -> CheckOutcome {
    let default_paths = [PathBuf::from("scenarios")];
    let paths: &[PathBuf] = if paths.is_empty() {
        &default_paths
    } else {
        paths
    };
    let mut outcome = CheckOutcome::default();
    let mut roots = BTreeSet::new();
    let mut scenario_files = Vec::new();
    for p in paths {
        match discover(std::slice::from_ref(p)) {
            Ok(found) => {
                if p.is_dir() {
                    // A folder given directly is a root itself if it holds layer folders.
                    let root = if p.file_name().is_some_and(|n| n == "scenarios") {
                        p.clone()
                    } else {
                        scenarios_root(&p.join("x.yaml"))
                    };
                    roots.insert(root);
                }
                scenario_files.extend(found);
            }
            Err(e) => outcome.files.push(FileReport {
                path: p.clone(),
                kind: FileKind::Scenario,
                errors: vec![Diagnostic::Spec(e)],
                warnings: Vec::new(),
            }),
        }
    }
    scenario_files.sort();
    scenario_files.dedup();
    // Scenario names already seen (name -> first file): two scenarios of one name would share
    // one golden and one `latest`.
    let mut names: std::collections::BTreeMap<String, PathBuf> = Default::default();
    for file in scenario_files {
        roots.insert(scenarios_root(&file));
        let mut warnings = Vec::new();
        let errors = match load_planned(&file, planned) {
            // Rules that cannot fail, against the scenario's goldens (`golden/` beside
            // `scenarios/`).
            Ok(s) => {
                let root = scenarios_root(&file);
                let golden_root = root.parent().unwrap_or(Path::new("")).join("golden");
                let found = problems(&file, &s, &golden_root);
                warnings = found.warnings;
                let mut errors: Vec<Diagnostic> = (found.errors.into_iter())
                    .chain(found.lints)
                    .map(Diagnostic::Spec)
                    .collect();
                match names.get(&s.name) {
                    Some(first) => errors.push(Diagnostic::Spec(SpecError {
                        file: file.clone(),
                        line: name_line(&file),
                        col: 1,
                        key_path: "name".into(),
                        message: format!(
                            "`{}` is also the name of {}: two scenarios would share one golden \
                             and one `latest`",
                            s.name,
                            first.display()
                        ),
                    })),
                    None => {
                        names.insert(s.name.clone(), file.clone());
                    }
                }
                errors
            }
            Err(errs) => errs.0.into_iter().map(Diagnostic::Spec).collect(),
        };
        outcome.files.push(FileReport {
            path: file,
            kind: FileKind::Scenario,
            errors,
            warnings,
        });
    }
    for root in roots {
        for file in layer_files(&root) {
            let mut errors: Vec<Diagnostic> =
                lint_file(&file).into_iter().map(Diagnostic::Lint).collect();
            // A layer file must also parse; its semantic errors show through the scenarios.
            if let Err(e) = super::config::load_layer_file(&file) {
                errors.push(Diagnostic::Spec(e));
            }
            outcome.files.push(FileReport {
                path: file,
                kind: FileKind::LayerFile,
                errors,
                warnings: Vec::new(),
            });
        }
    }
    outcome
}

/// Compiler-like text: one `error: file:line:col: key.path: message` per problem, then a
/// summary line.
pub fn render_check(outcome: &CheckOutcome) -> String {
    let mut out = String::new();
    for f in &outcome.files {
        for w in &f.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        for d in &f.errors {
            match d {
                Diagnostic::Spec(e) => {
                    let _ = writeln!(out, "error: {e}");
                }
                Diagnostic::Lint(i) => {
                    let _ = writeln!(out, "error: {i}");
                }
            }
        }
    }
    let scenarios = outcome
        .files
        .iter()
        .filter(|f| f.kind == FileKind::Scenario)
        .count();
    let layers = outcome.files.len() - scenarios;
    let errors = outcome.error_count();
    let bad = outcome
        .files
        .iter()
        .filter(|f| !f.errors.is_empty())
        .count();
    if errors == 0 {
        let _ = writeln!(
            out,
            "ok: {scenarios} scenario{} and {layers} backend/defaults file{} valid",
            plural(scenarios),
            plural(layers)
        );
    } else {
        let _ = writeln!(
            out,
            "{errors} error{} in {bad} file{} ({scenarios} scenario{} and {layers} backend/defaults file{} checked)",
            plural(errors),
            plural(bad),
            plural(scenarios),
            plural(layers)
        );
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// One line of `list`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListEntry {
    pub path: PathBuf,
    pub(crate) name: String,
    pub(crate) tags: Vec<String>,
    /// `Requires::summary`.
    pub requires: String,
    /// `Err(reasons)` when it cannot run here (unmet requirements, or the file is invalid).
    pub runnable: Result<(), Vec<String>>,
}

/// The scenarios under `root` and whether each can run on this machine (a file that does not
/// load or plan, `planned`, cannot).
pub fn list(root: &Path, planned: Planned) -> Vec<ListEntry> {
    let files = match discover(&[root.to_path_buf()]) {
        Ok(f) => f,
        Err(e) => {
            return vec![ListEntry {
                path: root.to_path_buf(),
                name: "-".into(),
                tags: Vec::new(),
                requires: "-".into(),
                runnable: Err(vec![e.to_string()]),
            }]
        }
    };
    files
        .into_iter()
        .map(|path| match load_planned(&path, planned) {
            Ok(s) => {
                let unmet = s.requires.unmet();
                ListEntry {
                    name: s.name,
                    tags: s.tags,
                    requires: s.requires.summary(),
                    runnable: if unmet.is_empty() { Ok(()) } else { Err(unmet) },
                    path,
                }
            }
            Err(errs) => ListEntry {
                name: path
                    .file_stem()
                    .map(|s| s.to_string_lossy().to_string())
                    .unwrap_or_default(),
                tags: Vec::new(),
                requires: "-".into(),
                runnable: Err(vec![format!(
                    "invalid scenario ({} error{}; run `rlharness check`)",
                    errs.len(),
                    plural(errs.len())
                )]),
                path,
            },
        })
        .collect()
}

/// A table: name, tags, requirements, and `yes` or `no: reasons`.
pub fn render_list(entries: &[ListEntry]) -> String {
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|e| {
            [
                e.name.clone(),
                e.path.display().to_string(),
                if e.tags.is_empty() {
                    "-".into()
                } else {
                    e.tags.join(",")
                },
                e.requires.clone(),
                match &e.runnable {
                    Ok(()) => "yes".into(),
                    Err(reasons) => format!("no: {}", reasons.join("; ")),
                },
            ]
        })
        .collect();
    let header = ["SCENARIO", "PATH", "TAGS", "REQUIRES", "RUNNABLE"].map(String::from);
    let mut widths = [0usize; 5];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                let _ = write!(line, "{c:w$}  ");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// The line of a scenario file's `name:` key (1 when it cannot be found).
fn name_line(file: &Path) -> usize {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| t.lines().position(|l| l.starts_with("name:")))
        .map_or(1, |i| i + 1)
}
