//! Sampling: `/generate`, `/log-probs`, the sleep/wake routes, `/reset-prefix-cache`, weight
//! sync, `/operation` (the same four as one route), `/weight-norm` and the rlharness extension
//! `/weight-digest`.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::engine::GenerateRequest;
use crate::server::answer::json_response;
use crate::server::batch::{with_parts, ParsedRequest};
use crate::server::error::ApiError;
use crate::server::frame::{node_to_json, object_entries};
use crate::server::http::{
    body_bytes, frame_response, job_id_from_query, json_body, json_object, ok_json, query_param,
    require_job_id, ApiResult,
};
use crate::server::jobs::{engine_task, wake_transition, SamplingState, WakeTags};
use crate::server::Shared;
use crate::wire::api::JobType;
use crate::wire::chunk::unwrap_request;
use crate::wire::digest::{WeightDigest, WEIGHT_DIGEST_ROUTE};
use crate::wire::{decode, Node};

pub(super) async fn generate(
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
    let root = decode(unwrap_request(body_bytes(body)?)?)?;
    let recorded = node_to_json(&root);
    let entries = object_entries(root, "/generate body")
        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
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
    let parts = ParsedRequest {
        meta: None,
        body: recorded.map(|mut b| {
            // Prompts can be long; a test sees their count and the sampling settings.
            if let Some(o) = b.as_object_mut() {
                o.insert("prompts".into(), json!(n_prompts));
            }
            b
        }),
    };
    Ok(with_parts(frame_response(&root, out.sim_seconds)?, parts))
}

pub(super) async fn log_probs(
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

pub(super) async fn sleep_inference(
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

pub(super) async fn wake_inference(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    let body = json_body(body, "/wake-inference")?;
    wake_job(&s, id, body.as_ref(), "/wake-inference")
}

pub(super) async fn reset_prefix_cache(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = require_job_id(&uri)?;
    json_body(body, "/reset-prefix-cache")?;
    reset_job(&s, id, "/reset-prefix-cache")
}

pub(super) async fn weight_sync(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = job_id_from_query(&uri)?;
    let body = json_object(body, "/weight-sync")?;
    sync_weights(&s, id, &body, "/weight-sync").await
}

pub(super) async fn operation(
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

/// `{training_job_id, sampling_job_id}` of `/weight-norm` and `/weight-digest`, each checked to
/// be a live job of its type.
fn job_pair(s: &Shared, body: &Map<String, Value>, route: &str) -> Result<(u64, u64), ApiError> {
    let id_of = |key: &str| match body.get(key) {
        Some(v) => v.as_u64().ok_or_else(|| {
            ApiError::unprocessable(format!("{route}: {key} must be a job id, got {v}"))
        }),
        None => Err(ApiError::unprocessable(format!("{route}: missing {key}"))),
    };
    let (train, sample) = (id_of("training_job_id")?, id_of("sampling_job_id")?);
    s.job_checked(train, &[JobType::Training], route)?;
    s.job_checked(sample, &[JobType::Sampling], route)?;
    Ok((train, sample))
}

pub(super) async fn weight_norm(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body = json_object(body, "/weight-norm")?;
    let (train, sample) = job_pair(&s, &body, "/weight-norm")?;
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

/// `/weight-digest`, an rlharness extension (`wire::digest`): both jobs' digest manifests. An
/// engine that reports none answers as a server without the route would, 404 `Not Found`.
pub(super) async fn weight_digest(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let route = WEIGHT_DIGEST_ROUTE;
    let body = json_object(body, route)?;
    let (train, sample) = job_pair(&s, &body, route)?;
    let digest = engine_task(&s, move |e| {
        Ok(WeightDigest {
            training: e.weight_digest(train)?,
            sampling: e.weight_digest(sample)?,
        })
    })
    .await?;
    let body = serde_json::to_value(&digest)
        .map_err(|e| ApiError::internal(format!("{route}: cannot encode the manifest: {e}")))?;
    ok_json(body)
}
