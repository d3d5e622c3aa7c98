//! What reached a server, seen from outside it: a layer that wraps the router and notes every
//! request (route pattern, job id, status, the JSON body, and for binary routes the `meta` and
//! JSON part the server parsed, which its handlers attach to the response). The production
//! server keeps no such record.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use rlharness_arctic::server::ParsedRequest;
use serde_json::Value;

/// One request as the server answered it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The route pattern (`/job/{job_id}` rather than `/job/3`).
    pub route: String,
    pub job_id: Option<u64>,
    pub status: u16,
    /// `meta` of `/forward` and `/forward-backward` as the server read it.
    pub meta: Option<Value>,
    /// The JSON body as sent; for binary routes the JSON part of the tree (no tensors).
    pub body: Option<Value>,
}

/// The requests seen so far, in order of completion, and the JobConfigs that created a job.
#[derive(Clone, Default)]
pub struct Recorder {
    requests: Arc<Mutex<Vec<Recorded>>>,
    configs: Arc<Mutex<Vec<(u64, Value)>>>,
}

impl Recorder {
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Every JobConfig that created a job, as sent (unknown keys kept), with the job's id.
    pub fn job_configs(&self) -> Vec<(u64, Value)> {
        self.configs.lock().unwrap().clone()
    }
}

/// Wrap `router` so that every request it answers is recorded.
pub fn wrap(router: Router) -> (Router, Recorder) {
    let recorder = Recorder::default();
    let r = recorder.clone();
    let router = router.layer(axum::middleware::from_fn(move |req, next| {
        record(r.clone(), req, next)
    }));
    (router, recorder)
}

async fn record(rec: Recorder, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let json_body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let path = parts.uri.path().to_string();
    let mut job_id = parts.uri.query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("job_id="))
            .and_then(|v| v.parse().ok())
    });
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
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let status = resp.status().as_u16();
    let (meta, body) = match resp.extensions().get::<ParsedRequest>() {
        Some(p) => (p.meta.clone(), p.body.clone()),
        None => (None, json_body.clone()),
    };
    let resp = if route == "/initialize" && resp.status().is_success() {
        let (head, answer) = resp.into_parts();
        let answer = axum::body::to_bytes(answer, usize::MAX).await.unwrap();
        let id = serde_json::from_slice::<Value>(&answer).unwrap()["job_id"].as_u64();
        if let (Some(id), Some(config)) = (id, json_body) {
            rec.configs.lock().unwrap().push((id, config));
        }
        Response::from_parts(head, Body::from(answer))
    } else {
        resp
    };
    rec.requests.lock().unwrap().push(Recorded {
        route,
        job_id,
        status,
        meta,
        body,
    });
    resp
}
