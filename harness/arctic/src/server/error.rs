//! The real server's error answers: a deliberate error's `{"detail": "..."}`, a validation
//! error's 422 list, and the plain-text 500 of an exception inside a handler.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::answer::json_response;
use crate::engine::EngineError;
use crate::wire::api::ERROR_REASON_HEADER;
use crate::wire::WireError;

/// An error answer: a status and the `detail` of the JSON body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status}: {detail}")]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            detail: detail.into(),
        }
    }
    pub(super) fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }
    pub(super) fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }
    pub(super) fn internal(detail: impl Into<String>) -> Self {
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
const INTERNAL_SERVER_ERROR_BODY: &str = "Internal Server Error";

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
pub(super) const MAX_REASON_LEN: usize = 2000;

/// Say why in the `x-rlharness-error` header: printable ASCII only (anything else becomes `?`),
/// at most `MAX_REASON_LEN` characters.
fn add_reason(resp: &mut Response, reason: &str) {
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
pub(super) fn missing_body(route: &str) -> Response {
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
pub(super) const BODY_REQUIRED: [&str; 13] = [
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
    crate::wire::digest::WEIGHT_DIGEST_ROUTE,
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
