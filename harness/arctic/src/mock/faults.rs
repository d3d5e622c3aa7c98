//! Scripted faults of the mock server: a layer in front of the shared Arctic router that adds
//! latency, answers an error, drops the connection mid-body, never answers, corrupts a reply
//! (NaN, wrong shape), puts the sampler to sleep or restarts the server, by step and call or
//! by probability, deterministic per seed.
//!
//! The server does not know the trainer's step, so the layer counts it from the traffic: a new
//! step begins with the first `/generate` (or full `/wake-inference`) after a weight sync, the
//! way every GRPO step starts with a rollout and ends with a sync. Calls are numbered per route
//! within a step (per route over the run when a fault names no step), in arrival order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::policy;
use crate::server::ServerHandle;
use crate::wire::{decode, encode, Node, Tensor};

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FaultKind {
    /// The answer comes `seconds` late.
    Latency,
    /// An error answer with `status` (a 5xx or a 4xx) instead of the real one.
    HttpError,
    /// The request is handled, then the connection drops after `after_bytes` of the body.
    Drop,
    /// The request is never answered.
    Stall,
    /// `/step` runs, then its `grad_norm` is NaN: the real server cannot encode that as JSON
    /// and answers a plain-text 500 `Internal Server Error`.
    NanGradNorm,
    /// `/forward` answers a NaN in the first row of `batch.logprobs`.
    NanLogprobs,
    /// `/forward` answers `batch.logprobs` one column short.
    WrongShape,
    /// Every sampling engine goes to sleep just before the request, unasked.
    SamplerSleep,
    /// The server restarts just before the request and forgets every job (404 afterwards).
    Restart,
}

impl FaultKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FaultKind::Latency => "latency",
            FaultKind::HttpError => "http_error",
            FaultKind::Drop => "drop",
            FaultKind::Stall => "stall",
            FaultKind::NanGradNorm => "nan_grad_norm",
            FaultKind::NanLogprobs => "nan_logprobs",
            FaultKind::WrongShape => "wrong_shape",
            FaultKind::SamplerSleep => "sampler_sleep",
            FaultKind::Restart => "restart",
        }
    }

    /// The route a fault applies to when the script names none: where the corrupted value
    /// lives, or every route.
    fn default_route(self) -> Option<&'static str> {
        match self {
            FaultKind::NanGradNorm => Some("/step"),
            FaultKind::NanLogprobs | FaultKind::WrongShape => Some("/forward"),
            FaultKind::SamplerSleep => Some("/generate"),
            _ => None,
        }
    }
}

/// Where a fault strikes: `{step: 3, route: /step, call: 1}`; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FaultAt {
    pub(crate) step: Option<u64>,
    pub(crate) route: Option<String>,
    /// The K-th matching call (1-based); 1 when neither `call` nor `probability` is given.
    pub(crate) call: Option<u64>,
}

/// One scripted fault of `backend.faults`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub(crate) fault: FaultKind,
    #[serde(default)]
    pub(crate) at: FaultAt,
    /// Each matching call is hit with this probability instead of at `at.call`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) probability: Option<f64>,
    /// How many matching calls in a row are hit from `at.call` on (a transient fault is 1 or
    /// 2, a persistent one large). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) times: Option<u64>,
    /// `http_error`: the status answered (default 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    /// `latency`: seconds added (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) seconds: Option<f64>,
    /// `drop`: bytes of the body sent before the connection drops (default: half of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) after_bytes: Option<usize>,
}

impl FaultSpec {
    /// What is wrong with the fault, if anything (`index` is its place in `faults`).
    pub(crate) fn validate(&self, index: usize) -> Result<(), String> {
        let at = format!("faults[{index}] ({})", self.fault.as_str());
        if let Some(p) = self.probability {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{at}: probability must be in [0, 1], got {p}"));
            }
            if self.at.call.is_some() {
                return Err(format!(
                    "{at}: give either at.call or probability, not both"
                ));
            }
        }
        if self.at.call == Some(0) || self.at.step == Some(0) || self.times == Some(0) {
            return Err(format!("{at}: at.step, at.call and times count from 1"));
        }
        if let Some(r) = &self.at.route {
            if !r.starts_with('/') {
                return Err(format!(
                    "{at}: at.route must be a path like /step, got {r:?}"
                ));
            }
        }
        let only = |field: &str, kind: FaultKind, set: bool| {
            if set && self.fault != kind {
                Err(format!(
                    "{at}: `{field}` applies to the {} fault only",
                    kind.as_str()
                ))
            } else {
                Ok(())
            }
        };
        only("status", FaultKind::HttpError, self.status.is_some())?;
        only("seconds", FaultKind::Latency, self.seconds.is_some())?;
        only("after_bytes", FaultKind::Drop, self.after_bytes.is_some())?;
        if let Some(s) = self.status {
            if !(400..600).contains(&s) {
                return Err(format!("{at}: status must be a 4xx or 5xx, got {s}"));
            }
        }
        if let Some(s) = self.seconds {
            if !(s.is_finite() && (0.0..=3600.0).contains(&s)) {
                return Err(format!("{at}: seconds must be in [0, 3600], got {s}"));
            }
        }
        Ok(())
    }

    fn route(&self) -> Option<&str> {
        self.at.route.as_deref().or(self.fault.default_route())
    }

    /// Whether the `call`-th matching call (1-based) of `route` in `step` is hit.
    fn strikes(&self, index: usize, seed: u64, step: u64, route: &str, call: u64) -> bool {
        if self.at.step.is_some_and(|s| s != step) {
            return false;
        }
        if self.route().is_some_and(|r| r != route) {
            return false;
        }
        match self.probability {
            Some(p) => {
                let h = policy::hash_words(&[
                    seed,
                    0xFA17,
                    index as u64,
                    step,
                    policy::hash_text(route),
                    call,
                ]);
                policy::unit(h) < p
            }
            None => {
                let first = self.at.call.unwrap_or(1);
                let times = self.times.unwrap_or(1);
                call >= first && call - first < times
            }
        }
    }
}

/// A fault of a script that cannot be injected: which one and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FaultError(pub(crate) String);

/// Validate every fault of a script.
pub(crate) fn validate(faults: &[FaultSpec]) -> Result<(), FaultError> {
    faults
        .iter()
        .enumerate()
        .try_for_each(|(i, f)| f.validate(i))
        .map_err(FaultError)
}

#[derive(Debug, Default)]
struct Traffic {
    step: u64,
    /// An optimizer step was answered since the current step began: the next request that
    /// starts a rollout starts the next step (whether the weight sync comes before the
    /// rollout, as when colocated, or after the update).
    trained: bool,
    /// Calls per (step, route) and per route over the run.
    calls: HashMap<(u64, String), u64>,
    run_calls: HashMap<String, u64>,
}

struct FaultState {
    faults: Vec<FaultSpec>,
    seed: u64,
    server: ServerHandle,
    traffic: Mutex<Traffic>,
}

impl FaultState {
    fn traffic(&self) -> MutexGuard<'_, Traffic> {
        crate::util::lock(&self.traffic)
    }
}

/// Put the scripted faults in front of a router built by `server::router`. `seed` is the
/// mock's seed (the script's own, else the scenario's): probabilistic faults follow it.
pub fn inject(router: Router, server: ServerHandle, faults: &[FaultSpec], seed: u64) -> Router {
    if faults.is_empty() {
        return router;
    }
    let state = Arc::new(FaultState {
        faults: faults.to_vec(),
        seed,
        server,
        traffic: Mutex::new(Traffic {
            step: 1,
            ..Traffic::default()
        }),
    });
    router.layer(axum::middleware::from_fn_with_state(state, fault_layer))
}

/// A request that starts a rollout: `/generate`, or a wake of the whole sampling engine.
fn starts_rollout(route: &str, body: &[u8]) -> bool {
    match route {
        "/generate" => true,
        "/wake-inference" => match serde_json::from_slice::<Value>(body) {
            Err(_) => body.iter().all(u8::is_ascii_whitespace),
            Ok(Value::Null) => true,
            Ok(Value::Array(tags)) => {
                let has = |t: &str| tags.iter().any(|v| v.as_str() == Some(t));
                has("weights") && has("kv_cache")
            }
            Ok(Value::Object(m)) => match m.get("tags") {
                Some(Value::Array(tags)) => {
                    let has = |t: &str| tags.iter().any(|v| v.as_str() == Some(t));
                    has("weights") && has("kv_cache")
                }
                _ => true,
            },
            Ok(_) => false,
        },
        _ => false,
    }
}

/// An injected error answer in the real server's shape: a 500 is plain text, anything else
/// (a proxy's 503, a deliberate 4xx) carries `{"detail": ...}`.
fn error_answer(status: StatusCode, detail: String) -> Response {
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        return crate::server::internal_server_error(&detail);
    }
    let mut resp = Response::new(Body::from(json!({ "detail": detail }).to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

async fn fault_layer(State(s): State<Arc<FaultState>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let route = parts.uri.path().to_string();
    // The mock's own limit applies behind this layer; here a body is read only to count steps.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            return error_answer(
                StatusCode::BAD_REQUEST,
                format!("failed to read the request body of {route}: {e}"),
            )
        }
    };
    let optimizer_step = route == "/step";
    let (step, hits) = {
        let mut t = s.traffic();
        if t.trained && starts_rollout(&route, &bytes) {
            t.step += 1;
            t.trained = false;
        }
        let step = t.step;
        let in_step = {
            let c = t.calls.entry((step, route.clone())).or_insert(0);
            *c += 1;
            *c
        };
        let in_run = {
            let c = t.run_calls.entry(route.clone()).or_insert(0);
            *c += 1;
            *c
        };
        let hits: Vec<FaultSpec> = s
            .faults
            .iter()
            .enumerate()
            .filter(|(i, f)| {
                let call = if f.at.step.is_some() { in_step } else { in_run };
                f.strikes(*i, s.seed, step, &route, call)
            })
            .map(|(_, f)| f.clone())
            .collect();
        (step, hits)
    };
    let what = |f: &FaultSpec| {
        format!(
            "injected fault {} on {route} at step {step} (mock fault script)",
            f.fault.as_str()
        )
    };
    let mut after: Vec<FaultSpec> = Vec::new();
    for f in hits {
        tracing::info!("{}", what(&f));
        match f.fault {
            FaultKind::Latency => {
                tokio::time::sleep(Duration::from_secs_f64(f.seconds.unwrap_or(1.0))).await;
            }
            FaultKind::HttpError => {
                let status = StatusCode::from_u16(f.status.unwrap_or(503))
                    .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
                return error_answer(status, what(&f));
            }
            FaultKind::Stall => std::future::pending::<()>().await,
            FaultKind::SamplerSleep => s.server.put_samplers_to_sleep(),
            FaultKind::Restart => s.server.restart(),
            FaultKind::Drop
            | FaultKind::NanGradNorm
            | FaultKind::NanLogprobs
            | FaultKind::WrongShape => after.push(f),
        }
    }
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if optimizer_step && resp.status().is_success() {
        s.traffic().trained = true;
    }
    let mut resp = resp;
    for f in after {
        resp = match f.fault {
            FaultKind::Drop => drop_mid_body(resp, f.after_bytes).await,
            FaultKind::NanGradNorm if resp.status().is_success() => {
                crate::server::internal_server_error(&what(&f))
            }
            FaultKind::NanLogprobs => {
                rewrite(resp, |b| corrupt_logprobs(b, Corruption::NanFirstRow)).await
            }
            FaultKind::WrongShape => {
                rewrite(resp, |b| corrupt_logprobs(b, Corruption::DropLastColumn)).await
            }
            _ => resp,
        };
    }
    resp
}

/// Send the first `after` bytes of the answer (half of it by default), then fail the body so
/// the connection is cut mid-body.
async fn drop_mid_body(resp: Response, after: Option<usize>) -> Response {
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    // A chunked answer: the status line and the first bytes go out before the cut.
    parts.headers.remove(header::CONTENT_LENGTH);
    let cut = after
        .unwrap_or(bytes.len() / 2)
        .min(bytes.len().saturating_sub(1));
    let head = bytes.slice(..cut);
    // The cut comes a moment after the first bytes, so they are flushed to the peer first
    // (an error ready at once would abort the connection before the status line).
    let cut_off = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err::<Bytes, _>(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "injected fault drop: connection dropped mid-body",
        ))
    };
    let stream = futures_util::stream::iter([Ok(head)]).chain(futures_util::stream::once(cut_off));
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Rewrite a successful answer's body; an error answer or a body `f` cannot read is kept.
async fn rewrite(resp: Response, f: impl FnOnce(&Bytes) -> Option<Vec<u8>>) -> Response {
    if !resp.status().is_success() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let out = f(&bytes).unwrap_or_else(|| bytes.to_vec());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}

/// What [`corrupt_logprobs`] does to `batch.logprobs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Corruption {
    /// Its first row NaN.
    NanFirstRow,
    /// One column short.
    DropLastColumn,
}

/// `batch.logprobs` corrupted as `how` says.
fn corrupt_logprobs(body: &Bytes, how: Corruption) -> Option<Vec<u8>> {
    let mut root = decode(body.clone()).ok()?;
    let Node::Dict(entries) = &mut root else {
        return None;
    };
    let (_, batch) = entries.iter_mut().find(|(k, _)| k == "batch")?;
    let Node::Dict(tensors) = batch else {
        return None;
    };
    let (_, node) = tensors.iter_mut().find(|(k, _)| k == "logprobs")?;
    let Node::Tensor { tensor, .. } = node else {
        return None;
    };
    let [b, s] = tensor.shape[..] else {
        return None;
    };
    let mut values = tensor.to_f32_vec();
    *tensor = if how == Corruption::DropLastColumn && s > 0 {
        let cut: Vec<f32> = values
            .chunks(s)
            .flat_map(|row| row[..s - 1].iter().copied())
            .collect();
        Tensor::from_f32(vec![b, s - 1], &cut).ok()?
    } else {
        for v in values.iter_mut().take(s) {
            *v = f32::NAN;
        }
        Tensor::from_f32(vec![b, s], &values).ok()?
    };
    encode(&root).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> FaultSpec {
        serde_json::from_value(serde_json::from_str::<Value>(yaml).unwrap()).unwrap()
    }

    #[test]
    fn a_fault_strikes_its_call_and_the_following_times() {
        let f = spec(
            r#"{"fault": "http_error", "at": {"step": 2, "route": "/generate", "call": 2}, "times": 2}"#,
        );
        let hit: Vec<u64> = (1..6)
            .filter(|&c| f.strikes(0, 1, 2, "/generate", c))
            .collect();
        assert_eq!(hit, vec![2, 3]);
        assert!(!f.strikes(0, 1, 3, "/generate", 2), "another step");
        assert!(!f.strikes(0, 1, 2, "/forward", 2), "another route");
    }

    #[test]
    fn a_corrupting_fault_defaults_to_the_route_holding_the_value() {
        let f = spec(r#"{"fault": "nan_grad_norm", "at": {"step": 1}}"#);
        assert!(f.strikes(0, 1, 1, "/step", 1));
        assert!(!f.strikes(0, 1, 1, "/forward", 1));
    }

    #[test]
    fn probabilistic_faults_follow_the_seed() {
        let f = spec(r#"{"fault": "latency", "probability": 0.3}"#);
        let pattern = |seed| -> Vec<bool> {
            (1..200)
                .map(|c| f.strikes(0, seed, 1, "/forward", c))
                .collect()
        };
        assert_eq!(pattern(7), pattern(7));
        assert_ne!(pattern(7), pattern(8));
        let rate = pattern(7).iter().filter(|&&b| b).count() as f64 / 199.0;
        assert!((0.2..0.4).contains(&rate), "{rate}");
    }

    #[test]
    fn bad_fault_scripts_are_refused_with_the_field() {
        let e = spec(r#"{"fault": "latency", "probability": 1.5}"#)
            .validate(0)
            .unwrap_err();
        assert!(e.contains("faults[0] (latency): probability"), "{e}");
        let e = spec(r#"{"fault": "drop", "status": 503}"#)
            .validate(2)
            .unwrap_err();
        assert!(
            e.contains("`status` applies to the http_error fault only"),
            "{e}"
        );
        let e = spec(r#"{"fault": "http_error", "status": 200}"#)
            .validate(0)
            .unwrap_err();
        assert!(e.contains("4xx or 5xx"), "{e}");
        let e = spec(r#"{"fault": "stall", "at": {"call": 0}}"#)
            .validate(0)
            .unwrap_err();
        assert!(e.contains("count from 1"), "{e}");
        let e = spec(r#"{"fault": "restart", "at": {"route": "step"}}"#)
            .validate(0)
            .unwrap_err();
        assert!(e.contains("a path like /step"), "{e}");
    }

    #[test]
    fn a_step_begins_at_the_rollout_after_an_optimizer_step() {
        assert!(starts_rollout("/generate", b""));
        assert!(starts_rollout("/wake-inference", b""));
        assert!(starts_rollout(
            "/wake-inference",
            br#"["weights","kv_cache"]"#
        ));
        assert!(!starts_rollout("/wake-inference", br#"["weights"]"#));
    }

    #[test]
    fn corrupted_logprobs_hold_a_nan_row_or_lose_a_column() {
        let t = Tensor::from_f32(vec![2, 3], &[-1.0; 6]).unwrap();
        let root = Node::dict([("batch", Node::dict([("logprobs", Node::tensor(t))]))]);
        let bytes = Bytes::from(encode(&root).unwrap());
        // The logprobs tensor of the corrupted message.
        let corrupted = |how: Corruption| {
            let root = decode(Bytes::from(corrupt_logprobs(&bytes, how).unwrap())).unwrap();
            root.get("batch")
                .unwrap()
                .get("logprobs")
                .unwrap()
                .as_tensor()
                .unwrap()
                .clone()
        };
        let v = corrupted(Corruption::NanFirstRow).to_f32_vec();
        assert!(v[..3].iter().all(|x| x.is_nan()) && v[3..].iter().all(|x| *x == -1.0));
        assert_eq!(corrupted(Corruption::DropLastColumn).shape, vec![2, 2]);
    }
}
