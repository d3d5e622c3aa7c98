//! An Arctic API client over HTTP (the builtin driver's transport). Every call returns the
//! duration the backend reported (`x-rlharness-sim-seconds`) when there is one, else wall time.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Map, Value};

use rlharness_arctic::wire::api::{JobConfig, SIM_DURATION_HEADER};
use rlharness_arctic::wire::digest::WEIGHT_DIGEST_ROUTE;
use rlharness_arctic::wire::{self, Node};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("{route}: HTTP {status}: {detail}")]
    Status {
        route: String,
        status: u16,
        detail: String,
    },
    #[error("{route}: transport error: {message}")]
    Transport { route: String, message: String },
    #[error("{route}: request timed out after {secs:.0} s")]
    Timeout { route: String, secs: f64 },
    #[error("{route}: bad response: {message}")]
    BadResponse { route: String, message: String },
}

impl ClientError {
    /// The final error of a call sent `attempts` times.
    fn after_attempts(self, attempts: u32) -> Self {
        let note = format!(" (gave up after {attempts} attempts)");
        match self {
            ClientError::Status {
                route,
                status,
                detail,
            } => ClientError::Status {
                route,
                status,
                detail: detail + &note,
            },
            ClientError::Transport { route, message } => ClientError::Transport {
                route,
                message: message + &note,
            },
            other => other,
        }
    }

    /// The HTTP status of an error answer.
    #[cfg(test)]
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(crate) fn route(&self) -> &str {
        match self {
            ClientError::Status { route, .. }
            | ClientError::Transport { route, .. }
            | ClientError::Timeout { route, .. }
            | ClientError::BadResponse { route, .. } => route,
        }
    }
}

/// Which failed calls the client sends again, and how long it waits in between.
///
/// The real on-prem client never resends (its first non-2xx answer raises; only its health and
/// job polls tolerate errors), so the default policy is [`RetryPolicy::none`]. A scenario may
/// opt in (`driver.retry`) to this conservative policy:
/// - a request that never reached the server (connection refused or reset before it was
///   sent) is sent again on any route;
/// - a 502, 503 or 504, or a connection lost while the answer was coming, is retried on the
///   idempotent routes only: every GET (health, job and status polls) and the POSTs whose
///   repetition leaves the training as one call would (`/generate`, where a repeat that the
///   server did serve draws one more sample of the same prompt, `/forward`, `/log-probs`,
///   `/weight-norm` and the rlharness extension `/weight-digest` (both only read weights),
///   sleep, wake, reset of the prefix cache and the operations wrapping them, and the weight
///   sync, which copies the same weights again);
/// - never `/initialize`, `/destroy`, `/forward-backward`, `/step`, `/save` or
///   `/load-checkpoint` once the server may have applied them: a second gradient
///   accumulation or optimizer step would silently change the training;
/// - never a time-out (the server may still be working; a retry doubles the wait), a 4xx or
///   a 500.
///
/// The backoff doubles from `first_backoff` up to `max_backoff`, for at most `attempts`
/// sends, so a retried call costs a few seconds at most before its error is final.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RetryPolicy {
    /// Sends in all, the first included (1: never retry).
    pub(crate) attempts: u32,
    pub(crate) first_backoff: Duration,
    pub(crate) max_backoff: Duration,
}

/// The default is the real on-prem client's behaviour: never send a call twice.
impl Default for RetryPolicy {
    fn default() -> Self {
        Self::none()
    }
}

impl RetryPolicy {
    /// Never send twice (the real client).
    pub(crate) fn none() -> Self {
        Self {
            attempts: 1,
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
        }
    }

    /// Up to four sends with a 200 ms backoff doubling to 2 s: an opt-in policy.
    #[cfg(test)]
    pub(crate) fn standard() -> Self {
        Self {
            attempts: 4,
            ..Self::none()
        }
    }

    /// The wait before send number `attempt + 1` (`attempt` counts from 1).
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.first_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// Whether sending `method route` twice leaves the server as sending it once.
pub(crate) fn idempotent(method: &str, route: &str) -> bool {
    if method == "GET" {
        return true;
    }
    let path = route.split('?').next().unwrap_or(route);
    matches!(
        path,
        "/health"
            | "/status"
            | "/generate"
            | "/forward"
            | "/log-probs"
            | "/weight-norm"
            | "/weight-digest"
            | "/sleep-inference"
            | "/wake-inference"
            | "/reset-prefix-cache"
            | "/weight-sync"
            | "/operation"
    )
}

/// How a send failed, for the retry decision.
enum Failure {
    /// The request never reached the server.
    NotSent,
    /// The server answered 502, 503 or 504, or the connection broke after the request went.
    Transient,
    /// Anything else: final.
    Final,
}

/// A response body with the time it took.
#[derive(Debug, Clone)]
pub(crate) struct Reply<T> {
    pub(crate) body: T,
    pub(crate) seconds: f64,
    /// Whether `seconds` came from the backend (simulated) rather than the wall clock.
    pub(crate) reported: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct ArcticClient {
    base: String,
    http: reqwest::Client,
    timeout: Duration,
    retry: RetryPolicy,
}

#[derive(Clone)]
enum Body {
    None,
    Json(Value),
    Frame(Bytes),
}

enum Payload {
    Json(Value),
    Frame(Node),
}

impl ArcticClient {
    /// `base` like `http://127.0.0.1:7000`; `timeout` bounds every request (the real client
    /// uses 1800 s).
    pub(crate) fn new(base: &str, timeout: Duration) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(64)
            .build()
            .map_err(|e| ClientError::Transport {
                route: "client".into(),
                message: e.to_string(),
            })?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            http,
            timeout,
            retry: RetryPolicy::default(),
        })
    }

    /// The same client with another retry policy.
    pub(crate) fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    async fn call(
        &self,
        method: &str,
        route: &str,
        body: Body,
    ) -> Result<Reply<Payload>, ClientError> {
        let may_repeat = idempotent(method, route);
        let mut attempt = 1;
        loop {
            let (err, failure) = match self.call_once(method, route, body.clone()).await {
                Ok(r) => return Ok(r),
                Err(e) => e,
            };
            let retry = match failure {
                Failure::NotSent => true,
                Failure::Transient => may_repeat,
                Failure::Final => false,
            };
            if !retry || attempt >= self.retry.attempts {
                return Err(if attempt > 1 {
                    err.after_attempts(attempt)
                } else {
                    err
                });
            }
            let wait = self.retry.backoff(attempt);
            tracing::warn!(
                "{err}; retrying in {:.1} s (attempt {})",
                wait.as_secs_f64(),
                attempt + 1
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// One attempt of a call: the reply, or the error with whether it may be tried again.
    async fn call_once(
        &self,
        method: &str,
        route: &str,
        body: Body,
    ) -> Result<Reply<Payload>, (ClientError, Failure)> {
        let url = format!("{}{}", self.base, route);
        let mut req = match method {
            "GET" => self.http.get(&url),
            _ => self.http.post(&url),
        }
        .timeout(self.timeout);
        req = match body {
            Body::None => req,
            Body::Json(v) => req.json(&v),
            Body::Frame(bytes) => req
                .header("content-type", "application/octet-stream")
                .body(bytes),
        };
        let started = Instant::now();
        let resp = req.send().await.map_err(|e| {
            let failure = if e.is_connect() {
                Failure::NotSent
            } else if e.is_timeout() {
                Failure::Final
            } else {
                Failure::Transient
            };
            (self.transport(route, e), failure)
        })?;
        let status = resp.status().as_u16();
        let sim = resp
            .headers()
            .get(SIM_DURATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse::<f64>().ok());
        let is_frame = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/octet-stream"));
        let bytes: Bytes = resp.bytes().await.map_err(|e| {
            let failure = if e.is_timeout() {
                Failure::Final
            } else {
                Failure::Transient
            };
            (self.transport(route, e), failure)
        })?;
        let wall = started.elapsed().as_secs_f64();
        if !(200..300).contains(&status) {
            return Err(status_error(route, status, &bytes));
        }
        let body = payload(route, bytes, is_frame)?;
        Ok(Reply {
            body,
            seconds: sim.unwrap_or(wall),
            reported: sim.is_some(),
        })
    }

    fn transport(&self, route: &str, e: reqwest::Error) -> ClientError {
        if e.is_timeout() {
            ClientError::Timeout {
                route: route.to_string(),
                secs: self.timeout.as_secs_f64(),
            }
        } else {
            let mut message = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                message.push_str(": ");
                message.push_str(&s.to_string());
                src = s.source();
            }
            ClientError::Transport {
                route: route.to_string(),
                message,
            }
        }
    }

    async fn json(
        &self,
        method: &str,
        route: &str,
        body: Body,
    ) -> Result<Reply<Value>, ClientError> {
        let r = self.call(method, route, body).await?;
        match r.body {
            Payload::Json(v) => Ok(Reply {
                body: v,
                seconds: r.seconds,
                reported: r.reported,
            }),
            Payload::Frame(_) => Err(ClientError::BadResponse {
                route: route.to_string(),
                message: "expected JSON, got a DSSST1 frame".into(),
            }),
        }
    }

    async fn frame(&self, route: &str, node: &Node) -> Result<Reply<Node>, ClientError> {
        let bytes = wire::encode(node).map_err(|e| ClientError::BadResponse {
            route: route.to_string(),
            message: e.to_string(),
        })?;
        let r = self
            .call("POST", route, Body::Frame(Bytes::from(bytes)))
            .await?;
        match r.body {
            Payload::Frame(n) => Ok(Reply {
                body: n,
                seconds: r.seconds,
                reported: r.reported,
            }),
            Payload::Json(_) => Err(ClientError::BadResponse {
                route: route.to_string(),
                message: "expected a DSSST1 frame, got JSON".into(),
            }),
        }
    }

    pub(crate) async fn health(&self) -> Result<(), ClientError> {
        self.json("GET", "/health", Body::None).await.map(|_| ())
    }

    /// `GET /job/{job}`: the job's record (the adapter reads it once a job is created).
    pub(crate) async fn job(&self, job: u64) -> Result<Reply<Value>, ClientError> {
        self.json("GET", &format!("/job/{job}"), Body::None).await
    }

    /// `POST /initialize`; returns the job id.
    pub(crate) async fn initialize(&self, config: &JobConfig) -> Result<u64, ClientError> {
        self.initialize_raw(config.to_onprem()).await
    }

    /// `POST /initialize` with a raw JobConfig body (the driver may add keys the typed config
    /// does not know, exactly as a buggy adapter would).
    pub(crate) async fn initialize_raw(&self, body: Value) -> Result<u64, ClientError> {
        let r = self.json("POST", "/initialize", Body::Json(body)).await?;
        r.body
            .get("job_id")
            .and_then(Value::as_u64)
            .ok_or_else(|| ClientError::BadResponse {
                route: "/initialize".into(),
                message: format!("no job_id in {}", r.body),
            })
    }

    pub(crate) async fn generate(
        &self,
        job: u64,
        request: &Node,
    ) -> Result<Reply<Node>, ClientError> {
        self.frame(&format!("/generate?job_id={job}"), request)
            .await
    }

    pub(crate) async fn forward(
        &self,
        job: u64,
        request: &Node,
    ) -> Result<Reply<Node>, ClientError> {
        self.frame(&format!("/forward?job_id={job}"), request).await
    }

    pub(crate) async fn forward_backward(
        &self,
        job: u64,
        request: &Node,
    ) -> Result<Reply<Node>, ClientError> {
        self.frame(&format!("/forward-backward?job_id={job}"), request)
            .await
    }

    pub(crate) async fn step(&self, job: u64) -> Result<Reply<Value>, ClientError> {
        self.json(
            "POST",
            &format!("/step?job_id={job}"),
            Body::Json(json!({"learning_rate": null})),
        )
        .await
    }

    pub(crate) async fn wake(
        &self,
        job: u64,
        tags: Option<&[&str]>,
    ) -> Result<Reply<Value>, ClientError> {
        let body = match tags {
            Some(t) => Body::Json(json!(t)),
            None => Body::None,
        };
        self.json("POST", &format!("/wake-inference?job_id={job}"), body)
            .await
    }

    pub(crate) async fn sleep(&self, job: u64, level: u32) -> Result<Reply<Value>, ClientError> {
        self.json(
            "POST",
            &format!("/sleep-inference?job_id={job}"),
            Body::Json(json!({"level": level})),
        )
        .await
    }

    /// `POST /operation` on the job that owns it (`job`), for a sub-job. The adapter's
    /// reset-prefix-cache envelope has no `sub_job_id` (`None` leaves the key out).
    pub(crate) async fn operation(
        &self,
        job: u64,
        operation_type: &str,
        sub_job_id: Option<u64>,
        sub_job_type: &str,
        payload: Value,
    ) -> Result<Reply<Value>, ClientError> {
        let mut body = Map::new();
        body.insert("operation_type".into(), json!(operation_type));
        if let Some(id) = sub_job_id {
            body.insert("sub_job_id".into(), json!(id));
        }
        body.insert("sub_job_type".into(), json!(sub_job_type));
        body.insert("payload".into(), payload);
        self.json(
            "POST",
            &format!("/operation?job_id={job}"),
            Body::Json(Value::Object(body)),
        )
        .await
    }

    /// `POST /weight-digest` (an rlharness extension, `wire::digest`): the digest manifests of
    /// the training job's and the sampling job's weights.
    pub(crate) async fn weight_digest(
        &self,
        training: u64,
        sampling: u64,
    ) -> Result<Reply<Value>, ClientError> {
        let body = json!({"training_job_id": training, "sampling_job_id": sampling});
        self.json("POST", WEIGHT_DIGEST_ROUTE, Body::Json(body))
            .await
    }

    pub(crate) async fn destroy(
        &self,
        job: u64,
        job_type: &str,
    ) -> Result<Reply<Value>, ClientError> {
        self.json(
            "POST",
            &format!("/destroy?job_id={job}"),
            Body::Json(json!({"job_type": job_type})),
        )
        .await
    }
}

/// The error of a reply with a non-2xx `status`: the server's `detail` (or the body's start);
/// a gateway's 502–504 may be tried again.
fn status_error(route: &str, status: u16, bytes: &[u8]) -> (ClientError, Failure) {
    let detail = serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("detail").cloned())
        .map(|d| match d {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned());
    let failure = if matches!(status, 502..=504) {
        Failure::Transient
    } else {
        Failure::Final
    };
    (
        ClientError::Status {
            route: route.to_string(),
            status,
            detail,
        },
        failure,
    )
}

/// A 2xx reply's body: a DSSST1 frame when it says so, else (lenient) JSON.
fn payload(route: &str, bytes: Bytes, is_frame: bool) -> Result<Payload, (ClientError, Failure)> {
    let bad = |message: String| {
        (
            ClientError::BadResponse {
                route: route.to_string(),
                message,
            },
            Failure::Final,
        )
    };
    if is_frame {
        wire::decode(bytes)
            .map(Payload::Frame)
            .map_err(|e| bad(e.to_string()))
    } else {
        rlharness_arctic::wire::api::parse_json_lenient(&bytes)
            .map(Payload::Json)
            .map_err(|e| bad(e.to_string()))
    }
}

#[cfg(test)]
mod tests;
