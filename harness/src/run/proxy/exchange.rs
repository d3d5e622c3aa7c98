//! One exchange: the request forwarded upstream, the response relayed, both recorded.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use serde_json::{json, Value};

use super::capture::{lock, Capture, SharedCapture, TeeBody};
use super::{BoxError, ProxyBody, Shared, JSON_RECORD_CAP};
use crate::model::events::RunEvent;
use crate::run::backend::replay::RecordedExchange;
use rlharness_arctic::wire::api::{ERROR_REASON_HEADER, SIM_DURATION_HEADER};

pub(super) fn job_id(uri: &Uri) -> Value {
    let from_query = uri.query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("job_id="))
            .map(str::to_string)
    });
    let from_path = uri
        .path()
        .strip_prefix("/job/")
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .map(str::to_string);
    match from_query.or(from_path) {
        Some(id) => id
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or(Value::String(id)),
        None => Value::Null,
    }
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Hop-by-hop headers belong to one connection and are not forwarded (RFC 9110 7.6.1).
fn strip_hop_headers(headers: &mut HeaderMap) {
    for h in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(h);
    }
    headers.remove("keep-alive");
}

fn detail_response(status: StatusCode, detail: &str) -> Response<ProxyBody> {
    let body = json!({ "detail": detail }).to_string();
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| -> BoxError { match never {} })
            .boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Words for what went wrong talking to the upstream.
fn describe_upstream_error(e: &hyper_util::client::legacy::Error) -> String {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return match io.kind() {
                ConnectionRefused => "refused the connection".into(),
                ConnectionReset | ConnectionAborted | BrokenPipe => "reset the connection".into(),
                TimedOut => "timed out connecting".into(),
                _ => format!("failed: {io}"),
            };
        }
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() {
                return "closed the connection before answering".into();
            }
            if h.is_parse() {
                return format!("sent an unreadable response ({h})");
            }
        }
        src = s.source();
    }
    if e.is_connect() {
        return format!("could not be reached ({e})");
    }
    format!("failed: {e}")
}

/// One request/response pair: its record is written exactly once, when it completes.
struct Exchange {
    shared: Arc<Shared>,
    seq: u64,
    time: String,
    started: Instant,
    method: Method,
    route: String,
    job_id: Value,
    request: SharedCapture,
    /// For a cassette: the query, the concurrency group, the headers a replay answers with,
    /// and the body the proxy answered itself with.
    query: Option<String>,
    group: u64,
    response_headers: BTreeMap<String, String>,
    reply_body: Option<Vec<u8>>,
    /// Why the harness's own server refused the request (its `x-rlharness-error` header).
    server_error: Option<String>,
}

impl Exchange {
    fn finish(
        self,
        status: u16,
        response: Option<&SharedCapture>,
        sim_seconds: Option<f64>,
        error: Option<String>,
    ) {
        let duration_s = self.started.elapsed().as_secs_f64();
        let mut req = lock(&self.request);
        let mut resp = response.map(lock);
        let error = error
            .or_else(|| resp.as_ref().and_then(|r| r.error.clone()))
            .or_else(|| req.error.clone().filter(|_| !req.complete));
        let mut rec = json!({
            "seq": self.seq,
            "time": self.time,
            "method": self.method.as_str(),
            "route": self.route,
            "job_id": self.job_id,
            "status": status,
            "duration_s": duration_s,
        });
        let o = rec.as_object_mut().expect("json! object literal");
        if let Some(s) = sim_seconds {
            o.insert("sim_seconds".into(), json!(s));
        }
        o.insert("request".into(), req.summary());
        o.insert(
            "response".into(),
            resp.as_ref().map(|r| r.summary()).unwrap_or(Value::Null),
        );
        if let Some(e) = &error {
            o.insert("error".into(), e.clone().into());
        }
        if let Some(e) = &self.server_error {
            o.insert("server_error".into(), e.clone().into());
        }
        if let Some(c) = &self.shared.cassette {
            c.push(RecordedExchange {
                seq: self.seq,
                group: self.group,
                method: self.method.to_string(),
                path: self.route.clone(),
                query: self.query.clone(),
                job_id: self.job_id.as_u64(),
                status,
                request_content_type: req.content_type().map(str::to_string),
                request: req.take_whole(),
                response_headers: self.response_headers.clone(),
                response: match resp.as_mut() {
                    Some(r) => r.take_whole(),
                    None => self.reply_body.clone().unwrap_or_default(),
                },
                error: error.clone(),
            });
        }
        let recorder = &self.shared.recorder;
        recorder.line(&rec);
        let cleanly_done = resp.as_ref().is_some_and(|r| r.complete);
        if self.method == Method::POST
            && self.route == "/initialize"
            && (200..300).contains(&status)
            && cleanly_done
        {
            if let Some(config) = req.json() {
                recorder.job_config(config);
            }
        }
        if let Some(tx) = &recorder.events {
            let _ = tx.send(RunEvent::Request {
                route: self.route.clone(),
                status,
                duration_s,
            });
        }
        tracing::debug!(
            "{} {} (job {}) -> {status} in {:.1} ms",
            self.method,
            self.route,
            self.job_id,
            duration_s * 1e3
        );
        let mut a = self.shared.activity();
        if let Some((desc, _)) = a.in_flight.remove(&self.seq) {
            a.last_done = Some((desc, status, duration_s, Instant::now()));
        }
        let tally = a
            .per_route
            .entry(format!("{} {}", self.method, self.route))
            .or_default();
        tally.count += 1;
        tally.failed += u64::from(!(200..300).contains(&status));
        tally.seconds += duration_s;
    }

    /// Answer the driver ourselves (limit, upstream failure) and record it.
    fn reply(mut self, status: StatusCode, detail: String) -> Response<ProxyBody> {
        let resp = detail_response(status, &detail);
        if self.shared.cassette.is_some() {
            self.response_headers
                .insert("content-type".into(), "application/json".into());
            self.reply_body = Some(json!({ "detail": detail }).to_string().into_bytes());
        }
        self.finish(status.as_u16(), None, None, Some(detail));
        resp
    }
}

/// Why the proxy answers the driver itself (a limit, an upstream failure): the status and the
/// detail it records.
type Refusal = (StatusCode, String);

/// One request through the proxy: forwarded upstream, its answer relayed back, the pair
/// recorded once it completes; or answered by the proxy itself when it cannot be.
pub(super) async fn exchange(shared: Arc<Shared>, req: Request<Incoming>) -> Response<ProxyBody> {
    let deadline = tokio::time::Instant::now() + shared.cfg.request_timeout;
    let (parts, body) = req.into_parts();
    let ex = Exchange::begin(shared.clone(), &parts);
    let on = format!("{} {}", parts.method, ex.route);
    let request = ex.request.clone();
    let upstream_req = match forward_request(&shared, &request, parts, body, deadline, &on).await {
        Ok(r) => r,
        Err((status, detail)) => return ex.reply(status, detail),
    };
    match send_upstream(&shared, &request, upstream_req, deadline, &on).await {
        Ok(resp) => relay_response(ex, resp, deadline, &on),
        Err((status, detail)) => ex.reply(status, detail),
    }
}

/// The path and query of a request's URI (`/` when it has none).
fn path_and_query(uri: &Uri) -> String {
    uri.path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into())
}

impl Exchange {
    /// Start the record of a request that just arrived: its number, its time, its place among
    /// the requests in flight and (with a cassette) its concurrency group.
    fn begin(shared: Arc<Shared>, parts: &hyper::http::request::Parts) -> Exchange {
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let started = Instant::now();
        let route = parts.uri.path().to_string();
        let desc = format!("{} {}", parts.method, path_and_query(&parts.uri));
        shared.activity().in_flight.insert(seq, (desc, started));
        let request = Capture::new(content_type(&parts.headers), shared.cfg.body_limit);
        let group = match &shared.cassette {
            Some(c) => {
                lock(&request).keep_whole();
                c.begin(seq)
            }
            None => 0,
        };
        Exchange {
            shared,
            seq,
            started,
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            method: parts.method.clone(),
            route,
            job_id: job_id(&parts.uri),
            request,
            query: parts.uri.query().map(str::to_string),
            group,
            response_headers: BTreeMap::new(),
            reply_body: None,
            server_error: None,
        }
    }
}

/// The driver's request made into the upstream's: within the body limit, addressed to the
/// upstream, without hop-by-hop headers, its body recorded into `request` as it goes (a small
/// JSON body read whole first, by `deadline`).
async fn forward_request(
    shared: &Shared,
    request: &SharedCapture,
    mut parts: hyper::http::request::Parts,
    body: Incoming,
    deadline: tokio::time::Instant,
    on: &str,
) -> Result<Request<ProxyBody>, Refusal> {
    let limit = shared.cfg.body_limit;
    let upstream = &shared.upstream_text;
    if let Some(n) = content_length(&parts.headers).filter(|&n| n > limit) {
        lock(request).total = n;
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body of {n} bytes exceeds the proxy body limit of {limit} bytes on {on}"
            ),
        ));
    }

    let path_and_query = path_and_query(&parts.uri);
    let mut uri_parts = shared.upstream.clone().into_parts();
    uri_parts.path_and_query = path_and_query.parse().ok();
    parts.uri = Uri::from_parts(uri_parts).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("cannot forward {path_and_query} to upstream {upstream}: {e}"),
        )
    })?;
    strip_hop_headers(&mut parts.headers);
    parts.headers.remove(header::HOST);
    let small = content_length(&parts.headers).is_some_and(|n| n <= JSON_RECORD_CAP as u64);
    let body = TeeBody::new(body, request.clone());
    let body = if small && !lock(request).is_frame() {
        // Read small JSON bodies whole before forwarding, so the record keeps what the driver
        // sent even when the upstream never reads it (refused, reset).
        match tokio::time::timeout_at(deadline, body.collect()).await {
            Ok(Ok(all)) => Full::new(all.to_bytes())
                .map_err(|never| -> BoxError { match never {} })
                .boxed_unsync(),
            Ok(Err(e)) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body of {on}: {e}"),
                ))
            }
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body of {on} did not arrive within {:.1} s",
                        shared.cfg.request_timeout.as_secs_f64()
                    ),
                ))
            }
        }
    } else {
        body.boxed_unsync()
    };
    Ok(Request::from_parts(parts, body))
}

/// Send the request upstream and wait for its answer's head until `deadline`.
async fn send_upstream(
    shared: &Shared,
    request: &SharedCapture,
    upstream_req: Request<ProxyBody>,
    deadline: tokio::time::Instant,
    on: &str,
) -> Result<Response<Incoming>, Refusal> {
    let limit = shared.cfg.body_limit;
    let upstream = &shared.upstream_text;
    let timeout_s = shared.cfg.request_timeout.as_secs_f64();
    let answer = tokio::time::timeout_at(deadline, shared.client.request(upstream_req)).await;
    match answer {
        Err(_) => Err((
            StatusCode::GATEWAY_TIMEOUT,
            format!("upstream {upstream} did not answer within {timeout_s:.1} s on {on}"),
        )),
        Ok(Err(e)) => {
            if lock(request).over_limit {
                return Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body exceeds the proxy body limit of {limit} bytes on {on}"),
                ));
            }
            let what = describe_upstream_error(&e);
            Err((
                StatusCode::BAD_GATEWAY,
                format!("upstream {upstream} {what} on {on}"),
            ))
        }
        Ok(Ok(resp)) => Ok(resp),
    }
}

/// The upstream's answer relayed to the driver, its body recorded as it goes (by `deadline`);
/// the exchange is recorded when the body ends.
fn relay_response(
    mut ex: Exchange,
    resp: Response<Incoming>,
    deadline: tokio::time::Instant,
    on: &str,
) -> Response<ProxyBody> {
    let shared = ex.shared.clone();
    let limit = shared.cfg.body_limit;
    let upstream = &shared.upstream_text;
    let timeout_s = shared.cfg.request_timeout.as_secs_f64();
    let (mut parts, body) = resp.into_parts();
    if let Some(n) = content_length(&parts.headers).filter(|&n| n > limit) {
        return ex.reply(
            StatusCode::BAD_GATEWAY,
            format!("upstream {upstream} answered {n} bytes, over the proxy body limit of {limit} bytes, on {on}"),
        );
    }
    let sim_seconds = parts
        .headers
        .get(SIM_DURATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok());
    let status = parts.status.as_u16();
    ex.server_error = parts
        .headers
        .get(ERROR_REASON_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    strip_hop_headers(&mut parts.headers);
    let response = Capture::new(content_type(&parts.headers), limit);
    if shared.cassette.is_some() {
        lock(&response).keep_whole();
        for name in [header::CONTENT_TYPE.as_str(), SIM_DURATION_HEADER] {
            if let Some(v) = parts.headers.get(name).and_then(|v| v.to_str().ok()) {
                ex.response_headers.insert(name.to_string(), v.to_string());
            }
        }
    }
    let recorded = response.clone();
    let body = TeeBody::new(body, response)
        .with_deadline(deadline, timeout_s)
        .on_end(move || ex.finish(status, Some(&recorded), sim_seconds, None));
    Response::from_parts(parts, body.boxed_unsync())
}
