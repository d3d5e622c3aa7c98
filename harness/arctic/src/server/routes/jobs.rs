//! The job lifecycle: `/health`, `/initialize`, `/job/{id}`, `/status`, `/destroy`.

use std::sync::Arc;

use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::server::answer::json_response;
use crate::server::error::ApiError;
use crate::server::http::{json_body, json_object, ok_json, require_job_id, ApiResult};
use crate::server::jobs::{engine_task, job_info, Job, SamplingState};
use crate::server::Shared;
use crate::util::lock;
use crate::wire::api::{JobConfig, JobType};
use crate::wire::sp;

pub(super) async fn health() -> Response {
    json_response(StatusCode::OK, &json!({"status": "OK"}), None)
}

pub(super) async fn initialize(
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
    let config: JobConfig = serde_json::from_value(raw)
        .map_err(|e| ApiError::unprocessable(format!("/initialize: invalid JobConfig: {e}")))?;
    // 0.1.4's JobConfig resolves the sequence-parallel degree while it validates the body: a
    // degree that is not one, or two paths that disagree, is its 422 (pydantic's wording).
    let sp_size =
        sp::sp_size(&config).map_err(|e| ApiError::unprocessable(format!("Value error, {e}")))?;
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
                sp_size,
            },
        );
        id
    };
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

pub(super) async fn job_route(
    State(s): State<Arc<Shared>>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let Path(raw) = path.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    job_info_route(&s, &raw).await
}

pub(super) async fn status(State(s): State<Arc<Shared>>) -> ApiResult {
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

pub(super) async fn destroy(
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
