//! Training: `/forward`, `/forward-backward`, `/step`, `/save`, `/load-checkpoint`, and the
//! DeepSpeed engines' offload and reload (`/sleep-training`, `/wake-training`,
//! `/empty-training-cache`, and the same for a log_prob job).

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::server::answer::json_response;
use crate::server::batch::{model_batch, with_parts};
use crate::server::error::ApiError;
use crate::server::http::{
    body_bytes, frame_response, json_object, ok_json, query_param, require_job_id, ApiResult,
};
use crate::server::jobs::engine_task;
use crate::server::Shared;
use crate::util::lock;
use crate::wire::api::JobType;
use crate::wire::pyjson;
use crate::wire::{Node, Tensor};

pub(super) async fn forward(
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
    let root = Node::Dict(vec![
        ("job_id".into(), Node::Json(json!(id))),
        (
            "batch".into(),
            fwd_batch_node(out.value.logprobs, out.value.entropy),
        ),
        (
            "metrics".into(),
            Node::Json(Value::Object(out.value.metrics)),
        ),
        // A forward-only call answers `avg_loss: 0.0`, as the real server does.
        (
            "avg_loss".into(),
            Node::Json(pyjson::float(out.value.avg_loss.unwrap_or(0.0))),
        ),
    ]);
    Ok(with_parts(frame_response(&root, out.sim_seconds)?, parts))
}

/// A forward pass's `batch`: `logprobs`, then `entropy` when computed.
fn fwd_batch_node(logprobs: Tensor, entropy: Option<Tensor>) -> Node {
    let tensor = |tensor| Node::Tensor {
        tensor,
        scalar: false,
    };
    let mut batch = vec![("logprobs".to_string(), tensor(logprobs))];
    if let Some(ent) = entropy {
        batch.push(("entropy".to_string(), tensor(ent)));
    }
    Node::Dict(batch)
}

pub(super) async fn forward_backward(
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
    let wants_batch = mb.returns_fwd_batch();
    let out = engine_task(&s, move |e| e.forward_backward(id, &mb)).await?;
    let mut root = vec![
        ("job_id".to_string(), Node::Json(json!(id))),
        (
            "metrics".to_string(),
            Node::Json(Value::Object(out.value.metrics)),
        ),
        // A NaN loss travels as the `NaN` literal, never as `null`.
        (
            "avg_loss".to_string(),
            Node::Json(pyjson::float(out.value.avg_loss)),
        ),
    ];
    // 0.1.4: `meta.return_fwd_batch` adds the forward pass's per-token `batch`, as `/forward`
    // answers it; without it (and under 5864380) the answer has no `batch`.
    if wants_batch {
        let fwd = out.value.fwd_batch.ok_or_else(|| {
            ApiError::internal(
                "/forward-backward: meta.return_fwd_batch is set but the engine returned no forward batch",
            )
        })?;
        root.push((
            "batch".to_string(),
            fwd_batch_node(fwd.logprobs, fwd.entropy),
        ));
    }
    Ok(with_parts(
        frame_response(&Node::Dict(root), out.sim_seconds)?,
        parts,
    ))
}

pub(super) async fn step(
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

pub(super) async fn save(
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

pub(super) async fn load_checkpoint(
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

pub(super) async fn sleep_training(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let body = json_object(body, "/sleep-training")?;
    let mode = sleep_mode(&uri, &body);
    offload_job(&s, id, Some(&mode), &[JobType::Training], "/sleep-training")
}

pub(super) async fn wake_training(State(s): State<Arc<Shared>>, uri: Uri) -> ApiResult {
    let id = require_job_id(&uri)?;
    offload_job(&s, id, None, &[JobType::Training], "/wake-training")
}

pub(super) async fn empty_training_cache(State(s): State<Arc<Shared>>, uri: Uri) -> ApiResult {
    let id = require_job_id(&uri)?;
    s.job_checked(id, &[JobType::Training], "/empty-training-cache")?;
    ok_json(json!({"job_id": id, "workers": [{"status": "cache_emptied"}]}))
}

pub(super) async fn sleep_log_prob(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let body = json_object(body, "/sleep-log-prob")?;
    let mode = sleep_mode(&uri, &body);
    offload_job(&s, id, Some(&mode), &[JobType::LogProb], "/sleep-log-prob")
}

pub(super) async fn wake_log_prob(State(s): State<Arc<Shared>>, uri: Uri) -> ApiResult {
    let id = require_job_id(&uri)?;
    offload_job(&s, id, None, &[JobType::LogProb], "/wake-log-prob")
}
