//! A cassette read back: the index parsed, every body decompressed and verified.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde_json::Value;

use super::{
    job_types, sha256_hex, BodyRef, CassetteError, IndexEntry, INDEX_FILE, META_FILE, PACK_FILE,
};

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
