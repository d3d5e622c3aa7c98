//! The plain parts of an answer, below the error shapes: a JSON body with its content type, and
//! the simulated-time header a simulating engine's calls carry.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::wire::api::SIM_DURATION_HEADER;

pub(super) fn json_response(
    status: StatusCode,
    body: &Value,
    sim_seconds: Option<f64>,
) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_sim_header(&mut resp, sim_seconds);
    resp
}

pub(super) fn add_sim_header(resp: &mut Response, sim_seconds: Option<f64>) {
    if let Some(s) = sim_seconds.filter(|s| s.is_finite()) {
        if let Ok(v) = HeaderValue::from_str(&format!("{s}")) {
            resp.headers_mut().insert(SIM_DURATION_HEADER, v);
        }
    }
}
