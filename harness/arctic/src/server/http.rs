//! Request parameters (the job id and other query parameters, JSON bodies) and a handler's
//! successful answers (JSON, a DSSST1 frame).

use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value};

use super::answer::{add_sim_header, json_response};
use super::error::ApiError;
use crate::wire::api::parse_json_lenient;
use crate::wire::{encode, Node};

pub(super) type ApiResult = Result<Response, ApiError>;

pub(super) fn ok_json(body: Value) -> ApiResult {
    Ok(json_response(StatusCode::OK, &body, None))
}

pub(super) fn frame_response(root: &Node, sim_seconds: Option<f64>) -> ApiResult {
    let bytes = encode(root)?;
    let mut resp = (StatusCode::OK, bytes).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    add_sim_header(&mut resp, sim_seconds);
    Ok(resp)
}

/// `job_id` from the query string: `Ok(None)` when absent.
pub(super) fn job_id_from_query(uri: &Uri) -> Result<Option<u64>, ApiError> {
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

pub(super) fn require_job_id(uri: &Uri) -> Result<u64, ApiError> {
    job_id_from_query(uri)?.ok_or_else(|| ApiError::unprocessable("missing query parameter job_id"))
}

pub(super) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| ApiError::new(e.status(), e.body_text()))
}

/// A JSON body; an empty body is `None` (several routes take an optional body).
pub(super) fn json_body(
    body: Result<Bytes, BytesRejection>,
    route: &str,
) -> Result<Option<Value>, ApiError> {
    let bytes = body_bytes(body)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // An aiohttp client may send NaN/Infinity literals: read them as Python does.
    parse_json_lenient(&bytes).map(Some).map_err(|e| {
        ApiError::unprocessable(format!("{route}: request body is not valid JSON: {e}"))
    })
}

/// A JSON object body (absent or `null` is an empty object).
pub(super) fn json_object(
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

/// A query parameter's raw value.
pub(super) fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
