//! The Arctic HTTP server: routes, job table, sampling state machine, error rules.
//!
//! Written once for every engine, so the mock, the torch backend and any future engine answer
//! the same routes with the same status codes and the same `{"detail": ...}` bodies as the real
//! server. The `Router` is built apart from serving it: tests drive it in-process, the CLI and
//! the scenario runner bind a port.

pub mod frame;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::backend::{Engine, EngineError, GenerateRequest, ModelBatch};
use crate::wire::api::{JobConfig, JobType, ERROR_REASON_HEADER, SIM_DURATION_HEADER};
use crate::wire::{decode, encode, Node, Tensor, WireError};

use frame::{describe, node_to_json, object_entries};

/// What the server was started with: the GPU counts `/status` reports and that gate job
/// creation (a job type with 0 GPUs is refused, as the real server does), and the largest
/// request body it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    pub training_gpus: u32,
    pub sampling_gpus: u32,
    pub log_prob_gpus: u32,
    pub body_limit: usize,
    /// How many of the newest requests [`ServerHandle::requests`] keeps (each with its JSON
    /// body and `meta`): 0, the default, keeps none. A server nobody inspects must not keep
    /// them: at the CPU flagship's 520 requests a step they grew its memory by about 1 MB a
    /// step.
    pub record_requests: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            training_gpus: 1,
            sampling_gpus: 1,
            log_prob_gpus: 1,
            body_limit: 1 << 31,
            record_requests: 0,
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

/// One request as the server saw it: enough to check what reached the server (which route,
/// which job, the per-call `meta`, the JSON body) without keeping tensors around.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecordedRequest {
    pub(crate) method: String,
    /// The route pattern (`/job/{job_id}` rather than `/job/3`).
    pub route: String,
    pub job_id: Option<u64>,
    pub status: u16,
    /// `meta` of `/forward` and `/forward-backward`.
    pub meta: Option<Value>,
    /// A JSON body as sent; for binary routes the JSON part of the tree (no tensors).
    pub(crate) body: Option<Value>,
}

/// The sampling engine's sleep state (see the API reference's state machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SamplingState {
    Ready,
    Sleeping,
    WeightsReady,
}

impl SamplingState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SamplingState::Ready => "READY",
            SamplingState::Sleeping => "SLEEPING",
            SamplingState::WeightsReady => "WEIGHTS_READY",
        }
    }
}

/// A wake-up request: which parts of the sampling engine come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakeTags {
    pub(crate) weights: bool,
    pub(crate) kv_cache: bool,
}

/// The state machine's wake transition: the new state and the status word the server answers,
/// or why the transition is refused.
pub(crate) fn wake_transition(
    state: SamplingState,
    tags: WakeTags,
) -> Result<(SamplingState, &'static str), String> {
    use SamplingState::*;
    match (state, tags.weights, tags.kv_cache) {
        (Ready, _, _) => Ok((Ready, "already_ready")),
        (Sleeping, true, true) | (WeightsReady, _, true) => Ok((Ready, "ready")),
        (Sleeping, true, false) => Ok((WeightsReady, "weights_ready")),
        (WeightsReady, true, false) => Ok((WeightsReady, "weights_ready")),
        (Sleeping, false, true) => Err(
            "cannot wake kv_cache while the sampling engine is sleeping: wake [\"weights\"] first"
                .into(),
        ),
        (_, false, false) => Err("wake-inference needs at least one tag".into()),
    }
}

#[derive(Debug, Clone)]
struct Job {
    job_type: JobType,
    config: JobConfig,
    sampling: SamplingState,
    /// What `/sleep-training` (or `/sleep-log-prob`) moved off the GPU: `None` while on it.
    offloaded: Option<&'static str>,
}

#[derive(Debug, Default)]
struct JobTable {
    next_id: u64,
    jobs: BTreeMap<u64, Job>,
}

struct Shared {
    engine: Arc<dyn Engine>,
    opts: ServerOptions,
    table: Mutex<JobTable>,
    configs: Mutex<Vec<(u64, Value)>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

use crate::util::lock;

/// Access to what a running server recorded, and fault injection. Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// Every JobConfig that created a job, as received (raw JSON with unknown keys kept).
    pub fn recorded_job_configs(&self) -> Vec<(u64, Value)> {
        lock(&self.shared.configs).clone()
    }

    /// The requests answered so far, in order of completion: the newest of them, as many as
    /// [`ServerOptions::record_requests`] asks for (none by default).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

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

/// An error answer: a status and the `detail` of the JSON body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status}: {detail}")]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
}

impl ApiError {
    fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            detail: detail.into(),
        }
    }
    fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }
    fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }
    fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, detail)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let status = StatusCode::from_u16(e.status)
            .ok()
            .filter(|s| s.is_client_error() || s.is_server_error())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self::new(status, e.detail)
    }
}

impl From<WireError> for ApiError {
    /// A frame that does not decode raises inside the real server's handler: a 500.
    fn from(e: WireError) -> Self {
        Self::internal(e.to_string())
    }
}

/// The plain-text body of the real server's 500 (its framework's default for an exception
/// inside a handler).
pub(crate) const INTERNAL_SERVER_ERROR_BODY: &str = "Internal Server Error";

/// A 500 as the real server sends it: plain text, no detail. The mock's log says more, and so
/// does the `x-rlharness-error` header (`reason`), which the recording proxy writes to the wire.
pub(crate) fn internal_server_error(reason: &str) -> Response {
    let mut resp = Response::new(Body::from(INTERNAL_SERVER_ERROR_BODY));
    *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    add_reason(&mut resp, reason);
    resp
}

/// The longest reason the `x-rlharness-error` header carries.
const MAX_REASON_LEN: usize = 2000;

/// Say why in the `x-rlharness-error` header: printable ASCII only (anything else becomes `?`),
/// at most `MAX_REASON_LEN` characters.
pub(crate) fn add_reason(resp: &mut Response, reason: &str) {
    let text: String = reason
        .chars()
        .take(MAX_REASON_LEN)
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&text) {
        resp.headers_mut().insert(ERROR_REASON_HEADER, v);
    }
}

/// FastAPI's answer to a required body that is absent (zero bytes): a 422 whose `detail` lists
/// one `missing` error at `["body"]`. It happens before the handler runs, so it says nothing
/// about the route; the log and the `x-rlharness-error` header do.
fn missing_body(route: &str) -> Response {
    let why = format!("{route}: the request body is empty, and this route requires one");
    tracing::warn!("answering 422 Field required: {why}");
    let detail =
        json!([{"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}]);
    let mut resp = json_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        &json!({ "detail": detail }),
        None,
    );
    add_reason(&mut resp, &why);
    resp
}

/// The POST routes whose handler reads a required body: an empty one is FastAPI's 422 before
/// the handler runs. The others take an optional body (`/wake-inference`: no tags; the sleep
/// routes: `level` or `mode` in the query; `/reset-prefix-cache`) or none.
const BODY_REQUIRED: [&str; 12] = [
    "/initialize",
    "/destroy",
    "/forward-backward",
    "/forward",
    "/step",
    "/save",
    "/load-checkpoint",
    "/generate",
    "/log-probs",
    "/operation",
    "/weight-sync",
    "/weight-norm",
];

impl IntoResponse for ApiError {
    /// The real server's shapes: a 500 is plain text; a 422 (framework validation) carries a
    /// LIST of `{type, loc, msg, input}` in `detail`; a deliberate error `{"detail": "..."}`.
    fn into_response(self) -> Response {
        if self.status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::warn!("answering 500 Internal Server Error: {}", self.detail);
            let mut resp = internal_server_error(&self.detail);
            resp.extensions_mut().insert(self);
            return resp;
        }
        if self.status == StatusCode::UNPROCESSABLE_ENTITY {
            let detail = json!([{
                "type": "value_error",
                "loc": ["body"],
                "msg": self.detail,
                "input": null,
            }]);
            return json_response(self.status, &json!({ "detail": detail }), None);
        }
        json_response(self.status, &json!({ "detail": self.detail }), None)
    }
}

type ApiResult = Result<Response, ApiError>;

fn json_response(status: StatusCode, body: &Value, sim_seconds: Option<f64>) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_sim_header(&mut resp, sim_seconds);
    resp
}

fn ok_json(body: Value) -> ApiResult {
    Ok(json_response(StatusCode::OK, &body, None))
}

fn frame_response(root: &Node, sim_seconds: Option<f64>) -> ApiResult {
    let bytes = encode(root)?;
    let mut resp = (StatusCode::OK, bytes).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    add_sim_header(&mut resp, sim_seconds);
    Ok(resp)
}

fn add_sim_header(resp: &mut Response, sim_seconds: Option<f64>) {
    if let Some(s) = sim_seconds.filter(|s| s.is_finite()) {
        if let Ok(v) = HeaderValue::from_str(&format!("{s}")) {
            resp.headers_mut().insert(SIM_DURATION_HEADER, v);
        }
    }
}

/// The `meta` and JSON part of a binary request, attached to the response for the recorder.
#[derive(Debug, Clone)]
struct RecordedParts {
    meta: Option<Value>,
    body: Option<Value>,
}

/// Build the server's router around an engine. The handle reads what the server recorded.
pub fn router(engine: Arc<dyn Engine>, opts: ServerOptions) -> (Router, ServerHandle) {
    let body_limit = opts.body_limit;
    let shared = Arc::new(Shared {
        engine,
        opts,
        table: Mutex::new(JobTable {
            next_id: 1,
            jobs: BTreeMap::new(),
        }),
        configs: Mutex::new(Vec::new()),
        requests: Mutex::new(Vec::new()),
    });
    let router = Router::new()
        .route("/health", get(health))
        .route("/initialize", post(initialize))
        .route("/job/{job_id}", get(job_route))
        .route("/status", get(status))
        .route("/destroy", post(destroy))
        .route("/forward-backward", post(forward_backward))
        .route("/forward", post(forward))
        .route("/step", post(step))
        .route("/save", post(save))
        .route("/load-checkpoint", post(load_checkpoint))
        .route("/generate", post(generate))
        .route("/log-probs", post(log_probs))
        .route("/sleep-inference", post(sleep_inference))
        .route("/wake-inference", post(wake_inference))
        .route("/reset-prefix-cache", post(reset_prefix_cache))
        .route("/sleep-training", post(sleep_training))
        .route("/wake-training", post(wake_training))
        .route("/empty-training-cache", post(empty_training_cache))
        .route("/sleep-log-prob", post(sleep_log_prob))
        .route("/wake-log-prob", post(wake_log_prob))
        .route("/operation", post(operation))
        .route("/weight-sync", post(weight_sync))
        .route("/weight-norm", post(weight_norm))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
        .layer(axum::middleware::from_fn_with_state(shared.clone(), record))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(shared.clone());
    (router, ServerHandle { shared })
}

/// Bind a listening socket with a deep accept queue. `TcpListener::bind` asks for 1024, and a
/// burst of a thousand connections then overflows it: the kernel drops or resets some of them
/// before the server ever sees them. The kernel still caps the depth at `net.core.somaxconn`.
pub(crate) async fn bind(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
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

/// The recorder: buffers the body (bounded), notes route, job id, status and JSON body.
async fn record(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let method = parts.method.to_string();
    let bytes = match axum::body::to_bytes(body, s.opts.body_limit).await {
        Ok(b) => b,
        Err(e) => {
            let err = ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("failed to read the request body of {path}: {e}"),
            );
            return err.into_response();
        }
    };
    let json_body: Option<Value> = if bytes.is_empty() {
        None
    } else {
        serde_json::from_slice(&bytes).ok()
    };
    let mut job_id = job_id_from_query(&parts.uri).ok().flatten();
    let route = match path.strip_prefix("/job/") {
        Some(id) => {
            job_id = id.parse().ok();
            "/job/{job_id}".to_string()
        }
        None => path,
    };
    if route == "/weight-norm" {
        job_id = json_body
            .as_ref()
            .and_then(|b| b.get("training_job_id"))
            .and_then(Value::as_u64);
    }
    let mut resp = if parts.method == axum::http::Method::POST
        && bytes.is_empty()
        && BODY_REQUIRED.contains(&route.as_str())
    {
        missing_body(&route)
    } else {
        next.run(Request::from_parts(parts, Body::from(bytes)))
            .await
    };
    // A simulating engine times every successful call, control routes included, so a mock
    // run's timings are fully simulated and deterministic.
    if resp.status().is_success() && !resp.headers().contains_key(SIM_DURATION_HEADER) {
        add_sim_header(&mut resp, s.engine.control_seconds());
    }
    let (meta, body) = match resp.extensions().get::<RecordedParts>() {
        Some(p) => (p.meta.clone(), p.body.clone()),
        None => (None, json_body),
    };
    let keep = s.opts.record_requests;
    if keep == 0 {
        return resp;
    }
    let mut recorded = lock(&s.requests);
    if recorded.len() >= keep {
        // The newest requests only: bounded memory.
        let drop = recorded.len() - keep / 2;
        recorded.drain(..drop);
    }
    recorded.push(RecordedRequest {
        method,
        route,
        job_id,
        status: resp.status().as_u16(),
        meta,
        body,
    });
    drop(recorded);
    resp
}

/// `job_id` from the query string: `Ok(None)` when absent.
fn job_id_from_query(uri: &Uri) -> Result<Option<u64>, ApiError> {
    let Some(q) = uri.query() else {
        return Ok(None);
    };
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "job_id" {
            return v.parse::<u64>().map(Some).map_err(|_| {
                ApiError::unprocessable(format!(
                    "query parameter job_id must be a non-negative integer, got {v:?}"
                ))
            });
        }
    }
    Ok(None)
}

fn require_job_id(uri: &Uri) -> Result<u64, ApiError> {
    job_id_from_query(uri)?.ok_or_else(|| ApiError::unprocessable("missing query parameter job_id"))
}

fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| ApiError::new(e.status(), e.body_text()))
}

/// A JSON body; an empty body is `None` (several routes take an optional body).
fn json_body(body: Result<Bytes, BytesRejection>, route: &str) -> Result<Option<Value>, ApiError> {
    let bytes = body_bytes(body)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // An aiohttp client may send NaN/Infinity literals: read them as Python does.
    crate::wire::api::parse_json_lenient(&bytes)
        .map(Some)
        .map_err(|e| {
            ApiError::unprocessable(format!("{route}: request body is not valid JSON: {e}"))
        })
}

/// A JSON object body (absent or `null` is an empty object).
fn json_object(
    body: Result<Bytes, BytesRejection>,
    route: &str,
) -> Result<Map<String, Value>, ApiError> {
    match json_body(body, route)? {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(other) => Err(ApiError::unprocessable(format!(
            "{route}: request body must be a JSON object, got {other}"
        ))),
    }
}

fn engine_task<T, F>(s: &Arc<Shared>, f: F) -> impl Future<Output = Result<T, ApiError>>
where
    T: Send + 'static,
    F: FnOnce(&dyn Engine) -> Result<T, EngineError> + Send + 'static,
{
    let engine = s.engine.clone();
    async move {
        tokio::task::spawn_blocking(move || f(engine.as_ref()))
            .await
            .map_err(|e| ApiError::internal(format!("engine task failed: {e}")))?
            .map_err(ApiError::from)
    }
}

impl Shared {
    /// The job's type, checked against the types the route accepts.
    fn job_checked(&self, id: u64, allowed: &[JobType], route: &str) -> Result<Job, ApiError> {
        let t = lock(&self.table);
        let job = t
            .jobs
            .get(&id)
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("job {id} not found")))?;
        if !allowed.contains(&job.job_type) {
            let want: Vec<&str> = allowed.iter().map(|t| t.as_str()).collect();
            return Err(ApiError::bad_request(format!(
                "{route} needs a {} job, but job {id} is a {} job",
                want.join(" or "),
                job.job_type.as_str()
            )));
        }
        Ok(job.clone())
    }

    fn set_sampling_state(&self, id: u64, state: SamplingState) {
        if let Some(j) = lock(&self.table).jobs.get_mut(&id) {
            j.sampling = state;
        }
    }
}

fn job_info(id: u64, job: &Job) -> Value {
    let sync_path = match (&job.job_type, &job.config.checkpoint_path) {
        (JobType::Training, Some(p)) => {
            Value::String(format!("{}/weight_sync", p.trim_end_matches('/')))
        }
        _ => Value::Null,
    };
    let mut info = json!({
        "job_id": id,
        "job_type": job.job_type.as_str(),
        "model_name": job.config.model_name,
        "status": "RUNNING",
        "checkpoint_path": job.config.checkpoint_path,
        "sync_path": sync_path,
    });
    if job.job_type == JobType::Sampling {
        info["sampling_state"] = json!(job.sampling.as_str());
    }
    info
}

async fn health() -> Response {
    json_response(StatusCode::OK, &json!({"status": "OK"}), None)
}

async fn initialize(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let raw = match json_body(body, "/initialize")? {
        Some(v @ Value::Object(_)) => v,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "/initialize: JobConfig must be a JSON object, got {other}"
            )))
        }
        None => {
            return Err(ApiError::unprocessable(
                "/initialize: missing JobConfig body",
            ))
        }
    };
    let config: JobConfig = serde_json::from_value(raw.clone())
        .map_err(|e| ApiError::unprocessable(format!("/initialize: invalid JobConfig: {e}")))?;
    let job_type = config.job_type;
    if s.opts.gpus(job_type) == 0 {
        return Err(ApiError::bad_request(format!(
            "no GPUs of that kind: the server has 0 {} GPUs, so it cannot run a {} job",
            job_type.as_str(),
            job_type.as_str()
        )));
    }
    if job_type == JobType::Training && config.checkpoint_path.as_deref().is_none_or(str::is_empty)
    {
        return Err(ApiError::bad_request(
            "checkpoint_path is required for a training job",
        ));
    }
    let id = {
        let mut t = lock(&s.table);
        if let Some((other, _)) = t.jobs.iter().find(|(_, j)| j.job_type == job_type) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "a {} job is already running (job {other})",
                    job_type.as_str()
                ),
            ));
        }
        let id = t.next_id;
        t.next_id += 1;
        t.jobs.insert(
            id,
            Job {
                job_type,
                config: config.clone(),
                sampling: SamplingState::Ready,
                offloaded: None,
            },
        );
        id
    };
    lock(&s.configs).push((id, raw));
    let created = engine_task(&s, move |e| e.create_job(id, &config)).await;
    if let Err(e) = created {
        lock(&s.table).jobs.remove(&id);
        return Err(e);
    }
    ok_json(json!({"job_id": id, "job_type": job_type.as_str(), "running": true}))
}

async fn job_info_route(s: &Shared, raw_id: &str) -> ApiResult {
    let id: u64 = raw_id.parse().map_err(|_| {
        ApiError::unprocessable(format!(
            "job id in the path must be an integer, got {raw_id:?}"
        ))
    })?;
    let t = lock(&s.table);
    let job = t
        .jobs
        .get(&id)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("job {id} not found")))?;
    ok_json(job_info(id, job))
}

async fn job_route(
    State(s): State<Arc<Shared>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> ApiResult {
    let Path(raw) = path.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    job_info_route(&s, &raw).await
}

async fn status(State(s): State<Arc<Shared>>) -> ApiResult {
    let t = lock(&s.table);
    let jobs: Map<String, Value> = t
        .jobs
        .iter()
        .map(|(id, j)| (id.to_string(), job_info(*id, j)))
        .collect();
    ok_json(json!({
        "training_gpus": s.opts.training_gpus,
        "sampling_gpus": s.opts.sampling_gpus,
        "log_prob_gpus": s.opts.log_prob_gpus,
        "jobs": jobs,
    }))
}

async fn destroy(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let body = json_object(body, "/destroy")?;
    let all = [JobType::Training, JobType::Sampling, JobType::LogProb];
    let job = s.job_checked(id, &all, "/destroy")?;
    if let Some(t) = body.get("job_type").filter(|v| !v.is_null()) {
        let t: JobType = serde_json::from_value(t.clone())
            .map_err(|e| ApiError::unprocessable(format!("/destroy: invalid job_type: {e}")))?;
        if t != job.job_type {
            return Err(ApiError::bad_request(format!(
                "/destroy: job {id} is a {} job, not a {} job",
                job.job_type.as_str(),
                t.as_str()
            )));
        }
    }
    lock(&s.table).jobs.remove(&id);
    engine_task(&s, move |e| {
        e.destroy_job(id);
        Ok(())
    })
    .await?;
    ok_json(json!({"job_id": id}))
}

const POST_PROCESSORS: [&str; 4] = [
    "identity",
    "compute_entropy_and_logprobs",
    "compute_entropy",
    "apply_temperature",
];
const LOSS_FUNCTIONS: [&str; 4] = ["grpo", "verl_grpo", "sft", "sft_ce"];

/// Tensors that share `input_ids`' `[B,S]` shape when present.
const FULL_WIDTH_TENSORS: [&str; 7] = [
    "attention_mask",
    "position_ids",
    "response_mask",
    "loss_mask",
    "old_log_probs",
    "advantages",
    "ref_log_prob",
];

/// Decode and check a `{batch, meta, processing}` frame.
fn model_batch(bytes: Bytes, route: &str) -> Result<(ModelBatch, RecordedParts), ApiError> {
    let root = decode(bytes)?;
    let FrameSections {
        batch,
        meta,
        processing,
    } = frame_sections(root, route)?;
    check_meta(&meta, route)?;
    let batch = batch_tensors(batch, route)?;
    let post = post_processors(&processing, route)?;
    let loss_fn = loss_fn_of(&processing, route)?;
    let mb = ModelBatch {
        batch,
        meta,
        post,
        loss_fn,
    };
    check_batch_shapes(&mb, route)?;
    let recorded = RecordedParts {
        meta: Some(Value::Object(mb.meta.clone())),
        body: Some(json!({
            "batch": mb.batch.iter().map(|(k, t)| (k.clone(), json!(describe(t)))).collect::<Map<_, _>>(),
            "processing": Value::Object(processing),
        })),
    };
    Ok((mb, recorded))
}

/// A `{batch, meta, processing}` frame's sections.
struct FrameSections {
    batch: Node,
    /// Empty when absent or null.
    meta: Map<String, Value>,
    /// Empty when absent or null.
    processing: Map<String, Value>,
}

/// A frame's three sections: the `batch` node (required), `meta` and `processing` (objects).
fn frame_sections(root: Node, route: &str) -> Result<FrameSections, ApiError> {
    let entries =
        object_entries(root, &format!("{route} body")).map_err(ApiError::unprocessable)?;
    let mut batch_node = None;
    let mut meta = Map::new();
    let mut processing = Map::new();
    for (k, v) in entries {
        match k.as_str() {
            "batch" => batch_node = Some(v),
            // `meta` may hold tensors anywhere (the adapter sends `batch_num_tokens` as a 0-d
            // I64 tensor): a one-element tensor reads as its number.
            "meta" => match v.to_values() {
                Value::Object(m) => meta = m,
                Value::Null => {}
                other => {
                    return Err(ApiError::unprocessable(format!(
                        "{route}: `meta` must be an object, got {}",
                        frame::node_kind(&Node::Json(other))
                    )))
                }
            },
            "processing" => match v.to_values() {
                Value::Object(m) => processing = m,
                Value::Null => {}
                _ => {
                    return Err(ApiError::unprocessable(format!(
                        "{route}: `processing` must be a JSON object"
                    )))
                }
            },
            _ => {}
        }
    }
    let batch_node =
        batch_node.ok_or_else(|| ApiError::unprocessable(format!("{route}: missing `batch`")))?;
    Ok(FrameSections {
        batch: batch_node,
        meta,
        processing,
    })
}

/// The `meta` keys the real server's handler reads unguarded: with `load_balancer` present it
/// looks `max_token_len_per_gpu` up by subscript, so a `meta` without it raises inside the
/// handler: the plain-text 500.
fn check_meta(meta: &Map<String, Value>, route: &str) -> Result<(), ApiError> {
    if meta.contains_key("load_balancer") && !meta.contains_key("max_token_len_per_gpu") {
        return Err(ApiError::internal(format!(
            "{route}: meta has load_balancer but no max_token_len_per_gpu (the real server's handler fails on the missing key)"
        )));
    }
    Ok(())
}

/// The tensors of a frame's `batch`, by name in the order sent.
fn batch_tensors(batch_node: Node, route: &str) -> Result<Vec<(String, Tensor)>, ApiError> {
    let mut batch: Vec<(String, Tensor)> = Vec::new();
    for (k, v) in
        object_entries(batch_node, &format!("{route}: `batch`")).map_err(ApiError::unprocessable)?
    {
        match v {
            Node::Tensor { tensor, .. } => batch.push((k, tensor)),
            // Non-tensor batch entries (verl's non_tensor_batch leftovers) are not read.
            Node::Json(_) => {}
            other => {
                return Err(ApiError::unprocessable(format!(
                    "{route}: batch.{k} must be a tensor, got {}",
                    frame::node_kind(&other)
                )))
            }
        }
    }
    Ok(batch)
}

/// `processing.post`: a list of known post-processors (none when absent or null).
fn post_processors(processing: &Map<String, Value>, route: &str) -> Result<Vec<String>, ApiError> {
    let post = match processing.get("post") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::unprocessable(format!(
                        "{route}: processing.post must be a list of names, got {i}"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "{route}: processing.post must be a list of names, got {other}"
            )))
        }
    };
    if let Some(p) = post.iter().find(|p| !POST_PROCESSORS.contains(&p.as_str())) {
        return Err(ApiError::bad_request(format!(
            "{route}: unknown post-processor {p:?} (known: {})",
            POST_PROCESSORS.join(", ")
        )));
    }
    Ok(post)
}

/// `processing.loss_fn`: a known loss function, or `None` (an explicit null) for forward only.
fn loss_fn_of(processing: &Map<String, Value>, route: &str) -> Result<Option<String>, ApiError> {
    // ABSENT: the real server looks up its default `grpo`, whose signature does not match the
    // call, so the request fails with a 500 after the forward pass (which changes nothing).
    // An explicit null means forward only.
    let loss_fn = match processing.get("loss_fn") {
        None => {
            return Err(ApiError::internal(format!(
                "{route}: processing.loss_fn is absent: the default `grpo` loss cannot be called this way (send a name, or null for forward only)"
            )))
        }
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "{route}: processing.loss_fn must be a name or null, got {other}"
            )))
        }
    };
    if let Some(l) = loss_fn.as_deref().filter(|l| !LOSS_FUNCTIONS.contains(l)) {
        return Err(ApiError::bad_request(format!(
            "{route}: unknown loss_fn {l:?} (known: {})",
            LOSS_FUNCTIONS.join(", ")
        )));
    }
    Ok(loss_fn)
}

/// Shape rules of verl's padded layout, checked once here so every engine can index freely.
fn check_batch_shapes(mb: &ModelBatch, route: &str) -> Result<(), ApiError> {
    let need = |name: &str| {
        mb.tensor(name)
            .ok_or_else(|| ApiError::unprocessable(format!("{route}: missing tensor batch.{name}")))
    };
    let ids = need("input_ids")?;
    // Any integer dtype will do for ids and masks (torch indexes with all of them); a float or
    // complex tensor fails in the real server's embedding lookup too.
    let is_int = |t: &Tensor| t.dtype.is_integer() && t.dtype != crate::wire::DType::Bool;
    if ids.shape.len() != 2 || !is_int(ids) {
        return Err(ApiError::unprocessable(format!(
            "{route}: batch.input_ids must be a 2-D integer tensor [B,S], got {}",
            describe(ids)
        )));
    }
    let (b, s) = (ids.shape[0], ids.shape[1]);
    let mask = need("attention_mask")?;
    let prompts = need("prompts")?;
    if prompts.shape.len() != 2 || prompts.shape[0] != b || prompts.shape[1] > s {
        return Err(ApiError::unprocessable(format!(
            "{route}: batch.prompts must be [B,P] with B = {b} and P <= S = {s}, got {}",
            describe(prompts)
        )));
    }
    let p = prompts.shape[1];
    for name in FULL_WIDTH_TENSORS {
        if let Some(t) = mb.tensor(name) {
            if t.shape != ids.shape {
                return Err(ApiError::unprocessable(format!(
                    "{route}: batch.{name} has shape {:?} but batch.input_ids has shape {:?}",
                    t.shape, ids.shape
                )));
            }
        }
    }
    if !is_int(mask) && mask.dtype != crate::wire::DType::Bool {
        return Err(ApiError::unprocessable(format!(
            "{route}: batch.attention_mask must be an integer or boolean tensor, got {}",
            describe(mask)
        )));
    }
    if let Some(r) = mb.tensor("responses") {
        if r.shape != [b, s - p] {
            return Err(ApiError::unprocessable(format!(
                "{route}: batch.responses must be [B,R] = [{b}, {}] (S - P), got {}",
                s - p,
                describe(r)
            )));
        }
    }
    for (name, t) in &mb.batch {
        let want = t.dtype.byte_len(frame::numel(&t.shape));
        if want != Some(t.data.len()) {
            return Err(ApiError::unprocessable(format!(
                "{route}: batch.{name} ({}) needs {} bytes but carries {}",
                describe(t),
                want.map_or_else(|| "a whole number of".to_string(), |w| w.to_string()),
                t.data.len()
            )));
        }
    }
    Ok(())
}

fn with_parts(mut resp: Response, parts: RecordedParts) -> Response {
    resp.extensions_mut().insert(parts);
    resp
}

async fn forward(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    // The real server looks the job up before checking it exists: an unknown id fails inside
    // the handler, a 500.
    let job = s
        .job_checked(id, &[JobType::Training, JobType::LogProb], "/forward")
        .map_err(|e| {
            if e.status == StatusCode::NOT_FOUND {
                ApiError::internal(format!("/forward: {}", e.detail))
            } else {
                e
            }
        })?;
    if job.job_type == JobType::LogProb && job.config.ds_config.is_none() {
        return Err(ApiError::bad_request(format!(
            "/forward: log_prob job {id} has no ds_config, so it runs no DeepSpeed engine to forward"
        )));
    }
    let (mb, parts) = model_batch(body_bytes(body)?, "/forward")?;
    let out = engine_task(&s, move |e| e.forward(id, &mb)).await?;
    let mut batch = vec![(
        "logprobs".to_string(),
        Node::Tensor {
            tensor: out.value.logprobs,
            scalar: false,
        },
    )];
    if let Some(ent) = out.value.entropy {
        batch.push((
            "entropy".to_string(),
            Node::Tensor {
                tensor: ent,
                scalar: false,
            },
        ));
    }
    let root = Node::Dict(vec![
        ("job_id".into(), Node::Json(json!(id))),
        ("batch".into(), Node::Dict(batch)),
        (
            "metrics".into(),
            Node::Json(Value::Object(out.value.metrics)),
        ),
        // A forward-only call answers `avg_loss: 0.0`, as the real server does.
        (
            "avg_loss".into(),
            Node::Json(crate::wire::pyjson::float(
                out.value.avg_loss.unwrap_or(0.0),
            )),
        ),
    ]);
    Ok(with_parts(frame_response(&root, out.sim_seconds)?, parts))
}

async fn forward_backward(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    s.job_checked(id, &[JobType::Training], "/forward-backward")?;
    let (mb, parts) = model_batch(body_bytes(body)?, "/forward-backward")?;
    if mb.loss_fn.is_none() {
        return Err(ApiError::bad_request(
            "/forward-backward: processing.loss_fn is null, so there is no loss to backpropagate",
        ));
    }
    let out = engine_task(&s, move |e| e.forward_backward(id, &mb)).await?;
    let root = Node::Json(json!({
        "job_id": id,
        "metrics": Value::Object(out.value.metrics),
        // A NaN loss travels as the `NaN` literal, never as `null`.
        "avg_loss": crate::wire::pyjson::float(out.value.avg_loss),
    }));
    Ok(with_parts(frame_response(&root, out.sim_seconds)?, parts))
}

async fn step(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    s.job_checked(id, &[JobType::Training], "/step")?;
    let body = json_object(body, "/step")?;
    let lr = match body.get("learning_rate") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_f64().ok_or_else(|| {
            ApiError::unprocessable(format!("/step: learning_rate must be a number, got {v}"))
        })?),
    };
    let out = engine_task(&s, move |e| e.step(id, lr)).await?;
    // The real server encodes JSON with NaN disallowed: a non-finite value here is a 500.
    if !out.value.last_lr.is_finite() || out.value.grad_norm.is_some_and(|g| !g.is_finite()) {
        return Err(ApiError::internal(format!(
            "/step: the answer holds a non-finite value (last_lr {}, grad_norm {:?}), which JSON cannot carry",
            out.value.last_lr, out.value.grad_norm
        )));
    }
    let mut metrics = Map::new();
    metrics.insert("last_lr".into(), json!(out.value.last_lr));
    if let Some(g) = out.value.grad_norm {
        metrics.insert("grad_norm".into(), json!(g));
    }
    if let Some(m) = out.value.peak_memory_gb.filter(|m| m.is_finite()) {
        metrics.insert("peak_memory_gb".into(), json!(m));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"job_id": id, "metrics": metrics, "batch": {}}),
        out.sim_seconds,
    ))
}

fn prefixed(id: u64, v: Value) -> Value {
    let mut m = Map::new();
    m.insert("job_id".into(), json!(id));
    if let Value::Object(o) = v {
        m.extend(o);
    }
    Value::Object(m)
}

/// `/save` and `/load-checkpoint` check their request by assertions inside the handler: a
/// refusal there is the real server's plain-text 500, never a JSON 4xx. A 422 (a value of the
/// wrong type, which the framework's request model refuses first) keeps its shape.
fn assertion(e: ApiError) -> ApiError {
    if e.status == StatusCode::BAD_REQUEST {
        ApiError::internal(e.detail)
    } else {
        e
    }
}

async fn save(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    s.job_checked(id, &[JobType::Training], "/save")?;
    let req = Value::Object(json_object(body, "/save")?);
    let out = engine_task(&s, move |e| e.save(id, &req))
        .await
        .map_err(assertion)?;
    ok_json(prefixed(id, out))
}

async fn load_checkpoint(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    s.job_checked(id, &[JobType::Training], "/load-checkpoint")?;
    let req = Value::Object(json_object(body, "/load-checkpoint")?);
    let out = engine_task(&s, move |e| e.load_checkpoint(id, &req))
        .await
        .map_err(assertion)?;
    ok_json(prefixed(id, out))
}

async fn generate(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let job = s.job_checked(id, &[JobType::Sampling], "/generate")?;
    // The real server raises inside the handler: a plain-text 500 (the log says why).
    if job.sampling != SamplingState::Ready {
        return Err(ApiError::internal(format!(
            "/generate: sampling job {id} is {}: wake it (weights and kv_cache) before generating",
            job.sampling.as_str()
        )));
    }
    let root = decode(body_bytes(body)?)?;
    let recorded = node_to_json(&root);
    let entries = object_entries(root, "/generate body").map_err(ApiError::unprocessable)?;
    let mut prompts = None;
    let mut sampling_params = Map::new();
    for (k, v) in entries {
        match k.as_str() {
            "prompts" => prompts = Some(v),
            "sampling_params" => match node_to_json(&v) {
                Some(Value::Object(m)) => sampling_params = m,
                Some(Value::Null) => {}
                _ => {
                    return Err(ApiError::unprocessable(
                        "/generate: sampling_params must be a JSON object",
                    ))
                }
            },
            _ => {}
        }
    }
    let prompts = match prompts.as_ref().and_then(node_to_json) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|p| p.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>(),
        _ => None,
    }
    .ok_or_else(|| ApiError::unprocessable("/generate: `prompts` must be a list of strings"))?;
    let n_prompts = prompts.len();
    let request = GenerateRequest {
        prompts,
        sampling_params: sampling_params.clone(),
    };
    let out = match s.engine.generate_queued(id, &request) {
        None => engine_task(&s, move |e| e.generate(id, &request)).await?,
        Some(Err(e)) => return Err(ApiError::from(e)),
        Some(Ok(queued)) => {
            if let Some(queue) = queued.serve {
                // Served on a blocking thread of its own; this call's answer, like every
                // other queued call's, arrives on its future.
                let serving = engine_task(&s, move |e| {
                    e.serve_generate_queue(queue);
                    Ok(())
                });
                tokio::spawn(async move {
                    if let Err(e) = serving.await {
                        tracing::error!("serving the generate queue failed: {}", e.detail);
                    }
                });
            }
            queued.answer.await.map_err(ApiError::from)?
        }
    };
    let results = serde_json::to_value(&out.value)
        .map_err(|e| ApiError::internal(format!("/generate: cannot encode results: {e}")))?;
    let root = Node::Json(json!({"job_id": id, "results": results}));
    let parts = RecordedParts {
        meta: None,
        body: recorded.map(|mut b| {
            // Prompts can be long; the recorder keeps their count and the sampling settings.
            if let Some(o) = b.as_object_mut() {
                o.insert("prompts".into(), json!(n_prompts));
            }
            b
        }),
    };
    Ok(with_parts(frame_response(&root, out.sim_seconds)?, parts))
}

async fn log_probs(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    s.job_checked(id, &[JobType::LogProb], "/log-probs")?;
    let req = json_object(body, "/log-probs")?;
    if !req
        .get("prompts")
        .is_some_and(|p| p.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
    {
        return Err(ApiError::unprocessable(
            "/log-probs: `prompts` must be a list of strings",
        ));
    }
    let req = Value::Object(req);
    let out = engine_task(&s, move |e| e.log_probs(id, &req)).await?;
    let root = Node::Dict(vec![
        ("job_id".into(), Node::Json(json!(id))),
        ("results".into(), out.value),
    ]);
    frame_response(&root, out.sim_seconds)
}

/// A query parameter's raw value.
fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.to_string())
    })
}

fn sleep_job(s: &Shared, id: u64, body: &Map<String, Value>, route: &str) -> ApiResult {
    let level = match body.get("level") {
        None | Some(Value::Null) => 1,
        Some(v) => v.as_u64().ok_or_else(|| {
            ApiError::unprocessable(format!(
                "{route}: level must be a non-negative integer, got {v}"
            ))
        })?,
    };
    let job = s.job_checked(id, &[JobType::Sampling], route)?;
    let status = if job.sampling == SamplingState::Sleeping {
        "already_sleeping"
    } else {
        s.set_sampling_state(id, SamplingState::Sleeping);
        s.engine.sleep_changed(id, true);
        "sleeping"
    };
    ok_json(json!({
        "job_id": id,
        "sampling": {"status": status, "level": level},
        "workers": [{"status": status, "level": level}],
    }))
}

fn wake_tags(body: Option<&Value>, route: &str) -> Result<(WakeTags, Value), ApiError> {
    let list = match body {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(a.clone()),
        Some(Value::Object(o)) => match o.get("tags") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => {
                return Err(ApiError::unprocessable(format!(
                    "{route}: tags must be a list, got {other}"
                )))
            }
        },
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "{route}: body must be a list of tags, got {other}"
            )))
        }
    };
    let Some(list) = list.filter(|l| !l.is_empty()) else {
        return Ok((
            WakeTags {
                weights: true,
                kv_cache: true,
            },
            json!(["weights", "kv_cache"]),
        ));
    };
    let mut tags = WakeTags {
        weights: false,
        kv_cache: false,
    };
    for t in &list {
        match t.as_str() {
            Some("weights") => tags.weights = true,
            Some("kv_cache") => tags.kv_cache = true,
            _ => {
                return Err(ApiError::unprocessable(format!(
                    "{route}: unknown wake tag {t} (expected \"weights\" or \"kv_cache\")"
                )))
            }
        }
    }
    Ok((tags, Value::Array(list)))
}

fn wake_job(s: &Shared, id: u64, body: Option<&Value>, route: &str) -> ApiResult {
    let (tags, tag_list) = wake_tags(body, route)?;
    let job = s.job_checked(id, &[JobType::Sampling], route)?;
    let (next, status) = wake_transition(job.sampling, tags)
        .map_err(|e| ApiError::bad_request(format!("{route}: job {id}: {e}")))?;
    s.set_sampling_state(id, next);
    if status != "already_ready" {
        s.engine.sleep_changed(id, false);
    }
    // `already_ready` carries no tags.
    let mut sampling = Map::new();
    sampling.insert("status".into(), json!(status));
    if status != "already_ready" {
        sampling.insert("tags".into(), tag_list);
    }
    let worker = Value::Object(sampling.clone());
    ok_json(json!({"job_id": id, "sampling": sampling, "workers": [worker]}))
}

fn reset_job(s: &Shared, id: u64, route: &str) -> ApiResult {
    s.job_checked(id, &[JobType::Sampling], route)?;
    ok_json(json!({"job_id": id, "sampling": {"status": "prefix_cache_reset"}}))
}

async fn sync_weights(
    s: &Arc<Shared>,
    job_id: Option<u64>,
    payload: &Map<String, Value>,
    route: &str,
) -> ApiResult {
    let source = match payload.get("source_sub_job_id") {
        None | Some(Value::Null) => job_id,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            ApiError::unprocessable(format!(
                "{route}: source_sub_job_id must be a job id, got {v}"
            ))
        })?),
    }
    .ok_or_else(|| ApiError::unprocessable(format!("{route}: missing source_sub_job_id")))?;
    let targets: Vec<u64> = match payload.get("target_sub_job_ids") {
        Some(Value::Array(a)) => a
            .iter()
            .map(Value::as_u64)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::unprocessable(format!(
                    "{route}: target_sub_job_ids must be a list of job ids"
                ))
            })?,
        Some(Value::Number(n)) => vec![n.as_u64().ok_or_else(|| {
            ApiError::unprocessable(format!("{route}: target_sub_job_ids must be job ids"))
        })?],
        _ => {
            return Err(ApiError::unprocessable(format!(
                "{route}: missing target_sub_job_ids"
            )))
        }
    };
    if targets.is_empty() {
        return Err(ApiError::unprocessable(format!(
            "{route}: target_sub_job_ids is empty"
        )));
    }
    s.job_checked(source, &[JobType::Training], route)?;
    for &t in &targets {
        let job = s.job_checked(t, &[JobType::Sampling], route)?;
        if job.sampling == SamplingState::Sleeping {
            return Err(ApiError::bad_request(format!(
                "{route}: sampling job {t} is SLEEPING: wake [\"weights\"] before syncing weights into it"
            )));
        }
    }
    let out = {
        let targets = targets.clone();
        engine_task(s, move |e| e.weight_sync(source, &targets)).await?
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"job_id": job_id.unwrap_or(source), "status": "ok"}),
        out.sim_seconds,
    ))
}

async fn sleep_inference(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let mut body = json_object(body, "/sleep-inference")?;
    // `level` may come as a query parameter too.
    if !body.contains_key("level") {
        if let Some(l) = query_param(&uri, "level") {
            let v = l
                .parse::<u64>()
                .map(Value::from)
                .unwrap_or(Value::String(l));
            body.insert("level".into(), v);
        }
    }
    sleep_job(&s, id, &body, "/sleep-inference")
}

/// Offload (`sleep`) or reload a DeepSpeed engine: the training job, or a log_prob job. A
/// log_prob job on vLLM has no DeepSpeed workers: `workers: []`.
fn offload_job(
    s: &Shared,
    id: u64,
    sleep: Option<&str>,
    kinds: &[JobType],
    route: &str,
) -> ApiResult {
    let job = s.job_checked(id, kinds, route)?;
    if job.job_type == JobType::LogProb && !job.config.is_deepspeed() {
        return ok_json(json!({"job_id": id, "workers": []}));
    }
    let status = {
        let mut t = lock(&s.table);
        let j = t
            .jobs
            .get_mut(&id)
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("job {id} not found")))?;
        match sleep {
            Some(mode) => {
                let status = match mode {
                    "all" => "offloaded",
                    "non_lp" => "offloaded_non_lp",
                    "lp_params" => "offloaded_lp",
                    other => {
                        return Err(ApiError::unprocessable(format!(
                            "{route}: mode must be all, non_lp or lp_params, got {other:?}"
                        )))
                    }
                };
                if j.offloaded == Some(status) {
                    "already_offloaded"
                } else {
                    j.offloaded = Some(status);
                    status
                }
            }
            None => {
                if j.offloaded.take().is_some() {
                    "on_gpu"
                } else {
                    "already_on_gpu"
                }
            }
        }
    };
    if !status.starts_with("already_") {
        s.engine.sleep_changed(id, sleep.is_some());
    }
    ok_json(json!({"job_id": id, "workers": [{"status": status}]}))
}

/// `mode` of `/sleep-training`, from the query or the body (default `all`).
fn sleep_mode(uri: &Uri, body: &Map<String, Value>) -> String {
    body.get("mode")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| query_param(uri, "mode"))
        .unwrap_or_else(|| "all".to_string())
}

async fn sleep_training(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let body = json_object(body, "/sleep-training")?;
    let mode = sleep_mode(&uri, &body);
    offload_job(&s, id, Some(&mode), &[JobType::Training], "/sleep-training")
}

async fn wake_training(State(s): State<Arc<Shared>>, uri: Uri) -> ApiResult {
    let id = require_job_id(&uri)?;
    offload_job(&s, id, None, &[JobType::Training], "/wake-training")
}

async fn empty_training_cache(State(s): State<Arc<Shared>>, uri: Uri) -> ApiResult {
    let id = require_job_id(&uri)?;
    s.job_checked(id, &[JobType::Training], "/empty-training-cache")?;
    ok_json(json!({"job_id": id, "workers": [{"status": "cache_emptied"}]}))
}

async fn sleep_log_prob(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let body = json_object(body, "/sleep-log-prob")?;
    let mode = sleep_mode(&uri, &body);
    offload_job(&s, id, Some(&mode), &[JobType::LogProb], "/sleep-log-prob")
}

async fn wake_log_prob(State(s): State<Arc<Shared>>, uri: Uri) -> ApiResult {
    let id = require_job_id(&uri)?;
    offload_job(&s, id, None, &[JobType::LogProb], "/wake-log-prob")
}

async fn wake_inference(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let body = json_body(body, "/wake-inference")?;
    wake_job(&s, id, body.as_ref(), "/wake-inference")
}

async fn reset_prefix_cache(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    json_body(body, "/reset-prefix-cache")?;
    reset_job(&s, id, "/reset-prefix-cache")
}

async fn weight_sync(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = job_id_from_query(&uri)?;
    let body = json_object(body, "/weight-sync")?;
    sync_weights(&s, id, &body, "/weight-sync").await
}

async fn operation(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let route = "/operation";
    let query_id = job_id_from_query(&uri)?;
    let body = json_object(body, route)?;
    let op = body
        .get("operation_type")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::unprocessable("/operation: missing operation_type"))?
        .to_string();
    let sub_job_id = match body.get("sub_job_id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            ApiError::unprocessable(format!("/operation: sub_job_id must be a job id, got {v}"))
        })?),
    };
    let payload = body.get("payload").cloned().unwrap_or(Value::Null);
    let target = || {
        sub_job_id.or(query_id).ok_or_else(|| {
            ApiError::unprocessable(format!("/operation {op}: needs sub_job_id or job_id"))
        })
    };
    let payload_object = |p: &Value| match p {
        Value::Null => Ok(Map::new()),
        Value::Object(m) => Ok(m.clone()),
        other => Err(ApiError::unprocessable(format!(
            "/operation {op}: payload must be an object, got {other}"
        ))),
    };
    match op.as_str() {
        "weight-sync" => {
            let p = payload_object(&payload)?;
            sync_weights(&s, query_id.or(sub_job_id), &p, "/operation weight-sync").await
        }
        "reset-prefix-cache" => reset_job(&s, target()?, "/operation reset-prefix-cache"),
        "sleep-inference" => {
            let p = payload_object(&payload)?;
            sleep_job(&s, target()?, &p, "/operation sleep-inference")
        }
        "wake-inference" => wake_job(&s, target()?, Some(&payload), "/operation wake-inference"),
        other => Err(ApiError::bad_request(format!(
            "/operation: unknown operation_type {other:?} (known: weight-sync, reset-prefix-cache, sleep-inference, wake-inference)"
        ))),
    }
}

async fn weight_norm(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body = json_object(body, "/weight-norm")?;
    let id_of = |key: &str| {
        body.get(key).and_then(Value::as_u64).ok_or_else(|| {
            ApiError::unprocessable(format!("/weight-norm: missing or invalid {key}"))
        })
    };
    let (train, sample) = (id_of("training_job_id")?, id_of("sampling_job_id")?);
    s.job_checked(train, &[JobType::Training], "/weight-norm")?;
    s.job_checked(sample, &[JobType::Sampling], "/weight-norm")?;
    let ((tn, tp), (sn, sp)) = engine_task(&s, move |e| {
        Ok((e.weight_norm(train)?, e.weight_norm(sample)?))
    })
    .await?;
    ok_json(json!({
        "training_norm": tn,
        "sampling_norm": sn,
        "training_num_params": tp,
        "sampling_num_params": sp,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: WakeTags = WakeTags {
        weights: true,
        kv_cache: true,
    };
    const WEIGHTS: WakeTags = WakeTags {
        weights: true,
        kv_cache: false,
    };
    const KV: WakeTags = WakeTags {
        weights: false,
        kv_cache: true,
    };

    #[test]
    fn wake_follows_the_reference_state_machine() {
        use SamplingState::*;
        assert_eq!(
            wake_transition(Sleeping, WEIGHTS),
            Ok((WeightsReady, "weights_ready"))
        );
        assert_eq!(wake_transition(WeightsReady, KV), Ok((Ready, "ready")));
        assert_eq!(wake_transition(Sleeping, ALL), Ok((Ready, "ready")));
        assert_eq!(
            wake_transition(Ready, WEIGHTS),
            Ok((Ready, "already_ready"))
        );
        assert!(wake_transition(Sleeping, KV)
            .unwrap_err()
            .contains("weights"));
    }

    #[test]
    fn job_ids_come_from_the_query() {
        let uri: Uri = "/step?x=1&job_id=12".parse().unwrap();
        assert_eq!(job_id_from_query(&uri), Ok(Some(12)));
        let uri: Uri = "/step?job_id=-3".parse().unwrap();
        assert_eq!(
            job_id_from_query(&uri).unwrap_err().status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let uri: Uri = "/step".parse().unwrap();
        assert_eq!(job_id_from_query(&uri), Ok(None));
    }
}
