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

//!
//! By part: this file the format (file names, the index's entries, the error); `write.rs` the
//! writer the recording proxy feeds; `read.rs` a cassette loaded back and checked.

mod read;
#[cfg(test)]
mod tests;
mod write;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::fsx::FsError;

pub use read::{Body, Cassette, Exchange};
pub use write::CassetteWriter;

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
