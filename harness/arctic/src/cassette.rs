//! The cassette: a run's whole wire traffic, kept so a later run can be served the very same
//! responses. A person can read it: `index.jsonl` holds one exchange a line in arrival order,
//! JSON bodies inline, and every DSSST1 (or other binary) body lies in one gzip stream beside it.
//!
//! ```text
//! cassette/
//!   cassette.json         what was recorded: scenario, hardware, seed, steps, plan hash, ...
//!   index.jsonl           {"seq", "group", "method", "path", "query"?, "job_id"?, "job_type"?,
//!                          "status", "request"?, "response_headers", "response"?, "error"?}
//!   bodies.gz             the DSSST1 (and other binary) bodies back to back, gzip; a body
//!                         is `bytes` bytes at `offset` of the uncompressed stream
//!   recorded_metrics.csv  the recorded run's metrics (what a replay must reproduce)
//! ```
//!
//! A body is `{"content_type"?, "bytes", "json": value}` when its bytes are exactly the compact
//! serialisation of that JSON (what the Arctic server and the builtin driver send),
//! `{"content_type"?, "bytes", "text"}` for other UTF-8 text, and otherwise
//! `{"content_type"?, "bytes", "sha256", "offset"}`. So every response replays byte for byte.
//! `group` numbers exchanges that were in flight together (transitively): a replay lets those
//! arrive in any order, as concurrent requests do.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::fsx::{self, FsError};

pub const INDEX_FILE: &str = "index.jsonl";
pub const META_FILE: &str = "cassette.json";
pub const METRICS_FILE: &str = "recorded_metrics.csv";
pub const PACK_FILE: &str = "bodies.gz";
/// Inline text bodies up to this size; larger ones go to a file.
const INLINE_TEXT_CAP: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CassetteError {
    #[error("no cassette at {0}: {INDEX_FILE} not found")]
    Missing(PathBuf),
    #[error("{path}:{line}: {why}")]
    Index {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("cassette body {path}: {why}")]
    Body { path: PathBuf, why: String },
    #[error("cassette {path}: {why}")]
    Meta { path: PathBuf, why: String },
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("cassette writer: {0}")]
    Writer(String),
}

/// A body as `index.jsonl` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodyRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Where the body starts in the uncompressed `bodies.gz`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// One line of `index.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    pub seq: u64,
    pub group: u64,
    pub method: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
    /// The role of `job_id` (from the recorded `/initialize`), for a person reading the index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_type: Option<String>,
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<BodyRef>,
    /// The headers a replay answers with (`content-type`, the simulated duration).
    #[serde(default)]
    pub response_headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<BodyRef>,
    /// Why the exchange did not complete, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A completed exchange as the proxy hands it to the writer.
#[derive(Debug, Clone)]
pub struct RecordedExchange {
    pub seq: u64,
    pub group: u64,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub job_id: Option<u64>,
    pub status: u16,
    pub request_content_type: Option<String>,
    pub request: Vec<u8>,
    pub response_headers: BTreeMap<String, String>,
    pub response: Vec<u8>,
    pub error: Option<String>,
}

fn is_frame(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|c| c.contains("application/octet-stream"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    crate::util::hex(&Sha256::digest(bytes))
}

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

/// Read and decompress `bodies.gz` (`None` when the cassette has no binary body).
fn load_pack(dir: &Path) -> Result<Option<Bytes>, CassetteError> {
    let path = dir.join(PACK_FILE);
    let bad = |why: String| CassetteError::Body {
        path: path.clone(),
        why,
    };
    let z = match std::fs::read(&path) {
        Ok(z) => z,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(format!("cannot read: {e}"))),
    };
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&z[..])
        .read_to_end(&mut out)
        .map_err(|e| bad(format!("corrupt or truncated gzip stream: {e}")))?;
    Ok(Some(Bytes::from(out)))
}

/// The body's exact bytes back from its description.
fn load_body(
    dir: &Path,
    body: &BodyRef,
    pack: Option<&Bytes>,
    line: &dyn Fn(String) -> CassetteError,
) -> Result<Bytes, CassetteError> {
    let bytes = match (&body.json, &body.text, body.offset) {
        (Some(v), None, None) => {
            Bytes::from(serde_json::to_vec(v).map_err(|e| line(format!("inline json: {e}")))?)
        }
        (None, Some(t), None) => Bytes::from(t.clone().into_bytes()),
        (None, None, Some(offset)) => {
            let path = dir.join(PACK_FILE);
            let bad = |why: String| CassetteError::Body {
                path: path.clone(),
                why,
            };
            let pack = pack.ok_or_else(|| bad("not found".into()))?;
            let end = offset.saturating_add(body.bytes);
            if end > pack.len() as u64 {
                return Err(line(format!(
                    "body at offset {offset} of {} bytes lies past the end of {PACK_FILE} ({} bytes)",
                    body.bytes,
                    pack.len()
                )));
            }
            let out = pack.slice(offset as usize..end as usize);
            if let Some(want) = &body.sha256 {
                let got = sha256_hex(&out);
                if &got != want {
                    return Err(bad(format!(
                        "the body at offset {offset} does not match its sha256 in {INDEX_FILE} (recorded {want}, found {got})"
                    )));
                }
            }
            out
        }
        _ => {
            return Err(line(
                "a body needs exactly one of `json`, `text` or `offset`".into(),
            ))
        }
    };
    if bytes.len() as u64 != body.bytes {
        return Err(line(format!(
            "inline body serialises to {} bytes, but `bytes` says {}",
            bytes.len(),
            body.bytes
        )));
    }
    Ok(bytes)
}

/// Job id -> job type, from the recorded `/initialize` exchanges (request `job_type`,
/// response `job_id`).
pub fn job_types<'a>(
    entries: impl Iterator<Item = (&'a str, &'a str, u16, Option<&'a Value>, Option<&'a Value>)>,
) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    for (method, path, status, request, response) in entries {
        if method != "POST" || path != "/initialize" || !(200..300).contains(&status) {
            continue;
        }
        let kind = request
            .and_then(|r| r.get("job_type"))
            .and_then(Value::as_str)
            .unwrap_or("training");
        if let Some(id) = response
            .and_then(|r| r.get("job_id"))
            .and_then(Value::as_u64)
        {
            out.insert(id, kind.to_string());
        }
    }
    out
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

/// A request or response body, read back whole.
#[derive(Debug, Clone)]
pub struct Body {
    pub content_type: Option<String>,
    pub bytes: Bytes,
}

/// One exchange of a loaded cassette.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Line of `index.jsonl` (1-based).
    pub line: usize,
    pub entry: IndexEntry,
    pub request: Option<Body>,
    pub response: Bytes,
}

/// A cassette read back and checked: every body decompressed and verified.
#[derive(Debug, Clone)]
pub struct Cassette {
    pub dir: PathBuf,
    /// `cassette.json`, when present.
    pub meta: Option<Value>,
    pub exchanges: Vec<Exchange>,
    /// Job id -> job type of the recorded jobs.
    pub job_types: BTreeMap<u64, String>,
}

impl Cassette {
    pub fn load(dir: &Path) -> Result<Cassette, CassetteError> {
        let index_path = dir.join(INDEX_FILE);
        let text = match std::fs::read_to_string(&index_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CassetteError::Missing(dir.to_path_buf()))
            }
            Err(e) => {
                return Err(CassetteError::Index {
                    path: index_path,
                    line: 0,
                    why: format!("cannot read: {e}"),
                })
            }
        };
        let meta_path = dir.join(META_FILE);
        let meta = match std::fs::read_to_string(&meta_path) {
            Ok(t) => Some(
                serde_json::from_str::<Value>(&t).map_err(|e| CassetteError::Meta {
                    path: meta_path.clone(),
                    why: format!("not JSON: {e}"),
                })?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(CassetteError::Meta {
                    path: meta_path,
                    why: format!("cannot read: {e}"),
                })
            }
        };
        let pack = load_pack(dir)?;
        let mut exchanges = Vec::new();
        let mut last_seq = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let at = |why: String| CassetteError::Index {
                path: index_path.clone(),
                line,
                why,
            };
            let entry: IndexEntry =
                serde_json::from_str(raw).map_err(|e| at(format!("not an exchange: {e}")))?;
            if entry.seq <= last_seq {
                return Err(at(format!(
                    "seq {} does not follow seq {last_seq} (exchanges are in arrival order)",
                    entry.seq
                )));
            }
            last_seq = entry.seq;
            let request = match &entry.request {
                None => None,
                Some(b) => Some(Body {
                    content_type: b.content_type.clone(),
                    bytes: load_body(dir, b, pack.as_ref(), &at)?,
                }),
            };
            let response = match &entry.response {
                None => Bytes::new(),
                Some(b) => load_body(dir, b, pack.as_ref(), &at)?,
            };
            exchanges.push(Exchange {
                line,
                entry,
                request,
                response,
            });
        }
        if exchanges.is_empty() {
            return Err(CassetteError::Index {
                path: index_path,
                line: 0,
                why: "the cassette holds no exchange".into(),
            });
        }
        let job_types = job_types(exchanges.iter().map(|x| {
            (
                x.entry.method.as_str(),
                x.entry.path.as_str(),
                x.entry.status,
                x.entry.request.as_ref().and_then(|b| b.json.as_ref()),
                x.entry.response.as_ref().and_then(|b| b.json.as_ref()),
            )
        }));
        Ok(Cassette {
            dir: dir.to_path_buf(),
            meta,
            exchanges,
            job_types,
        })
    }

    /// Total bytes of bodies (uncompressed).
    pub fn body_bytes(&self) -> u64 {
        self.exchanges
            .iter()
            .map(|x| {
                x.request.as_ref().map_or(0, |b| b.bytes.len() as u64) + x.response.len() as u64
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{encode, Node, Tensor};
    use serde_json::json;

    fn exchange(
        seq: u64,
        path: &str,
        req: (&str, Vec<u8>),
        resp: (&str, Vec<u8>),
    ) -> RecordedExchange {
        RecordedExchange {
            seq,
            group: seq,
            method: "POST".into(),
            path: path.into(),
            query: Some("job_id=1".into()),
            job_id: Some(1),
            status: 200,
            request_content_type: Some(req.0.into()),
            request: req.1,
            response_headers: [("content-type".to_string(), resp.0.to_string())].into(),
            response: resp.1,
            error: None,
        }
    }

    fn frame() -> Vec<u8> {
        encode(&Node::dict([
            (
                "ids",
                Node::from(Tensor::from_i64([2, 3], &[1, 2, 3, 4, 5, 6]).unwrap()),
            ),
            ("meta", Node::json(json!({"temperature": 1.0}))),
        ]))
        .unwrap()
    }

    fn write(dir: &Path) {
        let w = CassetteWriter::create(dir).unwrap();
        assert_eq!(w.begin(1), 1);
        let group = w.begin(2);
        assert_eq!(group, 1, "in flight with 1: same group");
        w.push(RecordedExchange {
            group,
            ..exchange(
                2,
                "/forward",
                ("application/octet-stream", frame()),
                ("application/octet-stream", frame()),
            )
        });
        w.push(RecordedExchange {
            path: "/initialize".into(),
            query: None,
            job_id: None,
            ..exchange(
                1,
                "/initialize",
                (
                    "application/json",
                    br#"{"model_name":"m","job_type":"sampling"}"#.to_vec(),
                ),
                ("application/json", br#"{"job_id":1}"#.to_vec()),
            )
        });
        // Not canonical JSON: kept as text so it replays byte for byte.
        w.push(exchange(
            3,
            "/step",
            ("application/json", b"{\"learning_rate\": null}".to_vec()),
            ("application/json", b"{ \"x\": 1.0e-6 }".to_vec()),
        ));
        assert_eq!(w.finish().unwrap(), 3);
        assert!(w.finish().is_err());
    }

    #[test]
    fn bodies_round_trip_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        let c = Cassette::load(dir.path()).unwrap();
        let seqs: Vec<u64> = c.exchanges.iter().map(|x| x.entry.seq).collect();
        assert_eq!(seqs, [1, 2, 3], "the index is in arrival order");
        assert_eq!(c.job_types.get(&1).map(String::as_str), Some("sampling"));
        assert_eq!(c.exchanges[1].entry.job_type.as_deref(), Some("sampling"));
        assert_eq!(c.exchanges[1].entry.group, 1);
        assert_eq!(
            &c.exchanges[1].request.as_ref().unwrap().bytes[..],
            &frame()[..]
        );
        assert_eq!(&c.exchanges[1].response[..], &frame()[..]);
        let (req, resp) = (
            c.exchanges[1].entry.request.as_ref().unwrap(),
            c.exchanges[1].entry.response.as_ref().unwrap(),
        );
        assert_eq!(req.offset, Some(0));
        assert_eq!(resp.offset, Some(req.bytes));
        assert_eq!(&c.exchanges[2].response[..], b"{ \"x\": 1.0e-6 }");
        assert!(c.exchanges[2]
            .entry
            .response
            .as_ref()
            .unwrap()
            .text
            .is_some());
        assert_eq!(
            c.exchanges[0].entry.response.as_ref().unwrap().json,
            Some(json!({"job_id": 1}))
        );
        assert!(
            CassetteWriter::create(dir.path()).is_err(),
            "never overwrites"
        );
    }

    #[test]
    fn a_corrupt_body_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        let f = dir.path().join(PACK_FILE);
        let z = std::fs::read(&f).unwrap();
        std::fs::write(&f, &z[..z.len() / 2]).unwrap();
        let e = Cassette::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("bodies.gz") && e.contains("truncated"), "{e}");

        // A body that is not what the index says: named with its offset.
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_end(&mut raw)
            .unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        std::fs::write(&f, gz.finish().unwrap()).unwrap();
        let e = Cassette::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("bodies.gz") && e.contains("sha256"), "{e}");

        std::fs::remove_file(&f).unwrap();
        let e = Cassette::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("bodies.gz: not found"), "{e}");
    }

    #[test]
    fn a_bad_index_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        let idx = dir.path().join(INDEX_FILE);
        let mut text = std::fs::read_to_string(&idx).unwrap();
        text.push_str("{\"seq\": 4, \"oops\": 1}\n");
        std::fs::write(&idx, text).unwrap();
        let e = Cassette::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("index.jsonl:4:"), "{e}");
        let e = Cassette::load(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no cassette at"), "{e}");
    }
}
