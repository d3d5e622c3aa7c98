//! Scenario files found under the paths given: files as they are, folders walked.

use std::path::{Path, PathBuf};

use super::SpecError;

/// Folders under a scenarios root that hold layer files, not scenarios.
const NOT_SCENARIO_DIRS: &[&str] = &["backends", "defaults"];

fn is_yaml(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// The scenario files under the given paths: files as given, folders searched recursively
/// for `*.yaml`/`*.yml`, skipping `backends/` and `defaults/` folders (layer files) and
/// hidden entries. Sorted, without duplicates.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, SpecError> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), SpecError> {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| SpecError::file(dir, format!("cannot read folder: {e}")))?;
        let mut children = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| SpecError::file(dir, format!("cannot read folder: {e}")))?;
            children.push(entry.path());
        }
        children.sort();
        for p in children {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            if p.is_dir() {
                if !NOT_SCENARIO_DIRS.contains(&name.as_str()) {
                    walk(&p, out)?;
                }
            } else if is_yaml(&p) {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            return Err(SpecError::file(p, "no such scenario file or folder"));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}
