//! Archives that travel between the submitting machine and a Ray job, with no shared
//! filesystem: a zip of files (the job's `working_dir` package; the run directory coming back),
//! and the frame that carries the run directory back inside the job's log: base64 lines
//! between a header that states the archive's length and SHA-256 and an end line. A frame that
//! is missing, cut short, altered or of the wrong length is refused, never half-unpacked.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};

const BEGIN: &str = "@@rlharness-rundir v1";
const LINE: &str = "@@ ";
const END: &str = "@@rlharness-rundir end";
/// Base64 characters per frame line.
const WIDTH: usize = 96;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) use crate::app::errors::BundleError;
use crate::model::util::hex;

/// The SHA-256 of `bytes`, in hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Files for a zip: (name inside the archive, file on disk).
pub(crate) type Files = Vec<(String, PathBuf)>;

/// Every regular file under `dir`, named by its path relative to `prefix` + that path (`/`
/// separated), sorted; symbolic links are left out.
pub(crate) fn files_under(dir: &Path, prefix: &str) -> Result<Files, BundleError> {
    fn walk(dir: &Path, name: &str, out: &mut Files) -> Result<(), BundleError> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let ty = e.file_type().map_err(io(&path))?;
            let child = if name.is_empty() {
                e.file_name().to_string_lossy().into_owned()
            } else {
                format!("{name}/{}", e.file_name().to_string_lossy())
            };
            if ty.is_dir() {
                walk(&path, &child, out)?;
            } else if ty.is_file() {
                out.push((child, path));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, prefix.trim_end_matches('/'), &mut out)?;
    Ok(out)
}

/// A zip of `files` (deflated; unix permissions kept; a fixed timestamp, so the same files
/// make the same bytes).
pub(crate) fn zip_files(files: &Files) -> Result<Vec<u8>, BundleError> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, path) in files {
        let meta = std::fs::metadata(path).map_err(io(path))?;
        #[cfg(unix)]
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            meta.permissions().mode() & 0o777
        };
        #[cfg(not(unix))]
        let mode = 0o644;
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(mode)
            .last_modified_time(zip::DateTime::default())
            .large_file(meta.len() >= u32::MAX as u64);
        w.start_file(name.as_str(), options)?;
        let mut f = std::fs::File::open(path).map_err(io(path))?;
        let mut buf = Vec::with_capacity(meta.len() as usize);
        f.read_to_end(&mut buf).map_err(io(path))?;
        w.write_all(&buf).map_err(io(path))?;
    }
    Ok(w.finish()?.into_inner())
}

/// Unpack a zip into `dest` (names that would leave it are refused by the zip reader).
pub(crate) fn unzip(bytes: &[u8], dest: &Path) -> Result<(), BundleError> {
    std::fs::create_dir_all(dest).map_err(io(dest))?;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))?;
    archive.extract(dest)?;
    Ok(())
}

/// A decoded frame: the run's exit code and the archive.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    pub(crate) exit_code: i32,
    pub(crate) archive: Vec<u8>,
}

/// The frame of `archive` (one header line, base64 lines, one end line, each ending in `\n`).
pub(crate) fn encode_frame(archive: &[u8], exit_code: i32) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(archive);
    let mut out = format!(
        "{BEGIN} exit={exit_code} bytes={} sha256={}@@\n",
        archive.len(),
        sha256_hex(archive)
    );
    for chunk in b64.as_bytes().chunks(WIDTH) {
        out.push_str(LINE);
        // Base64 is ASCII.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(END);
    out.push_str("@@\n");
    out
}

/// The last frame in a job's log; lines between the frame's lines that are not its own (other
/// output that reached the log meanwhile) are skipped.
pub(crate) fn decode_frame(log: &str) -> Result<Frame, BundleError> {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.trim_end().starts_with(BEGIN))
        .ok_or(BundleError::NoFrame)?;
    let header = lines[start].trim_end();
    let field = |key: &str| -> Result<&str, BundleError> {
        header
            .trim_end_matches("@@")
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .ok_or_else(|| BundleError::Header(header.to_string()))
    };
    let exit_code: i32 = field("exit")?
        .parse()
        .map_err(|_| BundleError::Header(header.to_string()))?;
    let want_len: usize = field("bytes")?
        .parse()
        .map_err(|_| BundleError::Header(header.to_string()))?;
    let want_sum = field("sha256")?.to_string();
    let mut b64 = String::new();
    let mut ended = false;
    for l in &lines[start + 1..] {
        let l = l.trim_end();
        if l.starts_with(END) {
            ended = true;
            break;
        }
        if let Some(data) = l.strip_prefix(LINE) {
            b64.push_str(data);
        }
    }
    if !ended {
        return Err(BundleError::Truncated);
    }
    let archive = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map_err(|e| BundleError::Base64(e.to_string()))?;
    if archive.len() != want_len {
        return Err(BundleError::Length {
            want: want_len,
            got: archive.len(),
        });
    }
    let got = sha256_hex(&archive);
    if got != want_sum {
        return Err(BundleError::Checksum {
            want: want_sum,
            got,
        });
    }
    Ok(Frame { exit_code, archive })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (tempfile::TempDir, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("run/plots")).unwrap();
        std::fs::write(dir.path().join("run/metrics.csv"), "step,x\n1,0.5\n").unwrap();
        std::fs::write(dir.path().join("run/plots/a.svg"), "<svg/>").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("run", dir.path().join("latest")).unwrap();
        let files = files_under(dir.path(), "out").unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["out/run/metrics.csv", "out/run/plots/a.svg"]);
        let zip = zip_files(&files).unwrap();
        (dir, zip)
    }

    #[test]
    fn a_frame_round_trips_among_other_log_lines() {
        let (_dir, zip) = sample();
        let frame = encode_frame(&zip, 3);
        let mut log = String::from("step 1/2 reward 0.1\n");
        for (i, l) in frame.lines().enumerate() {
            log.push_str(l);
            log.push('\n');
            if i == 1 {
                log.push_str("WARN something else reached the log\n");
            }
        }
        let got = decode_frame(&log).unwrap();
        assert_eq!(got.exit_code, 3);
        assert_eq!(got.archive, zip);
        let dest = tempfile::tempdir().unwrap();
        unzip(&got.archive, dest.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.path().join("out/run/metrics.csv")).unwrap(),
            "step,x\n1,0.5\n"
        );
        // The same files make the same bytes (a content-addressed package).
        assert_eq!(zip, sample().1);
    }

    #[test]
    fn bad_frames_are_refused() {
        let (_dir, zip) = sample();
        let frame = encode_frame(&zip, 0);
        assert!(matches!(
            decode_frame("no frame here\n"),
            Err(BundleError::NoFrame)
        ));
        // Cut short: the end line never came.
        let cut: String = frame.lines().take(2).map(|l| format!("{l}\n")).collect();
        assert!(matches!(decode_frame(&cut), Err(BundleError::Truncated)));
        // One data line lost: the length no longer matches.
        let lost: String = frame
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        assert!(
            matches!(
                decode_frame(&lost),
                Err(BundleError::Length { .. }) | Err(BundleError::Base64(_))
            ),
            "{:?}",
            decode_frame(&lost)
        );
        // One character altered: the checksum catches it.
        let mut lines: Vec<String> = frame.lines().map(str::to_string).collect();
        let data = lines[1].clone();
        let c = if data.as_bytes()[10] == b'A' {
            "B"
        } else {
            "A"
        };
        lines[1] = format!("{}{c}{}", &data[..10], &data[11..]);
        let altered = lines.join("\n");
        assert!(
            matches!(decode_frame(&altered), Err(BundleError::Checksum { .. })),
            "{:?}",
            decode_frame(&altered)
        );
        // A header without its checksum.
        let bad = frame.replacen(" sha256=", " sha=", 1);
        assert!(matches!(decode_frame(&bad), Err(BundleError::Header(_))));
    }
}
