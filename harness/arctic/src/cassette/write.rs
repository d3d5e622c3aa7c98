//! Writing a cassette: bodies packed as exchanges complete, the index when recording ends.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::fsx;

use super::{
    is_frame, job_types, sha256_hex, BodyRef, CassetteError, IndexEntry, RecordedExchange,
    INDEX_FILE, INLINE_TEXT_CAP, PACK_FILE,
};

/// The binary bodies of a cassette: one gzip stream, each body at an offset of the
/// uncompressed stream. One file compresses better than hundreds of small ones, and its
/// frames still come out with `zcat bodies.gz | tail -c +$((offset + 1)) | head -c $bytes`.
struct Pack {
    path: PathBuf,
    gz: Option<flate2::write::GzEncoder<std::io::BufWriter<std::fs::File>>>,
    offset: u64,
}

impl Pack {
    fn new(dir: &Path) -> Pack {
        Pack {
            path: dir.join(PACK_FILE),
            gz: None,
            offset: 0,
        }
    }

    fn io(&self, e: std::io::Error) -> CassetteError {
        CassetteError::Body {
            path: self.path.clone(),
            why: format!("cannot write: {e}"),
        }
    }

    /// Append a body; its offset.
    fn append(&mut self, bytes: &[u8]) -> Result<u64, CassetteError> {
        if self.gz.is_none() {
            let f = std::fs::File::create(&self.path).map_err(|e| self.io(e))?;
            self.gz = Some(flate2::write::GzEncoder::new(
                std::io::BufWriter::new(f),
                flate2::Compression::best(),
            ));
        }
        let at = self.offset;
        if let Some(gz) = self.gz.as_mut() {
            if let Err(e) = gz.write_all(bytes) {
                return Err(self.io(e));
            }
        }
        self.offset += bytes.len() as u64;
        Ok(at)
    }

    fn finish(self) -> Result<(), CassetteError> {
        if let Some(gz) = self.gz {
            let path = self.path.clone();
            gz.finish()
                .and_then(|mut w| w.flush())
                .map_err(|e| CassetteError::Body {
                    path,
                    why: format!("cannot write: {e}"),
                })?;
        }
        Ok(())
    }
}

/// Keep `bytes` inline when that reproduces them exactly, else in the pack.
fn store_body(
    pack: &mut Pack,
    content_type: Option<&str>,
    bytes: &[u8],
) -> Result<Option<BodyRef>, CassetteError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut body = BodyRef {
        content_type: content_type.map(str::to_string),
        bytes: bytes.len() as u64,
        json: None,
        text: None,
        sha256: None,
        offset: None,
    };
    if !is_frame(content_type) {
        if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
            if serde_json::to_vec(&v).is_ok_and(|s| s == bytes) {
                body.json = Some(v);
                return Ok(Some(body));
            }
        }
        if let Ok(text) = std::str::from_utf8(bytes) {
            if bytes.len() <= INLINE_TEXT_CAP {
                body.text = Some(text.to_string());
                return Ok(Some(body));
            }
        }
    }
    body.offset = Some(pack.append(bytes)?);
    body.sha256 = Some(sha256_hex(bytes));
    Ok(Some(body))
}

/// Writes a cassette while the proxy runs: bodies go to disk as exchanges complete (on a
/// thread of its own, off the proxy's async threads), the index when the recording ends.
pub struct CassetteWriter {
    dir: PathBuf,
    tx: Mutex<Option<mpsc::Sender<RecordedExchange>>>,
    thread: Mutex<Option<std::thread::JoinHandle<Result<usize, CassetteError>>>>,
    /// Exchanges in flight: seq -> group.
    in_flight: Mutex<BTreeMap<u64, u64>>,
}

impl CassetteWriter {
    /// Start a cassette in `dir`, which must not hold one already.
    pub fn create(dir: &Path) -> Result<Arc<CassetteWriter>, CassetteError> {
        if dir.join(INDEX_FILE).exists() {
            return Err(CassetteError::Writer(format!(
                "{} already holds a cassette",
                dir.display()
            )));
        }
        fsx::create_dir_all(dir)?;
        let (tx, rx) = mpsc::channel::<RecordedExchange>();
        let thread_dir = dir.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("cassette-writer".into())
            .spawn(move || write_all(&thread_dir, rx))
            .map_err(|e| CassetteError::Writer(format!("cannot start its thread: {e}")))?;
        Ok(Arc::new(CassetteWriter {
            dir: dir.to_path_buf(),
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            in_flight: Mutex::new(BTreeMap::new()),
        }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An exchange arrived: its concurrency group is that of the oldest exchange still in
    /// flight, or its own `seq` when none is.
    pub fn begin(&self, seq: u64) -> u64 {
        let mut f = crate::util::lock(&self.in_flight);
        let group = f.values().next().copied().unwrap_or(seq);
        f.insert(seq, group);
        group
    }

    /// The exchange is over: hand it to the writer thread.
    pub fn push(&self, ex: RecordedExchange) {
        crate::util::lock(&self.in_flight).remove(&ex.seq);
        if let Some(tx) = crate::util::lock(&self.tx).as_ref() {
            let _ = tx.send(ex);
        }
    }

    /// End the recording: write the index and return how many exchanges it holds. Blocks
    /// until the writer thread is done; later calls return an error.
    pub fn finish(&self) -> Result<usize, CassetteError> {
        drop(crate::util::lock(&self.tx).take());
        let thread = crate::util::lock(&self.thread)
            .take()
            .ok_or_else(|| CassetteError::Writer("the recording was already finished".into()))?;
        thread
            .join()
            .map_err(|_| CassetteError::Writer("the writer thread panicked".into()))?
    }
}

fn write_all(dir: &Path, rx: mpsc::Receiver<RecordedExchange>) -> Result<usize, CassetteError> {
    let mut entries = Vec::new();
    let mut first_error = None;
    let mut pack = Pack::new(dir);
    for ex in rx {
        let stored = store_body(&mut pack, ex.request_content_type.as_deref(), &ex.request)
            .and_then(|req| {
                let ct = ex.response_headers.get("content-type").map(String::as_str);
                Ok((req, store_body(&mut pack, ct, &ex.response)?))
            });
        match stored {
            Ok((request, response)) => entries.push(IndexEntry {
                seq: ex.seq,
                group: ex.group,
                method: ex.method,
                path: ex.path,
                query: ex.query,
                job_id: ex.job_id,
                job_type: None,
                status: ex.status,
                request,
                response_headers: ex.response_headers,
                response,
                error: ex.error,
            }),
            // Keep draining so the proxy never blocks; report the first failure at the end.
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    pack.finish()?;
    entries.sort_by_key(|e| e.seq);
    let types = job_types(entries.iter().map(|e| {
        (
            e.method.as_str(),
            e.path.as_str(),
            e.status,
            e.request.as_ref().and_then(|b| b.json.as_ref()),
            e.response.as_ref().and_then(|b| b.json.as_ref()),
        )
    }));
    let mut text = String::new();
    for e in &mut entries {
        e.job_type = e.job_id.and_then(|id| types.get(&id).cloned());
        let line = serde_json::to_string(e).map_err(|e| CassetteError::Writer(e.to_string()))?;
        text.push_str(&line);
        text.push('\n');
    }
    fsx::write_atomic(&dir.join(INDEX_FILE), text.as_bytes())?;
    Ok(entries.len())
}
