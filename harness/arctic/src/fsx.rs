//! File-system helpers that put the path into every I/O error, and atomic writes
//! (temp file in the same folder, then rename) so a killed run never leaves a torn file; a
//! written file gets the mode the umask gives, as with any other tool.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("failed to {action} {path}: {source}")]
pub struct FsError {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> FsError + 'a {
    move |source| FsError {
        action,
        path: path.to_path_buf(),
        source,
    }
}

pub fn read(path: &Path) -> Result<Vec<u8>, FsError> {
    std::fs::read(path).map_err(err("read", path))
}

pub fn read_to_string(path: &Path) -> Result<String, FsError> {
    std::fs::read_to_string(path).map_err(err("read", path))
}

pub fn create_dir_all(path: &Path) -> Result<(), FsError> {
    std::fs::create_dir_all(path).map_err(err("create directory", path))
}

pub fn remove_file(path: &Path) -> Result<(), FsError> {
    std::fs::remove_file(path).map_err(err("remove", path))
}

pub fn rename(from: &Path, to: &Path) -> Result<(), FsError> {
    std::fs::rename(from, to).map_err(err("rename into", to))
}

/// Write `bytes` to `path` atomically: a reader sees the old file or the new one, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    create_dir_all(dir)?;
    // Created with the mode a plain `File::create` gets (0o666 less the umask), not the temp
    // file's private 0o600: reports and goldens are read by others (a CI artifact, a team).
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder
        .tempfile_in(dir)
        .map_err(err("create temp file in", dir))?;
    // No fsync: the rename is what makes a killed run leave the old file or the new one, and
    // a run rewrites metrics.csv every step, where a sync per step would cost more than a step.
    tmp.write_all(bytes).map_err(err("write", path))?;
    tmp.persist(path).map_err(|e| FsError {
        action: "rename into",
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// Append one line (a `\n` is added) and flush, for streaming logs such as `wire.jsonl`.
pub fn append_line(file: &mut std::fs::File, path: &Path, line: &str) -> Result<(), FsError> {
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    file.write_all(&buf).map_err(err("append to", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_names_path_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/run.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(read_to_string(&p).unwrap(), "two");
        let missing = dir.path().join("nope.txt");
        let e = read(&missing).unwrap_err().to_string();
        assert!(e.contains("nope.txt"), "{e}");
    }
}
