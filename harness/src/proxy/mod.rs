//! The recording reverse proxy between a driver and an Arctic server: what the server received
//! is observed here, never assumed.
//!
//! Every request/response pair appends one line to `wire.jsonl` when it completes:
//! `{"seq", "time", "method", "route", "job_id", "status", "duration_s", "sim_seconds"?,
//!   "request", "response", "error"?, "server_error"?}`. `error` says why the proxy cut or
//! answered an exchange itself; `server_error` why the harness's own server (mock, torch)
//! refused it when its answer, like the real server's, does not say (its `x-rlharness-error`
//! header, on a plain-text 500 or a `Field required` 422). `seq` counts requests in arrival
//! order, so under concurrency lines may appear out of `seq` order. A body is summarised as
//! - `null` when empty;
//! - `{"bytes": n, "json": value}` when it is JSON of at most 1 MiB (Python's `NaN`,
//!   `Infinity`, `-Infinity` read, and recorded as `{"$float": "NaN"}` etc., apart from `null`);
//! - `{"bytes": n, "truncated": true}` for larger JSON or text;
//! - `{"bytes": n, "dssst1": tree}` for a DSSST1 frame (`application/octet-stream`): the tree from
//!   its header alone, each tensor as `{"dtype", "shape"}`, every JSON value kept (a tuple as
//!   `{"$tuple": [...]}`, a non-finite float as `{"$float": "NaN"}`);
//!   `{"bytes": n, "dssst1_error": why}` when the header does not read, and both `dssst1` and
//!   `dssst1_error` when the header reads but the body is not the length it announces (a
//!   truncated frame): the bytes pass through unchanged either way;
//! - `{"bytes": n, "content_type", "text"}` for anything else;
//!
//! plus `"complete": false` when the stream was cut. Bodies stream through: the proxy keeps at
//! most the frame header (up to 64 MiB) or 1 MiB of JSON per body.
//!
//! Each JobConfig of a successful `POST /initialize` is stored verbatim (unknown keys included)
//! in `server_config.json`, keyed by job type.

mod capture;

use std::collections::BTreeMap;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::backend::replay::{CassetteWriter, RecordedExchange};
use crate::events::{EventSender, RunEvent};
use crate::fsx::{self, FsError};
use crate::wire::api::{ERROR_REASON_HEADER, SIM_DURATION_HEADER};

use capture::{lock, Capture, SharedCapture, TeeBody};
pub(crate) use capture::{BoxError, JSON_RECORD_CAP};

/// How long `shutdown` lets in-flight exchanges finish before cutting them.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// `http://host:port` of the Arctic server.
    pub upstream: String,
    /// Folder for `wire.jsonl` and `server_config.json`.
    pub record_dir: PathBuf,
    /// Largest request or response body, in bytes.
    pub body_limit: u64,
    /// Time an exchange may take from request to the end of the response body.
    pub request_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid upstream URL {url:?}: {why}")]
    Upstream { url: String, why: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("proxy record: {0}")]
    Record(#[from] FsError),
    #[error("cannot wait for Ctrl-C: {0}")]
    Signal(#[source] std::io::Error),
}

type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// What the hang report shows: the requests still open and the last one that finished.
#[derive(Default)]
struct Activity {
    in_flight: BTreeMap<u64, (String, Instant)>,
    last_done: Option<(String, u16, f64, Instant)>,
}

/// The files a proxy writes, shared by all exchanges.
struct Recorder {
    wire_path: PathBuf,
    wire: Mutex<File>,
    config_path: PathBuf,
    configs: Mutex<Map<String, Value>>,
    events: Option<EventSender>,
    /// First write error: recorded once as a warning, the traffic keeps flowing.
    failed: Mutex<Option<String>>,
}

impl Recorder {
    fn open(dir: &Path, events: Option<EventSender>) -> Result<Recorder, FsError> {
        fsx::create_dir_all(dir)?;
        let wire_path = dir.join("wire.jsonl");
        let wire = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&wire_path)
            .map_err(|source| FsError {
                action: "open",
                path: wire_path.clone(),
                source,
            })?;
        Ok(Recorder {
            wire_path,
            wire: Mutex::new(wire),
            config_path: dir.join("server_config.json"),
            configs: Mutex::new(Map::new()),
            events,
            failed: Mutex::new(None),
        })
    }

    fn report(&self, e: FsError) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed.is_none() {
            let msg = format!("proxy could not record: {e}");
            tracing::warn!("{msg}");
            if let Some(tx) = &self.events {
                let _ = tx.send(RunEvent::Warning(msg.clone()));
            }
            *failed = Some(msg);
        }
    }

    fn report_cassette(&self, why: String) {
        let msg = format!("proxy could not write the cassette: {why}");
        tracing::warn!("{msg}");
        if let Some(tx) = &self.events {
            let _ = tx.send(RunEvent::Warning(msg));
        }
    }

    fn line(&self, record: &Value) {
        let line = record.to_string();
        let mut f = self.wire.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = fsx::append_line(&mut f, &self.wire_path, &line) {
            self.report(e);
        }
    }

    fn job_config(&self, config: Value) {
        let job_type = config
            .get("job_type")
            .and_then(Value::as_str)
            .unwrap_or("training")
            .to_string();
        let mut configs = self.configs.lock().unwrap_or_else(|p| p.into_inner());
        configs.insert(job_type, config);
        let text = match serde_json::to_string_pretty(&*configs) {
            Ok(t) => t,
            Err(_) => return, // a Map of Values always serialises
        };
        if let Err(e) = fsx::write_atomic(&self.config_path, text.as_bytes()) {
            self.report(e);
        }
    }
}

struct Shared {
    upstream: Uri,
    upstream_text: String,
    cfg: ProxyConfig,
    client: Client<HttpConnector, ProxyBody>,
    recorder: Recorder,
    seq: AtomicU64,
    activity: Mutex<Activity>,
    /// When recording a cassette: whole bodies go here as each exchange completes.
    cassette: Option<Arc<CassetteWriter>>,
}

impl Shared {
    fn activity(&self) -> std::sync::MutexGuard<'_, Activity> {
        self.activity.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running proxy. Dropping the handle without [`ProxyHandle::shutdown`] also stops it.
pub struct ProxyHandle {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl ProxyHandle {
    /// Stop accepting, let in-flight exchanges finish (up to 10 s), and leave the record
    /// complete: every exchange cut here still gets its line.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        {
            let f = self
                .shared
                .recorder
                .wire
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let _ = f.sync_data();
        }
        if let Some(c) = self.shared.cassette.clone() {
            // The writer's index is written from its own thread: wait for it off the runtime.
            let dir = c.dir().to_path_buf();
            match tokio::task::spawn_blocking(move || c.finish()).await {
                Ok(Ok(n)) => tracing::info!("cassette of {n} exchanges in {}", dir.display()),
                Ok(Err(e)) => self.shared.recorder.report_cassette(e.to_string()),
                Err(e) => self
                    .shared
                    .recorder
                    .report_cassette(format!("the cassette writer crashed: {e}")),
            }
        }
    }

    /// The oldest request still open (`POST /forward-backward?job_id=3 (in flight 12.0 s)`), or
    /// else the last one answered: what a hang report names as the culprit.
    pub fn last_activity(&self) -> Option<String> {
        let a = self.shared.activity();
        if let Some((desc, started)) = a.in_flight.values().next() {
            let more = a.in_flight.len() - 1;
            let mut s = format!(
                "{desc} (in flight {:.1} s)",
                started.elapsed().as_secs_f64()
            );
            if more > 0 {
                s.push_str(&format!(", {more} more in flight"));
            }
            return Some(s);
        }
        a.last_done.as_ref().map(|(desc, status, dur, end)| {
            format!(
                "{desc} answered {status} in {dur:.2} s, {:.1} s ago",
                end.elapsed().as_secs_f64()
            )
        })
    }
}

fn parse_upstream(url: &str) -> Result<Uri, ProxyError> {
    let bad = |why: &str| ProxyError::Upstream {
        url: url.to_string(),
        why: why.to_string(),
    };
    let uri: Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// upstreams are supported"));
    }
    if uri.authority().is_none() {
        return Err(bad("no host:port"));
    }
    Ok(uri)
}

/// Start proxying connections from `listener` to `cfg.upstream`.
pub async fn start(
    listener: TcpListener,
    cfg: ProxyConfig,
    events: Option<EventSender>,
) -> Result<ProxyHandle, ProxyError> {
    start_with(listener, cfg, events, None).await
}

/// [`start`], and keep every exchange whole in a cassette (`rlharness record`): the bodies
/// still stream through, but each is also kept in memory until its exchange completes.
pub(crate) async fn start_recording(
    listener: TcpListener,
    cfg: ProxyConfig,
    events: Option<EventSender>,
    cassette: Arc<CassetteWriter>,
) -> Result<ProxyHandle, ProxyError> {
    start_with(listener, cfg, events, Some(cassette)).await
}

async fn start_with(
    listener: TcpListener,
    cfg: ProxyConfig,
    events: Option<EventSender>,
    cassette: Option<Arc<CassetteWriter>>,
) -> Result<ProxyHandle, ProxyError> {
    let upstream = parse_upstream(&cfg.upstream)?;
    let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
        addr: "the given listener".into(),
        source,
    })?;
    let recorder = Recorder::open(&cfg.record_dir, events)?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(cfg.request_timeout));
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let shared = Arc::new(Shared {
        upstream_text: cfg.upstream.trim_end_matches('/').to_string(),
        upstream,
        cfg,
        client,
        recorder,
        seq: AtomicU64::new(0),
        activity: Mutex::new(Activity::default()),
        cassette,
    });
    let (stop, stop_rx) = watch::channel(false);
    let server = tokio::spawn(serve(listener, shared.clone(), stop_rx));
    Ok(ProxyHandle {
        addr,
        shared,
        stop,
        server,
    })
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!("proxy accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let mut stop = stop.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(exchange(shared, req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => {}
                        _ = stop.changed() => {
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let drained =
        tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.shutdown().await;
    }
}

fn job_id(uri: &Uri) -> Value {
    let from_query = uri.query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("job_id="))
            .map(str::to_string)
    });
    let from_path = uri
        .path()
        .strip_prefix("/job/")
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .map(str::to_string);
    match from_query.or(from_path) {
        Some(id) => id
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or(Value::String(id)),
        None => Value::Null,
    }
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Hop-by-hop headers belong to one connection and are not forwarded (RFC 9110 7.6.1).
fn strip_hop_headers(headers: &mut HeaderMap) {
    for h in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(h);
    }
    headers.remove("keep-alive");
}

fn detail_response(status: StatusCode, detail: &str) -> Response<ProxyBody> {
    let body = json!({ "detail": detail }).to_string();
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| -> BoxError { match never {} })
            .boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Words for what went wrong talking to the upstream.
fn describe_upstream_error(e: &hyper_util::client::legacy::Error) -> String {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return match io.kind() {
                ConnectionRefused => "refused the connection".into(),
                ConnectionReset | ConnectionAborted | BrokenPipe => "reset the connection".into(),
                TimedOut => "timed out connecting".into(),
                _ => format!("failed: {io}"),
            };
        }
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() {
                return "closed the connection before answering".into();
            }
            if h.is_parse() {
                return format!("sent an unreadable response ({h})");
            }
        }
        src = s.source();
    }
    if e.is_connect() {
        return format!("could not be reached ({e})");
    }
    format!("failed: {e}")
}

/// One request/response pair: its record is written exactly once, when it completes.
struct Exchange {
    shared: Arc<Shared>,
    seq: u64,
    time: String,
    started: Instant,
    method: Method,
    route: String,
    job_id: Value,
    request: SharedCapture,
    /// For a cassette: the query, the concurrency group, the headers a replay answers with,
    /// and the body the proxy answered itself with.
    query: Option<String>,
    group: u64,
    response_headers: BTreeMap<String, String>,
    reply_body: Option<Vec<u8>>,
    /// Why the harness's own server refused the request (its `x-rlharness-error` header).
    server_error: Option<String>,
}

impl Exchange {
    fn finish(
        self,
        status: u16,
        response: Option<&SharedCapture>,
        sim_seconds: Option<f64>,
        error: Option<String>,
    ) {
        let duration_s = self.started.elapsed().as_secs_f64();
        let mut req = lock(&self.request);
        let mut resp = response.map(lock);
        let error = error
            .or_else(|| resp.as_ref().and_then(|r| r.error.clone()))
            .or_else(|| req.error.clone().filter(|_| !req.complete));
        let mut rec = json!({
            "seq": self.seq,
            "time": self.time,
            "method": self.method.as_str(),
            "route": self.route,
            "job_id": self.job_id,
            "status": status,
            "duration_s": duration_s,
        });
        let o = rec.as_object_mut().expect("json! object literal");
        if let Some(s) = sim_seconds {
            o.insert("sim_seconds".into(), json!(s));
        }
        o.insert("request".into(), req.summary());
        o.insert(
            "response".into(),
            resp.as_ref().map(|r| r.summary()).unwrap_or(Value::Null),
        );
        if let Some(e) = &error {
            o.insert("error".into(), e.clone().into());
        }
        if let Some(e) = &self.server_error {
            o.insert("server_error".into(), e.clone().into());
        }
        if let Some(c) = &self.shared.cassette {
            c.push(RecordedExchange {
                seq: self.seq,
                group: self.group,
                method: self.method.to_string(),
                path: self.route.clone(),
                query: self.query.clone(),
                job_id: self.job_id.as_u64(),
                status,
                request_content_type: req.content_type().map(str::to_string),
                request: req.take_whole(),
                response_headers: self.response_headers.clone(),
                response: match resp.as_mut() {
                    Some(r) => r.take_whole(),
                    None => self.reply_body.clone().unwrap_or_default(),
                },
                error: error.clone(),
            });
        }
        let recorder = &self.shared.recorder;
        recorder.line(&rec);
        let cleanly_done = resp.as_ref().is_some_and(|r| r.complete);
        if self.method == Method::POST
            && self.route == "/initialize"
            && (200..300).contains(&status)
            && cleanly_done
        {
            if let Some(config) = req.json() {
                recorder.job_config(config);
            }
        }
        if let Some(tx) = &recorder.events {
            let _ = tx.send(RunEvent::Request {
                route: self.route.clone(),
                status,
                duration_s,
            });
        }
        let mut a = self.shared.activity();
        if let Some((desc, _)) = a.in_flight.remove(&self.seq) {
            a.last_done = Some((desc, status, duration_s, Instant::now()));
        }
    }

    /// Answer the driver ourselves (limit, upstream failure) and record it.
    fn reply(mut self, status: StatusCode, detail: String) -> Response<ProxyBody> {
        let resp = detail_response(status, &detail);
        if self.shared.cassette.is_some() {
            self.response_headers
                .insert("content-type".into(), "application/json".into());
            self.reply_body = Some(json!({ "detail": detail }).to_string().into_bytes());
        }
        self.finish(status.as_u16(), None, None, Some(detail));
        resp
    }
}

/// Why the proxy answers the driver itself (a limit, an upstream failure): the status and the
/// detail it records.
type Refusal = (StatusCode, String);

/// One request through the proxy: forwarded upstream, its answer relayed back, the pair
/// recorded once it completes; or answered by the proxy itself when it cannot be.
async fn exchange(shared: Arc<Shared>, req: Request<Incoming>) -> Response<ProxyBody> {
    let deadline = tokio::time::Instant::now() + shared.cfg.request_timeout;
    let (parts, body) = req.into_parts();
    let ex = Exchange::begin(shared.clone(), &parts);
    let on = format!("{} {}", parts.method, ex.route);
    let request = ex.request.clone();
    let upstream_req = match forward_request(&shared, &request, parts, body, deadline, &on).await {
        Ok(r) => r,
        Err((status, detail)) => return ex.reply(status, detail),
    };
    match send_upstream(&shared, &request, upstream_req, deadline, &on).await {
        Ok(resp) => relay_response(ex, resp, deadline, &on),
        Err((status, detail)) => ex.reply(status, detail),
    }
}

/// The path and query of a request's URI (`/` when it has none).
fn path_and_query(uri: &Uri) -> String {
    uri.path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into())
}

impl Exchange {
    /// Start the record of a request that just arrived: its number, its time, its place among
    /// the requests in flight and (with a cassette) its concurrency group.
    fn begin(shared: Arc<Shared>, parts: &hyper::http::request::Parts) -> Exchange {
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let started = Instant::now();
        let route = parts.uri.path().to_string();
        let desc = format!("{} {}", parts.method, path_and_query(&parts.uri));
        shared.activity().in_flight.insert(seq, (desc, started));
        let request = Capture::new(content_type(&parts.headers), shared.cfg.body_limit);
        let group = match &shared.cassette {
            Some(c) => {
                lock(&request).keep_whole();
                c.begin(seq)
            }
            None => 0,
        };
        Exchange {
            shared,
            seq,
            started,
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            method: parts.method.clone(),
            route,
            job_id: job_id(&parts.uri),
            request,
            query: parts.uri.query().map(str::to_string),
            group,
            response_headers: BTreeMap::new(),
            reply_body: None,
            server_error: None,
        }
    }
}

/// The driver's request made into the upstream's: within the body limit, addressed to the
/// upstream, without hop-by-hop headers, its body recorded into `request` as it goes (a small
/// JSON body read whole first, by `deadline`).
async fn forward_request(
    shared: &Shared,
    request: &SharedCapture,
    mut parts: hyper::http::request::Parts,
    body: Incoming,
    deadline: tokio::time::Instant,
    on: &str,
) -> Result<Request<ProxyBody>, Refusal> {
    let limit = shared.cfg.body_limit;
    let upstream = &shared.upstream_text;
    if let Some(n) = content_length(&parts.headers).filter(|&n| n > limit) {
        lock(request).total = n;
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body of {n} bytes exceeds the proxy body limit of {limit} bytes on {on}"
            ),
        ));
    }

    let path_and_query = path_and_query(&parts.uri);
    let mut uri_parts = shared.upstream.clone().into_parts();
    uri_parts.path_and_query = path_and_query.parse().ok();
    parts.uri = Uri::from_parts(uri_parts).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("cannot forward {path_and_query} to upstream {upstream}: {e}"),
        )
    })?;
    strip_hop_headers(&mut parts.headers);
    parts.headers.remove(header::HOST);
    let small = content_length(&parts.headers).is_some_and(|n| n <= JSON_RECORD_CAP as u64);
    let body = TeeBody::new(body, request.clone());
    let body = if small && !lock(request).is_frame() {
        // Read small JSON bodies whole before forwarding, so the record keeps what the driver
        // sent even when the upstream never reads it (refused, reset).
        match tokio::time::timeout_at(deadline, body.collect()).await {
            Ok(Ok(all)) => Full::new(all.to_bytes())
                .map_err(|never| -> BoxError { match never {} })
                .boxed_unsync(),
            Ok(Err(e)) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body of {on}: {e}"),
                ))
            }
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body of {on} did not arrive within {:.1} s",
                        shared.cfg.request_timeout.as_secs_f64()
                    ),
                ))
            }
        }
    } else {
        body.boxed_unsync()
    };
    Ok(Request::from_parts(parts, body))
}

/// Send the request upstream and wait for its answer's head until `deadline`.
async fn send_upstream(
    shared: &Shared,
    request: &SharedCapture,
    upstream_req: Request<ProxyBody>,
    deadline: tokio::time::Instant,
    on: &str,
) -> Result<Response<Incoming>, Refusal> {
    let limit = shared.cfg.body_limit;
    let upstream = &shared.upstream_text;
    let timeout_s = shared.cfg.request_timeout.as_secs_f64();
    let answer = tokio::time::timeout_at(deadline, shared.client.request(upstream_req)).await;
    match answer {
        Err(_) => Err((
            StatusCode::GATEWAY_TIMEOUT,
            format!("upstream {upstream} did not answer within {timeout_s:.1} s on {on}"),
        )),
        Ok(Err(e)) => {
            if lock(request).over_limit {
                return Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body exceeds the proxy body limit of {limit} bytes on {on}"),
                ));
            }
            let what = describe_upstream_error(&e);
            Err((
                StatusCode::BAD_GATEWAY,
                format!("upstream {upstream} {what} on {on}"),
            ))
        }
        Ok(Ok(resp)) => Ok(resp),
    }
}

/// The upstream's answer relayed to the driver, its body recorded as it goes (by `deadline`);
/// the exchange is recorded when the body ends.
fn relay_response(
    mut ex: Exchange,
    resp: Response<Incoming>,
    deadline: tokio::time::Instant,
    on: &str,
) -> Response<ProxyBody> {
    let shared = ex.shared.clone();
    let limit = shared.cfg.body_limit;
    let upstream = &shared.upstream_text;
    let timeout_s = shared.cfg.request_timeout.as_secs_f64();
    let (mut parts, body) = resp.into_parts();
    if let Some(n) = content_length(&parts.headers).filter(|&n| n > limit) {
        return ex.reply(
            StatusCode::BAD_GATEWAY,
            format!("upstream {upstream} answered {n} bytes, over the proxy body limit of {limit} bytes, on {on}"),
        );
    }
    let sim_seconds = parts
        .headers
        .get(SIM_DURATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok());
    let status = parts.status.as_u16();
    ex.server_error = parts
        .headers
        .get(ERROR_REASON_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    strip_hop_headers(&mut parts.headers);
    let response = Capture::new(content_type(&parts.headers), limit);
    if shared.cassette.is_some() {
        lock(&response).keep_whole();
        for name in [header::CONTENT_TYPE.as_str(), SIM_DURATION_HEADER] {
            if let Some(v) = parts.headers.get(name).and_then(|v| v.to_str().ok()) {
                ex.response_headers.insert(name.to_string(), v.to_string());
            }
        }
    }
    let recorded = response.clone();
    let body = TeeBody::new(body, response)
        .with_deadline(deadline, timeout_s)
        .on_end(move || ex.finish(status, Some(&recorded), sim_seconds, None));
    Response::from_parts(parts, body.boxed_unsync())
}

/// A standalone proxy (`rlharness proxy`): listen on `listen` until Ctrl-C.
pub(crate) async fn run_standalone(listen: &str, cfg: ProxyConfig) -> Result<(), ProxyError> {
    let listener = crate::backend::server::bind(listen)
        .await
        .map_err(|source| ProxyError::Bind {
            addr: listen.to_string(),
            source,
        })?;
    let (upstream, record) = (cfg.upstream.clone(), cfg.record_dir.clone());
    let handle = start(listener, cfg, None).await?;
    outln!(
        "rlharness proxy listening on http://{} -> {upstream}, recording into {}",
        handle.addr,
        record.display()
    );
    let stopped = tokio::signal::ctrl_c().await;
    handle.shutdown().await;
    stopped.map_err(ProxyError::Signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_id_comes_from_query_or_path() {
        let id = |s: &str| job_id(&s.parse::<Uri>().unwrap());
        assert_eq!(id("/forward?job_id=3"), json!(3));
        assert_eq!(id("/forward?x=1&job_id=abc"), json!("abc"));
        assert_eq!(id("/job/12"), json!(12));
        assert_eq!(id("/status"), Value::Null);
        assert_eq!(id("/job/12/extra"), Value::Null);
    }

    #[test]
    fn upstream_must_be_http_with_host() {
        assert!(parse_upstream("http://127.0.0.1:7000").is_ok());
        for bad in ["https://x:1", "127.0.0.1:7000", "http://", "not a url"] {
            let e = parse_upstream(bad).unwrap_err().to_string();
            assert!(e.contains("invalid upstream URL"), "{bad}: {e}");
        }
    }
}
