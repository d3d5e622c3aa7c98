//! An Arctic API client over HTTP (the builtin driver's transport). Every call returns the
//! duration the backend reported (`x-rlharness-sim-seconds`) when there is one, else wall time.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use crate::wire::api::{JobConfig, SIM_DURATION_HEADER};
use crate::wire::{self, Node};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
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
    pub fn route(&self) -> &str {
        match self {
            ClientError::Status { route, .. }
            | ClientError::Transport { route, .. }
            | ClientError::Timeout { route, .. }
            | ClientError::BadResponse { route, .. } => route,
        }
    }
}

/// A response body with the time it took.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub body: T,
    pub seconds: f64,
    /// Whether `seconds` came from the backend (simulated) rather than the wall clock.
    pub reported: bool,
}

#[derive(Debug, Clone)]
pub struct ArcticClient {
    base: String,
    http: reqwest::Client,
    timeout: Duration,
}

enum Body {
    None,
    Json(Value),
    Frame(Vec<u8>),
}

enum Payload {
    Json(Value),
    Frame(Node),
}

impl ArcticClient {
    /// `base` like `http://127.0.0.1:7000`; `timeout` bounds every request (the real client
    /// uses 1800 s).
    pub fn new(base: &str, timeout: Duration) -> Result<Self, ClientError> {
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
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn call(
        &self,
        method: &str,
        route: &str,
        body: Body,
    ) -> Result<Reply<Payload>, ClientError> {
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
        let resp = req.send().await.map_err(|e| self.transport(route, e))?;
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
        let bytes: Bytes = resp.bytes().await.map_err(|e| self.transport(route, e))?;
        let wall = started.elapsed().as_secs_f64();
        if !(200..300).contains(&status) {
            let detail = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("detail").cloned())
                .map(|d| match d {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .unwrap_or_else(|| {
                    String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned()
                });
            return Err(ClientError::Status {
                route: route.to_string(),
                status,
                detail,
            });
        }
        let body = if is_frame {
            Payload::Frame(wire::decode(bytes).map_err(|e| ClientError::BadResponse {
                route: route.to_string(),
                message: e.to_string(),
            })?)
        } else {
            Payload::Json(crate::wire::api::parse_json_lenient(&bytes).map_err(|e| {
                ClientError::BadResponse {
                    route: route.to_string(),
                    message: e,
                }
            })?)
        };
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
        let r = self.call("POST", route, Body::Frame(bytes)).await?;
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

    pub async fn health(&self) -> Result<(), ClientError> {
        self.json("GET", "/health", Body::None).await.map(|_| ())
    }

    /// `POST /initialize`; returns the job id.
    pub async fn initialize(&self, config: &JobConfig) -> Result<u64, ClientError> {
        let body = serde_json::to_value(config).map_err(|e| ClientError::BadResponse {
            route: "/initialize".into(),
            message: e.to_string(),
        })?;
        self.initialize_raw(body).await
    }

    /// `POST /initialize` with a raw JobConfig body (the driver may add keys the typed config
    /// does not know, exactly as a buggy adapter would).
    pub async fn initialize_raw(&self, body: Value) -> Result<u64, ClientError> {
        let r = self.json("POST", "/initialize", Body::Json(body)).await?;
        r.body
            .get("job_id")
            .and_then(Value::as_u64)
            .ok_or_else(|| ClientError::BadResponse {
                route: "/initialize".into(),
                message: format!("no job_id in {}", r.body),
            })
    }

    pub async fn generate(&self, job: u64, request: &Node) -> Result<Reply<Node>, ClientError> {
        self.frame(&format!("/generate?job_id={job}"), request)
            .await
    }

    pub async fn forward(&self, job: u64, request: &Node) -> Result<Reply<Node>, ClientError> {
        self.frame(&format!("/forward?job_id={job}"), request).await
    }

    pub async fn forward_backward(
        &self,
        job: u64,
        request: &Node,
    ) -> Result<Reply<Node>, ClientError> {
        self.frame(&format!("/forward-backward?job_id={job}"), request)
            .await
    }

    pub async fn step(&self, job: u64) -> Result<Reply<Value>, ClientError> {
        self.json(
            "POST",
            &format!("/step?job_id={job}"),
            Body::Json(json!({"learning_rate": null})),
        )
        .await
    }

    pub async fn wake(&self, job: u64, tags: Option<&[&str]>) -> Result<Reply<Value>, ClientError> {
        let body = match tags {
            Some(t) => Body::Json(json!(t)),
            None => Body::None,
        };
        self.json("POST", &format!("/wake-inference?job_id={job}"), body)
            .await
    }

    pub async fn sleep(&self, job: u64, level: u32) -> Result<Reply<Value>, ClientError> {
        self.json(
            "POST",
            &format!("/sleep-inference?job_id={job}"),
            Body::Json(json!({"level": level})),
        )
        .await
    }

    /// `POST /operation` on the job that owns it (`job`), for a sub-job.
    pub async fn operation(
        &self,
        job: u64,
        operation_type: &str,
        sub_job_id: u64,
        sub_job_type: &str,
        payload: Value,
    ) -> Result<Reply<Value>, ClientError> {
        self.json(
            "POST",
            &format!("/operation?job_id={job}"),
            Body::Json(json!({
                "operation_type": operation_type,
                "sub_job_id": sub_job_id,
                "sub_job_type": sub_job_type,
                "payload": payload,
            })),
        )
        .await
    }

    pub async fn save(&self, job: u64, body: Value) -> Result<Reply<Value>, ClientError> {
        self.json("POST", &format!("/save?job_id={job}"), Body::Json(body))
            .await
    }

    pub async fn destroy(&self, job: u64, job_type: &str) -> Result<Reply<Value>, ClientError> {
        self.json(
            "POST",
            &format!("/destroy?job_id={job}"),
            Body::Json(json!({"job_type": job_type})),
        )
        .await
    }
}
