//! The Arctic HTTP server: routes, job table, sampling state machine, error rules.
//!
//! Written once for every engine, so the mock, the torch backend and any future engine answer
//! the same routes with the same status codes and the same `{"detail": ...}` bodies as the real
//! server. The `Router` is built apart from serving it: tests drive it in-process, the CLI and
//! the scenario runner bind a port.
//!
//! The parts, each in its file:
//! - `mod.rs` (here): options, the shared state and its handle, the router and the guard every
//!   request passes (body limit, FastAPI's 422 for a missing body, the simulated-time header);
//! - `routes/`: the handlers by family: job lifecycle, training (and the DeepSpeed engines'
//!   offload), sampling (generate, sleep/wake, weight sync, `/operation`);
//! - `jobs.rs`: the job table and the sampling engine's sleep/wake state machine;
//! - `batch.rs`: reading and checking a `{batch, meta, processing}` frame;
//! - `http.rs`: request parameters and response builders; `error.rs`: the real server's error
//!   shapes; `frame.rs`: DSSST1 tree helpers shared with clients and tests.

mod answer;
mod batch;
mod error;
pub mod frame;
mod http;
mod jobs;
mod routes;

use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::engine::Engine;
use crate::util::lock;
use crate::wire::api::{JobType, SIM_DURATION_HEADER};

pub use batch::ParsedRequest;
pub(crate) use error::internal_server_error;
use error::ApiError;

use answer::add_sim_header;
use error::{missing_body, BODY_REQUIRED};
use jobs::{JobTable, SamplingState};

/// What the server was started with: the GPU counts `/status` reports and that gate job
/// creation (a job type with 0 GPUs is refused, as the real server does), and the largest
/// request body it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    pub training_gpus: u32,
    pub sampling_gpus: u32,
    pub log_prob_gpus: u32,
    pub body_limit: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            training_gpus: 1,
            sampling_gpus: 1,
            log_prob_gpus: 1,
            body_limit: 1 << 31,
        }
    }
}

impl ServerOptions {
    fn gpus(&self, job_type: JobType) -> u32 {
        match job_type {
            JobType::Training => self.training_gpus,
            JobType::Sampling => self.sampling_gpus,
            JobType::LogProb => self.log_prob_gpus,
        }
    }
}

/// What every handler shares: the engine, the options and the job table. The server keeps no
/// record of the requests it answered: a test that wants them wraps the router (each binary
/// request's parsed `meta` rides on its response as a [`ParsedRequest`]).
struct Shared {
    engine: Arc<dyn Engine>,
    opts: ServerOptions,
    table: Mutex<JobTable>,
}

/// Access to a running server's jobs, and fault injection. Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// The live jobs: id and type.
    pub fn jobs(&self) -> Vec<(u64, JobType)> {
        lock(&self.shared.table)
            .jobs
            .iter()
            .map(|(id, j)| (*id, j.job_type))
            .collect()
    }

    /// Put every sampling engine to sleep, as a server that offloads on its own would: the
    /// next `/generate` is refused until the job is woken.
    pub(crate) fn put_samplers_to_sleep(&self) {
        for job in lock(&self.shared.table).jobs.values_mut() {
            if job.job_type == JobType::Sampling {
                job.sampling = SamplingState::Sleeping;
            }
        }
    }

    /// Forget every job as a crashed and restarted server would: ids start again at 1 and the
    /// engine drops its per-job state.
    pub fn restart(&self) {
        let ids: Vec<u64> = {
            let mut t = lock(&self.shared.table);
            let ids = t.jobs.keys().copied().collect();
            t.jobs.clear();
            t.next_id = 1;
            ids
        };
        for id in ids {
            self.shared.engine.destroy_job(id);
        }
    }
}

/// Build the server's router around an engine. The handle reads the job table and injects
/// faults.
pub fn router(engine: Arc<dyn Engine>, opts: ServerOptions) -> (Router, ServerHandle) {
    let body_limit = opts.body_limit;
    let shared = Arc::new(Shared {
        engine,
        opts,
        table: Mutex::new(JobTable::new()),
    });
    let router = routes::table()
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
        .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(shared.clone());
    (router, ServerHandle { shared })
}

/// Bind a listening socket with a deep accept queue. `TcpListener::bind` asks for 1024, and a
/// burst of a thousand connections then overflows it: the kernel drops or resets some of them
/// before the server ever sees them. The kernel still caps the depth at `net.core.somaxconn`.
pub async fn bind(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(8192)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("{addr} resolves to no address"),
        )
    }))
}

/// Serve a router on a bound listener until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// What every request passes before its handler: the body is read whole (bounded by the
/// server's limit: past it, a 413), a required body that is absent is FastAPI's 422, and a
/// simulating engine times every successful call, control routes included, so a mock run's
/// timings are fully simulated and deterministic.
async fn guard(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, s.opts.body_limit).await {
        Ok(b) => b,
        Err(e) => {
            let err = ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "failed to read the request body of {}: {e}",
                    parts.uri.path()
                ),
            );
            return err.into_response();
        }
    };
    let route = parts.uri.path();
    let mut resp =
        if parts.method == Method::POST && bytes.is_empty() && BODY_REQUIRED.contains(&route) {
            missing_body(route)
        } else {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        };
    if resp.status().is_success() && !resp.headers().contains_key(SIM_DURATION_HEADER) {
        add_sim_header(&mut resp, s.engine.control_seconds());
    }
    resp
}
