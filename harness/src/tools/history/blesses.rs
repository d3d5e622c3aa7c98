//! When a scenario's golden was blessed: the date in the provenance of the golden in force, and
//! of every earlier version of its `golden.yaml` that the store's git history holds. A change
//! point between two runs with a bless between them was accepted on purpose.

use std::path::Path;
use std::process::Command;

use crate::model::golden::{parse_header, Golden, HEADER_FILE};

/// How many earlier versions of a `golden.yaml` the history reads.
const MAX_VERSIONS: usize = 100;

/// The bless dates (RFC 3339) of `scenario` on `hardware`, oldest first.
pub fn bless_dates(
    golden_root: &Path,
    scenario: &str,
    hardware: &str,
    golden: Option<&Golden>,
) -> Vec<String> {
    let mut dates: Vec<String> = golden
        .map(|g| g.provenance.date.clone())
        .into_iter()
        .collect();
    let file = Path::new(scenario).join(hardware).join(HEADER_FILE);
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(golden_root)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let path = file.to_string_lossy().into_owned();
    let max = format!("-{MAX_VERSIONS}");
    if let Some(log) = git(&["log", &max, "--format=%H", "--", &path]) {
        for commit in log.lines() {
            let spec = format!("{commit}:./{path}");
            let header = git(&["show", &spec]).and_then(|t| parse_header(&t, &file).ok());
            if let Some((provenance, _, _)) = header {
                dates.push(provenance.date);
            }
        }
    }
    dates.sort();
    dates.dedup();
    dates
}
