//! A recorded cassette installed into the golden store (`rlharness record`).

use std::path::Path;

/// A cassette that could not be put in place: what was being done, and the file system's
/// answer.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub(crate) struct InstallError {
    what: String,
    source: std::io::Error,
}

impl InstallError {
    fn new(what: String, source: std::io::Error) -> Self {
        Self { what, source }
    }
}

/// Put the cassette `from` in place at `to`, replacing what is there: the copy is made beside
/// the target first, so a failure leaves the old cassette whole.
pub(crate) fn install_cassette(from: &Path, to: &Path) -> Result<(), InstallError> {
    let parent = to.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(parent)
        .map_err(|e| InstallError::new(format!("cannot create {}", parent.display()), e))?;
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cassette".into());
    let fresh = parent.join(format!(".{name}.new"));
    let old = parent.join(format!(".{name}.old"));
    for leftover in [&fresh, &old] {
        if leftover.exists() {
            std::fs::remove_dir_all(leftover).map_err(|e| {
                InstallError::new(format!("cannot remove {}", leftover.display()), e)
            })?;
        }
    }
    std::fs::create_dir_all(&fresh)
        .map_err(|e| InstallError::new(format!("cannot create {}", fresh.display()), e))?;
    let entries = std::fs::read_dir(from)
        .map_err(|e| InstallError::new(format!("cannot list {}", from.display()), e))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| InstallError::new(format!("cannot list {}", from.display()), e))?;
        if entry.path().is_file() {
            let dest = fresh.join(entry.file_name());
            std::fs::copy(entry.path(), &dest).map_err(|e| {
                let what = format!(
                    "cannot copy {} to {}",
                    entry.path().display(),
                    dest.display()
                );
                InstallError::new(what, e)
            })?;
        }
    }
    if to.exists() {
        std::fs::rename(to, &old).map_err(|e| {
            InstallError::new(
                format!("cannot move the old cassette {} aside", to.display()),
                e,
            )
        })?;
    }
    std::fs::rename(&fresh, to)
        .map_err(|e| InstallError::new(format!("cannot install {}", to.display()), e))?;
    if old.exists() {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(())
}
