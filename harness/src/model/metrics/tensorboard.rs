//! The series as TensorBoard event files: one `events.out.tfevents.<secs>.<host>.rlharness`
//! per folder, a TFRecord stream of `Event` messages (TensorFlow's `event.proto` and
//! `summary.proto`, only the fields written here, with their real field numbers). The first
//! event carries `file_version: "brain.Event:2"`, so TensorBoard keeps steps that arrive out of
//! order (the golden series written after the run's). Each `write` ends with a flush: a run
//! that dies keeps every step it had.
//!
//! TFRecord framing, per record: the length as a little-endian u64, the masked CRC-32C of
//! those 8 bytes, the data, the masked CRC-32C of the data.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use prost::Message;

/// `tensorflow.Event`: only what scalars need.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Event {
    #[prost(double, tag = "1")]
    pub(crate) wall_time: f64,
    #[prost(int64, tag = "2")]
    pub(crate) step: i64,
    #[prost(string, optional, tag = "3")]
    pub(crate) file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub(crate) summary: Option<Summary>,
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub(crate) value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`: a tag and its scalar.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SummaryValue {
    #[prost(string, tag = "1")]
    pub(crate) tag: String,
    #[prost(float, optional, tag = "2")]
    pub(crate) simple_value: Option<f32>,
}

/// What TensorBoard expects of the first event of a file.
pub(crate) const FILE_VERSION: &str = "brain.Event:2";

/// A failed write of an event file, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("TensorBoard event file {}: {source}", path.display())]
pub(crate) struct TensorBoardError {
    pub(crate) path: PathBuf,
    #[source]
    pub(crate) source: std::io::Error,
}

/// The masked CRC-32C TFRecord puts after the length and after the data.
pub(crate) fn masked_crc(data: &[u8]) -> u32 {
    // TensorFlow's `crc32c::Mask`: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
    crc32c::crc32c(data)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// One record, framed.
pub(crate) fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// Why a TFRecord stream does not read, at the offset of its first bad record.
#[cfg(test)]
#[derive(Debug, PartialEq, thiserror::Error)]
pub(crate) enum UnframeError {
    #[error("a truncated header at byte {0}")]
    Header(usize),
    #[error("a bad length CRC at byte {0}")]
    LengthCrc(usize),
    #[error("a truncated record at byte {0}")]
    Record(usize),
    #[error("a bad data CRC at byte {0}")]
    DataCrc(usize),
}

/// The records of a TFRecord stream, each checked against its CRCs; `Err` names the offset of
/// the first bad one.
#[cfg(test)]
pub(crate) fn unframe(mut bytes: &[u8]) -> Result<Vec<Vec<u8>>, UnframeError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    while !bytes.is_empty() {
        if bytes.len() < 12 {
            return Err(UnframeError::Header(at));
        }
        let len_bytes = &bytes[..8];
        if u32_at(bytes, 8) != masked_crc(len_bytes) {
            return Err(UnframeError::LengthCrc(at));
        }
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap_or_default()) as usize;
        if bytes.len() < 16 + len {
            return Err(UnframeError::Record(at));
        }
        let data = &bytes[12..12 + len];
        if u32_at(bytes, 12 + len) != masked_crc(data) {
            return Err(UnframeError::DataCrc(at));
        }
        out.push(data.to_vec());
        at += 16 + len;
        bytes = &bytes[16 + len..];
    }
    Ok(out)
}

/// An open event file in one folder.
#[derive(Debug)]
pub(crate) struct EventWriter {
    path: PathBuf,
    file: File,
}

impl EventWriter {
    /// Make `dir` and a new event file in it, starting with the file-version event.
    pub(crate) fn create(dir: &Path) -> Result<EventWriter, TensorBoardError> {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host: String = host
            .trim()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!(
            "events.out.tfevents.{}.{host}.rlharness",
            wall_time() as u64
        ));
        std::fs::create_dir_all(dir).map_err(|source| TensorBoardError {
            path: path.clone(),
            source,
        })?;
        EventWriter::open(path)
    }

    fn open(path: PathBuf) -> Result<EventWriter, TensorBoardError> {
        let file = File::create(&path).map_err(|source| TensorBoardError {
            path: path.clone(),
            source,
        })?;
        let mut w = EventWriter { path, file };
        w.write_event(&Event {
            wall_time: wall_time(),
            step: 0,
            file_version: Some(FILE_VERSION.into()),
            summary: None,
        })?;
        Ok(w)
    }

    /// Start over in a new file beside this one (its name sorts after this one's, as
    /// TensorBoard reads a folder's files), and remove this one: for a series that must be
    /// written again in step order.
    pub(crate) fn restart(&mut self) -> Result<(), TensorBoardError> {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let next = match name.rsplit_once(".rlharness.") {
            Some((base, n)) => format!("{base}.rlharness.{}", n.parse::<u64>().unwrap_or(0) + 1),
            None => format!("{name}.1"),
        };
        let fresh = EventWriter::open(self.path.with_file_name(next))?;
        let old = std::mem::replace(self, fresh);
        std::fs::remove_file(&old.path).map_err(|source| TensorBoardError {
            path: old.path.clone(),
            source,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// One step's scalars as one event, flushed (a non-finite value stays NaN or infinity:
    /// TensorBoard shows it as such).
    pub(crate) fn write(
        &mut self,
        step: u64,
        scalars: &[(&str, f64)],
    ) -> Result<(), TensorBoardError> {
        if scalars.is_empty() {
            return Ok(());
        }
        let value = scalars
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: (*tag).to_string(),
                simple_value: Some(*v as f32),
            })
            .collect();
        self.write_event(&Event {
            wall_time: wall_time(),
            step: i64::try_from(step).unwrap_or(i64::MAX),
            file_version: None,
            summary: Some(Summary { value }),
        })
    }

    fn write_event(&mut self, e: &Event) -> Result<(), TensorBoardError> {
        let framed = frame(&e.encode_to_vec());
        self.file
            .write_all(&framed)
            .and_then(|()| self.file.flush())
            .map_err(|source| TensorBoardError {
                path: self.path.clone(),
                source,
            })
    }
}

/// Seconds since the epoch, as TensorBoard's `wall_time`.
fn wall_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_matches_tensorflow() {
        // CRC-32C("123456789") is 0xe3069283 (RFC 3720's check value); masked, 0xc78ab0e5, as
        // the tensorboard package's own `masked_crc32c` computes it.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
        // The empty record's length header, as every TFRecord reader checks it.
        assert_eq!(frame(b"").len(), 16);
    }

    #[test]
    fn frames_round_trip_and_a_flipped_bit_is_caught() {
        let records: Vec<Vec<u8>> = vec![b"".to_vec(), b"abc".to_vec(), vec![7u8; 300]];
        let bytes: Vec<u8> = records.iter().flat_map(|r| frame(r)).collect();
        assert_eq!(unframe(&bytes).unwrap(), records);
        let mut bad = bytes.clone();
        bad[16 + 12 + 1] ^= 1;
        assert!(
            unframe(&bad).unwrap_err().to_string().contains("data CRC"),
            "{bad:?}"
        );
        assert!(unframe(&bytes[..bytes.len() - 1])
            .unwrap_err()
            .to_string()
            .contains("truncated"));
    }

    #[test]
    fn an_event_file_reads_back_step_by_step() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(&dir.path().join("tb")).unwrap();
        w.write(1, &[("critic/rewards/mean", 0.25), ("loss", f64::NAN)])
            .unwrap();
        w.write(2, &[("critic/rewards/mean", 0.1)]).unwrap();
        w.write(3, &[]).unwrap();
        let name = w.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("events.out.tfevents.") && name.ends_with(".rlharness"));
        // Flushed per step: readable while the writer is still open.
        let bytes = std::fs::read(w.path()).unwrap();
        let events: Vec<Event> = unframe(&bytes)
            .unwrap()
            .iter()
            .map(|r| Event::decode(r.as_slice()).unwrap())
            .collect();
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].file_version.as_deref(), Some(FILE_VERSION));
        assert_eq!(events[1].step, 1);
        let values = &events[1].summary.as_ref().unwrap().value;
        assert_eq!(values[0].tag, "critic/rewards/mean");
        assert_eq!(values[0].simple_value, Some(0.25));
        assert!(values[1].simple_value.unwrap().is_nan());
        assert_eq!(events[2].step, 2);
        assert_eq!(
            events[2].summary.as_ref().unwrap().value[0].simple_value,
            Some(0.1f32)
        );
    }

    #[test]
    fn a_restart_starts_a_later_file_and_removes_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.write(2, &[("a", 2.0)]).unwrap();
        let first = w.path().to_path_buf();
        w.restart().unwrap();
        w.restart().unwrap();
        w.write(1, &[("a", 1.0)]).unwrap();
        assert!(!first.exists());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].ends_with(".rlharness.2"), "{names:?}");
        let first_name = first.file_name().unwrap().to_string_lossy().into_owned();
        assert!(names[0] > first_name);
        let records = unframe(&std::fs::read(w.path()).unwrap()).unwrap();
        let events: Vec<Event> = records
            .iter()
            .map(|r| Event::decode(r.as_slice()).unwrap())
            .collect();
        assert_eq!(events[0].file_version.as_deref(), Some(FILE_VERSION));
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].step, 1);
    }

    #[test]
    fn an_unwritable_folder_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let e = EventWriter::create(&blocker.join("tb")).unwrap_err();
        assert!(e.to_string().contains("TensorBoard event file"), "{e}");
        assert!(
            e.to_string().contains("file/tb/events.out.tfevents."),
            "{e}"
        );
    }
}
