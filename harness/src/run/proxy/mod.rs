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
//!
//! `exchange` forwards one request and records it, `recorder` writes the files, `capture`
//! tees the bodies.

mod capture;
mod exchange;
mod recorder;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::http::Uri;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::model::events::EventSender;
use crate::run::backend::replay::CassetteWriter;
use rlharness_arctic::fsx::FsError;

pub(crate) use capture::{BoxError, JSON_RECORD_CAP};
use exchange::exchange;
use recorder::{Activity, Recorder};

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
        for (route, t) in &self.shared.activity().per_route {
            tracing::info!(
                "proxy: {route}: {} request(s), {} not 2xx, {:.3} s in all",
                t.count,
                t.failed,
                t.seconds
            );
        }
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

/// A standalone proxy (`rlharness proxy`): listen on `listen` until Ctrl-C.
pub(crate) async fn run_standalone(listen: &str, cfg: ProxyConfig) -> Result<(), ProxyError> {
    let listener = rlharness_arctic::server::bind(listen)
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
mod tests;
