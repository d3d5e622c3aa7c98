//! The replay backend: serves a recorded cassette back, byte for byte, and checks that every
//! request matches the one recorded in its place. A client-side change (the adapter, the
//! driver) is so regression-tested on CPU against the traffic of a real GPU run.
//!
//! Requests are matched per stream, a stream being (method, path, job role): `POST /forward`
//! on the training job is one stream, `POST /generate` on the sampling job another. Job ids
//! are answered as recorded (`/initialize` replays its `job_id`), so a deterministic driver
//! sends the same ids; a stream is keyed by the job's role, so a changed id still finds its
//! recording. Within a stream the recorded order is kept, except among the calls of one burst
//! (calls of the stream recorded back to back, or in flight together: see [`bursts`]), which
//! may arrive in any order; among those the request that matches exactly is served, else the
//! closest one.
//!
//! A request that differs from its recording is a mismatch: it is served the recorded answer
//! anyway (the run goes on, every mismatch is counted) and named with its first differing key,
//! e.g. `replay mismatch at POST /forward-backward call 3 (job 2): meta.temperature: recorded
//! 1.0, got <absent>`. A request the recording has no place for (an extra call, an unknown
//! route) is answered `409` with that message, so the driver fails there; only the rlharness
//! extension `/weight-digest`, when the cassette holds none, is answered `404 Not Found` as a
//! server without it would (a cassette of a real server, or of a run before the route). Recorded exchanges
//! never requested are mismatches too. The outcome (`ReplayOutcome`) is this backend's own; the
//! runner keeps it in `run.json` as a `rundir::ReplayRecord`, which the judge turns into the
//! rule `replay:requests match the cassette` (`judge::replay_rule`).

use rlharness_arctic::cassette;
pub(crate) mod diff;
mod install;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

use crate::model::rundir::ReplayRecord;
pub(crate) use cassette::{Cassette, CassetteError, CassetteWriter, RecordedExchange};
use diff::{differences, request_view, Difference};
pub(crate) use install::{install_cassette, InstallError};
use rlharness_arctic::wire::digest::WEIGHT_DIGEST_ROUTE;

/// How many differences of one request are counted (the first is the one shown).
const DIFF_LIMIT: usize = 64;

/// Where a scenario's `backend.cassette` points: relative to the scenario file's folder.
pub(crate) fn resolve_cassette(scenario_file: &Path, cassette: &str) -> PathBuf {
    let p = Path::new(cassette);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    scenario_file
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join(p)
}

/// One request that did not match its recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// `POST /forward-backward`.
    pub(crate) route: String,
    /// 1-based index of the call within its stream.
    pub(crate) call: usize,
    /// The recorded job id (`None` for routes without a job).
    pub job: Option<u64>,
    /// The id the request carried, when it differs from the recorded one.
    pub(crate) got_job: Option<u64>,
    pub what: MismatchKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum MismatchKind {
    /// The body differs: the first difference and how many were found (capped).
    Differs { first: Difference, count: usize },
    /// The request body could not be read (e.g. a broken frame).
    Unreadable(String),
    /// The recording holds no such call.
    Unexpected { recorded_calls: usize },
    /// Recorded, never requested.
    NeverRequested,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "replay mismatch at {} call {}", self.route, self.call)?;
        match (self.job, self.got_job) {
            (Some(j), Some(g)) => write!(f, " (job {j}, requested as job {g})")?,
            (Some(j), None) | (None, Some(j)) => write!(f, " (job {j})")?,
            (None, None) => {}
        }
        match &self.what {
            MismatchKind::Differs { first, count } => {
                write!(f, ": {first}")?;
                if *count > 1 {
                    let more = if *count >= DIFF_LIMIT { "+" } else { "" };
                    write!(f, " (and {}{more} more differences)", count - 1)?;
                }
                Ok(())
            }
            MismatchKind::Unreadable(why) => write!(f, ": request body {why}"),
            MismatchKind::Unexpected { recorded_calls } => write!(
                f,
                ": not in the recording (it holds {recorded_calls} such call{})",
                if *recorded_calls == 1 { "" } else { "s" }
            ),
            MismatchKind::NeverRequested => write!(f, ": recorded but never requested"),
        }
    }
}

/// How a replay went: what was served and every mismatch, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplayOutcome {
    pub(crate) cassette: PathBuf,
    pub(crate) recorded: usize,
    pub served: usize,
    pub mismatches: Vec<Mismatch>,
}

impl ReplayOutcome {
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }

    /// What `run.json` keeps of this replay, for the judge (`judge::judge_run`).
    pub(crate) fn record(&self) -> ReplayRecord {
        ReplayRecord {
            cassette: self.cassette.display().to_string(),
            recorded: self.recorded,
            served: self.served,
            mismatches: self.mismatches.iter().map(ToString::to_string).collect(),
        }
    }

    /// The first mismatch, and how many there were.
    pub fn summary(&self) -> String {
        self.record().summary()
    }
}

/// (method, path, who): `who` is the job role, `job N` for an id the recording does not know,
/// or `-` for routes without a job.
type StreamKey = (String, String, String);

struct ReplayState {
    consumed: Vec<bool>,
    /// Indices into the cassette's exchanges, per stream, in recorded order.
    streams: HashMap<StreamKey, Vec<usize>>,
    /// Requests seen per stream.
    asked: HashMap<StreamKey, usize>,
    served: usize,
    mismatches: Vec<Mismatch>,
}

struct Shared {
    cassette: Cassette,
    /// The comparable view of each recorded request (precomputed, redacted).
    views: Vec<Value>,
    /// The burst of each recorded exchange: the calls of one stream a client may send in any
    /// order (see [`bursts`]).
    bursts: Vec<usize>,
    state: Mutex<ReplayState>,
}

/// Access to a running replay.
#[derive(Clone)]
pub struct ReplayHandle {
    shared: Arc<Shared>,
}

impl ReplayHandle {
    /// What happened so far; recorded exchanges not yet requested count as never requested.
    pub fn outcome(&self) -> ReplayOutcome {
        let s = crate::model::util::lock(&self.shared.state);
        let mut mismatches = s.mismatches.clone();
        let mut never: Vec<(usize, Mismatch)> = Vec::new();
        for (key, idx) in &s.streams {
            for (pos, &i) in idx.iter().enumerate() {
                if !s.consumed[i] {
                    let e = &self.shared.cassette.exchanges[i].entry;
                    never.push((
                        i,
                        Mismatch {
                            route: format!("{} {}", key.0, key.1),
                            call: pos + 1,
                            job: e.job_id,
                            got_job: None,
                            what: MismatchKind::NeverRequested,
                        },
                    ));
                }
            }
        }
        never.sort_by_key(|(i, _)| *i);
        mismatches.extend(never.into_iter().map(|(_, m)| m));
        ReplayOutcome {
            cassette: self.shared.cassette.dir.clone(),
            recorded: self.shared.cassette.exchanges.len(),
            served: s.served,
            mismatches,
        }
    }
}

fn job_from(uri: &Uri) -> Option<u64> {
    let q = uri.query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("job_id="))
            .and_then(|v| v.parse().ok())
    });
    q.or_else(|| {
        uri.path()
            .strip_prefix("/job/")
            .and_then(|id| id.parse().ok())
    })
}

/// The query without `job_id` (the job is compared by role).
fn other_query(query: Option<&str>) -> Value {
    let rest: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("job_id="))
        .collect();
    if rest.is_empty() {
        Value::Null
    } else {
        Value::String(rest.join("&"))
    }
}

fn route_path(path: &str) -> String {
    if path.starts_with("/job/") {
        "/job/{job_id}".to_string()
    } else {
        path.to_string()
    }
}

impl Shared {
    fn who(&self, path: &str, job: Option<u64>, body: &Value) -> String {
        if path == "/initialize" {
            return body
                .get("job_type")
                .and_then(Value::as_str)
                .unwrap_or("training")
                .to_string();
        }
        match job {
            Some(id) => self
                .cassette
                .job_types
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("job {id}")),
            None => "-".to_string(),
        }
    }
}

fn recorded_view(dir: &Path, x: &cassette::Exchange) -> Result<Value, CassetteError> {
    let body = match &x.request {
        None => Value::Null,
        Some(b) => request_view(b.content_type.as_deref(), &b.bytes).map_err(|why| {
            CassetteError::Index {
                path: dir.join(cassette::INDEX_FILE),
                line: x.line,
                why: format!("recorded request {why}"),
            }
        })?,
    };
    Ok(json!({"query": other_query(x.entry.query.as_deref()), "body": body}))
}

/// Build the replay router over a loaded cassette.
pub(crate) fn router(cassette: Cassette) -> Result<(Router, ReplayHandle), CassetteError> {
    let mut views = Vec::with_capacity(cassette.exchanges.len());
    for x in &cassette.exchanges {
        views.push(recorded_view(&cassette.dir, x)?);
    }
    let n = cassette.exchanges.len();
    let mut shared = Shared {
        cassette,
        views,
        bursts: Vec::new(),
        state: Mutex::new(ReplayState {
            consumed: vec![false; n],
            streams: HashMap::new(),
            asked: HashMap::new(),
            served: 0,
            mismatches: Vec::new(),
        }),
    };
    let mut streams: HashMap<StreamKey, Vec<usize>> = HashMap::new();
    for i in 0..n {
        // The body's view sits under "body" for matching; `who` reads the JSON body itself.
        let key = {
            let e = &shared.cassette.exchanges[i].entry;
            (
                e.method.clone(),
                route_path(&e.path),
                shared.who(&e.path, e.job_id, &shared.views[i]["body"]),
            )
        };
        streams.entry(key).or_default().push(i);
    }
    let keys: Vec<StreamKey> = {
        let mut k = vec![None; n];
        for (key, idx) in &streams {
            for &i in idx {
                k[i] = Some(key.clone());
            }
        }
        k.into_iter().flatten().collect()
    };
    shared.bursts = bursts(&keys, &shared.cassette);
    shared
        .state
        .get_mut()
        .unwrap_or_else(|p| p.into_inner())
        .streams = streams;
    let shared = Arc::new(shared);
    let router = Router::new()
        .fallback(serve_one)
        .layer(DefaultBodyLimit::max(1 << 31))
        .with_state(shared.clone());
    Ok((router, ReplayHandle { shared }))
}

/// Which recorded calls of a stream a client may send in any order: those of one burst. An
/// exchange joins the burst of the exchange just before it when both are of the same stream
/// (the 64 `/generate` calls of a step arrive back to back, in whatever order the client's
/// concurrency gives), or the stream's last burst when they were in flight together (the
/// cassette's `group`, for concurrent calls of several streams interleaved). Any other
/// exchange starts a new burst, so calls separated by other traffic keep their order.
fn bursts(keys: &[StreamKey], cassette: &Cassette) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(keys.len());
    let mut last_of_stream: HashMap<&StreamKey, (usize, u64)> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let group = cassette.exchanges[i].entry.group;
        let burst = if i > 0 && keys[i - 1] == *key {
            out[i - 1]
        } else {
            match last_of_stream.get(key) {
                Some(&(b, g)) if g == group => b,
                _ => i,
            }
        };
        out.push(burst);
        last_of_stream.insert(key, (burst, group));
    }
    out
}

fn error_response(status: StatusCode, detail: &str) -> Response {
    let mut resp = (status, json!({ "detail": detail }).to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

async fn serve_one(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let job = job_from(&uri);
    let view = request_view(ct, &body);
    let body_view = view.as_ref().cloned().unwrap_or(Value::Null);
    let path = uri.path();
    let key: StreamKey = (
        method.to_string(),
        route_path(path),
        shared.who(path, job, &body_view),
    );
    let route = format!("{} {}", key.0, key.1);
    let incoming = json!({"query": other_query(uri.query()), "body": body_view});

    let mut s = crate::model::util::lock(&shared.state);
    let asked = {
        let n = s.asked.entry(key.clone()).or_insert(0);
        *n += 1;
        *n
    };
    let stream = s.streams.get(&key).cloned().unwrap_or_default();
    if stream.is_empty() && key.1 == WEIGHT_DIGEST_ROUTE {
        // The rlharness extension, absent from a cassette of a real server or of a run before
        // it: answered as a server without the route answers, and no mismatch.
        return error_response(StatusCode::NOT_FOUND, "Not Found");
    }
    let first_open = stream.iter().position(|&i| !s.consumed[i]);
    let Some(first_open) = first_open else {
        let m = Mismatch {
            route,
            call: asked,
            job: None,
            got_job: job,
            what: MismatchKind::Unexpected {
                recorded_calls: stream.len(),
            },
        };
        let detail = m.to_string();
        s.mismatches.push(m);
        return error_response(StatusCode::CONFLICT, &detail);
    };
    let burst = shared.bursts[stream[first_open]];
    // Candidates: the open recordings of this stream in the same burst.
    let candidates: Vec<usize> = stream[first_open..]
        .iter()
        .enumerate()
        .filter(|(_, &i)| !s.consumed[i] && shared.bursts[i] == burst)
        .map(|(k, _)| first_open + k)
        .collect();
    let (pos, diffs) = match &view {
        Err(_) => (first_open, Vec::new()),
        Ok(_) => candidates
            .iter()
            .map(|&pos| {
                let d = differences(&shared.views[stream[pos]], &incoming, DIFF_LIMIT);
                (pos, d)
            })
            .min_by_key(|(pos, d)| (d.len(), *pos))
            .unwrap_or((first_open, Vec::new())),
    };
    let i = stream[pos];
    s.consumed[i] = true;
    s.served += 1;
    let x = &shared.cassette.exchanges[i];
    let recorded_job = x.entry.job_id;
    let mismatch = |what| Mismatch {
        route: route.clone(),
        call: pos + 1,
        job: recorded_job,
        got_job: job.filter(|j| Some(*j) != recorded_job),
        what,
    };
    match view {
        Err(why) => s
            .mismatches
            .push(mismatch(MismatchKind::Unreadable(why.to_string()))),
        Ok(_) if !diffs.is_empty() => {
            let count = diffs.len();
            let first = strip_body_prefix(diffs.into_iter().next().expect("non-empty"));
            s.mismatches
                .push(mismatch(MismatchKind::Differs { first, count }));
        }
        Ok(_) => {}
    }
    drop(s);

    let status = StatusCode::from_u16(x.entry.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, x.response.clone()).into_response();
    let h = resp.headers_mut();
    h.remove(header::CONTENT_TYPE);
    for (k, v) in &x.entry.response_headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            h.insert(k, v);
        }
    }
    resp
}

/// Paths inside the comparable view start with `body.` or `query`; a person thinks of the
/// body's keys as the request's own (`meta.temperature`).
fn strip_body_prefix(mut d: Difference) -> Difference {
    if let Some(rest) = d.path.strip_prefix("body.") {
        d.path = rest.to_string();
    } else if d.path == "body" {
        d.path = String::new();
    }
    d
}

/// A replay server bound to a port.
pub struct RunningReplay {
    pub url: String,
    pub handle: ReplayHandle,
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

/// Why a replay server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplayStartError {
    #[error(transparent)]
    Cassette(#[from] CassetteError),
    #[error("cannot bind the replay port: {0}")]
    Bind(#[source] std::io::Error),
    #[error("cannot read the replay port: {0}")]
    Addr(#[source] std::io::Error),
}

/// Load nothing, bind `127.0.0.1:0` and serve `cassette` until `stop` fires.
pub async fn start(cassette: Cassette) -> Result<RunningReplay, ReplayStartError> {
    let (router, handle) = router(cassette)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(ReplayStartError::Bind)?;
    let addr = listener.local_addr().map_err(ReplayStartError::Addr)?;
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await;
    });
    Ok(RunningReplay {
        url: format!("http://{addr}"),
        handle,
        stop,
        task,
    })
}

#[cfg(test)]
mod tests;
