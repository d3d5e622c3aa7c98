//! Which scenarios `run` means: files and folders as given, scenario names (`name:`) looked up
//! under the project's scenarios folder, then narrowed by `--tag` and `-E` (`filter.rs`).

use std::path::{Path, PathBuf};

use super::filter::{Facts, Filter};
use crate::model::error::CommandError;
use crate::scenario;
use crate::scenario::check::ListEntry;

/// The nearest `scenarios/` folder from the working directory up: where names are looked up,
/// and what `--tag` selects from when no path is given.
pub(crate) fn scenarios_root() -> Option<PathBuf> {
    if Path::new("scenarios").is_dir() {
        return Some(PathBuf::from("scenarios"));
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .map(|d| d.join("scenarios"))
        .find(|p| p.is_dir())
}

/// The scenario files `given` (paths or names) and `tags` select, in path order. A name that
/// no scenario has, or that several have, is an error naming the folder searched (with the
/// closest name); so is a selection that leaves nothing.
pub(crate) fn select(
    given: &[PathBuf],
    tags: &[String],
    filter_text: Option<&str>,
) -> Result<Vec<PathBuf>, CommandError> {
    let filter = filter_text.map(Filter::parse).transpose()?;
    let root = scenarios_root();
    let mut listed: Option<Vec<ListEntry>> = None;
    let mut paths = Vec::new();
    for p in given {
        if p.exists() {
            paths.push(p.clone());
            continue;
        }
        let name = p.to_string_lossy();
        let Some(root) = &root else {
            return Err(CommandError::invalid(format!(
                "{name}: no such scenario file or folder (and no `scenarios/` folder here or \
                 above to look it up in as a scenario name)"
            )));
        };
        let entries = listed.get_or_insert_with(|| crate::app::list(root));
        paths.push(by_name(&name, root, entries)?);
    }
    if given.is_empty() {
        match &root {
            Some(r) if !tags.is_empty() || filter.is_some() => paths.push(r.clone()),
            Some(_) => {
                return Err(CommandError::invalid(
                    "no scenario given: name scenario files, folders or scenario names, or \
                     select with --tag or -E",
                ))
            }
            None => {
                return Err(CommandError::invalid(
                    "no scenario given, and no `scenarios/` folder here or above to select from",
                ))
            }
        }
    }
    let mut files = scenario::discover(&paths)?;
    if !tags.is_empty() || filter.is_some() {
        let loaded: Vec<(PathBuf, Option<scenario::Scenario>)> = files
            .iter()
            .map(|f| (f.clone(), crate::run::plan::load_checked(f, &[]).ok()))
            .collect();
        files.retain(|f| {
            let Some((_, Some(s))) = loaded.iter().find(|(p, _)| p == f) else {
                return false; // a file that does not load has no name or tags
            };
            selected(f, s, tags, filter.as_ref())
        });
        if files.is_empty() {
            let mut what: Vec<String> = Vec::new();
            if !tags.is_empty() {
                what.push(format!("the tag(s) {}", tags.join(", ")));
            }
            if let Some(f) = filter_text {
                what.push(format!("-E `{f}`"));
            }
            return Err(CommandError::invalid(format!(
                "no scenario under {} matches {}",
                shown(&paths),
                what.join(" and ")
            )));
        }
    }
    Ok(files)
}

/// Whether `--tag` (any of `tags`, when given) and `-E` (when given) both select the scenario.
pub(crate) fn selected(
    file: &Path,
    s: &scenario::Scenario,
    tags: &[String],
    filter: Option<&Filter>,
) -> bool {
    let tagged = tags.is_empty() || s.tags.iter().any(|t| tags.contains(t));
    let requires = s.requires.summary();
    let path = file.display().to_string();
    let facts = Facts {
        name: &s.name,
        tags: &s.tags,
        requires: &requires,
        path: &path,
    };
    tagged && filter.is_none_or(|f| f.matches(&facts))
}

/// The one scenario file under `root` whose `name:` is `name`.
fn by_name(name: &str, root: &Path, entries: &[ListEntry]) -> Result<PathBuf, CommandError> {
    let hits: Vec<&ListEntry> = entries.iter().filter(|e| e.name == name).collect();
    match hits.as_slice() {
        [one] => Ok(one.path.clone()),
        [] => {
            let near =
                crate::scenario::error::closest(name, entries.iter().map(|e| e.name.as_str()))
                    .map(|c| format!("; did you mean `{c}`?"))
                    .unwrap_or_default();
            Err(CommandError::invalid(format!(
                "{name}: no such scenario file or folder, and no scenario under {} has that \
                 name{near} (`rlharness list {}` lists them)",
                root.display(),
                root.display()
            )))
        }
        many => Err(CommandError::invalid(format!(
            "{name}: {} scenarios under {} have that name ({}); give the file",
            many.len(),
            root.display(),
            many.iter()
                .map(|e| e.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
