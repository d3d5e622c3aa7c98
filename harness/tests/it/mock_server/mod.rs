//! The Arctic-compatible server with the mock engine: the API's rules in-process
//! (`tower::ServiceExt::oneshot`) and one full session over a real port.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use bytes::Bytes;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::recorder::{self, Recorded, Recorder};

use rlharness_arctic::engine::f32_tensor;
use rlharness_arctic::mock::{MockEngine, MockScript};
use rlharness_arctic::server::frame::{i64_tensor, node_to_json, tensor_f64};
use rlharness_arctic::server::{self, ServerHandle, ServerOptions};
use rlharness_arctic::task::CharTokenizer;
use rlharness_arctic::wire::api::{JobType, SIM_DURATION_HEADER};
use rlharness_arctic::wire::{decode, encode, Node, Tensor};

/// A server's handle and the recorder wrapped around its router.
struct Handle {
    server: ServerHandle,
    recorder: Recorder,
}

impl Handle {
    fn requests(&self) -> Vec<Recorded> {
        self.recorder.requests()
    }
    fn recorded_job_configs(&self) -> Vec<(u64, Value)> {
        self.recorder.job_configs()
    }
    fn restart(&self) {
        self.server.restart()
    }
    fn jobs(&self) -> Vec<(u64, JobType)> {
        self.server.jobs()
    }
}

/// The mock's server around `engine`, its router wrapped by a recorder.
fn recorded(engine: MockEngine, opts: ServerOptions) -> (Router, Handle) {
    let (router, server) = server::router(Arc::new(engine), opts);
    let (router, recorder) = recorder::wrap(router);
    (router, Handle { server, recorder })
}

fn app_with(opts: ServerOptions) -> (Router, Handle) {
    let engine = MockEngine::new(MockScript::default(), 7).expect("default script is valid");
    recorded(engine, opts)
}

fn app() -> (Router, Handle) {
    app_with(ServerOptions::default())
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
    /// What an error answer says, in the real server's shapes: `{"detail": "..."}` for a
    /// deliberate error, a 422's LIST of `{loc, msg, type}` (messages joined), and the
    /// plain-text body of a 500.
    fn detail(&self) -> String {
        if self.status == StatusCode::INTERNAL_SERVER_ERROR {
            return String::from_utf8_lossy(&self.body).into_owned();
        }
        match &self.json()["detail"] {
            Value::String(s) => s.clone(),
            Value::Array(items) => {
                assert_eq!(self.status, StatusCode::UNPROCESSABLE_ENTITY);
                items
                    .iter()
                    .map(|i| {
                        assert!(i["loc"].is_array() && i["type"].is_string(), "{i}");
                        i["msg"].as_str().unwrap_or_default().to_string()
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }
            other => panic!("detail is neither a string nor a list: {other}"),
        }
    }
    /// The request was refused with `status`, the detail naming `needle`.
    #[track_caller]
    fn assert_refused(&self, status: StatusCode, needle: &str) {
        self.assert_refused_naming(status, &[needle]);
    }
    /// The real server's answer to an exception in a handler: a plain-text 500.
    #[track_caller]
    fn assert_plain_500(&self, route: &str) {
        assert_eq!(self.status, StatusCode::INTERNAL_SERVER_ERROR, "{route}");
        assert_eq!(self.body, "Internal Server Error", "{route}");
        let ct = self.headers["content-type"].to_str().unwrap();
        assert!(ct.starts_with("text/plain"), "{route}: {ct}");
    }
    /// Refused with `status`, the detail naming every one of `needles`.
    fn assert_refused_naming(&self, status: StatusCode, needles: &[&str]) {
        assert_eq!(self.status, status);
        let d = self.detail();
        assert!(needles.iter().all(|n| d.contains(n)), "{d}");
    }
    fn frame(&self) -> Value {
        let ct = self.headers["content-type"].to_str().unwrap();
        assert!(ct.contains("application/octet-stream"), "{ct}");
        node_to_json(&strip_tensors(
            decode(self.body.clone()).expect("valid DSSST1"),
        ))
        .expect("no tensor left")
    }
}

/// Replace tensors by `{"shape": [...]}` so a response tree can be compared as JSON.
fn strip_tensors(n: Node) -> Node {
    match n {
        Node::Tensor { tensor, .. } => Node::Json(json!({"shape": tensor.shape})),
        Node::Dict(e) => Node::Dict(e.into_iter().map(|(k, v)| (k, strip_tensors(v))).collect()),
        Node::List(e) => Node::List(e.into_iter().map(strip_tensors).collect()),
        Node::Tuple(e) => Node::Tuple(e.into_iter().map(strip_tensors).collect()),
        j => j,
    }
}

async fn call(router: &Router, method: &str, uri: &str, body: Body) -> Answer {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .body(body)
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

async fn post_json(router: &Router, uri: &str, body: Value) -> Answer {
    call(router, "POST", uri, Body::from(body.to_string())).await
}

async fn post_frame(router: &Router, uri: &str, root: &Node) -> Answer {
    call(router, "POST", uri, Body::from(encode(root).unwrap())).await
}

fn sampling_config() -> Value {
    json!({"model_name": "Qwen/Qwen3-0.6B", "job_type": "sampling", "vllm_config": {"max_model_len": 64}})
}

fn training_config(dir: &str) -> Value {
    json!({
        "model_name": "Qwen/Qwen3-0.6B",
        "job_type": "training",
        "checkpoint_path": dir,
        "ds_config": {"optimizer": {"type": "AdamW", "params": {"lr": 1e-6}}},
        "not_a_jobconfig_key": 1
    })
}

type Entries = Vec<(String, Node)>;

fn tensor(t: Tensor) -> Node {
    Node::Tensor {
        tensor: t,
        scalar: false,
    }
}

/// A verl-layout batch of `rows` sequences: prompt width 12, response width 8.
fn batch_node(rows: usize, with_update: bool) -> Node {
    let (p, r) = (12usize, 8usize);
    let s = p + r;
    let prompt = CharTokenizer::encode("Q:3+4=?\nA:").unwrap();
    let response = CharTokenizer::encode("#### 7").unwrap();
    let (mut ids, mut mask, mut rmask) = (
        vec![0i64; rows * s],
        vec![0i64; rows * s],
        vec![0i64; rows * s],
    );
    for row in 0..rows {
        for (i, &t) in prompt.iter().enumerate() {
            ids[row * s + p - prompt.len() + i] = t;
            mask[row * s + p - prompt.len() + i] = 1;
        }
        for (i, &t) in response.iter().enumerate() {
            ids[row * s + p + i] = t;
            mask[row * s + p + i] = 1;
            rmask[row * s + p + i] = 1;
        }
    }
    let prompts: Vec<i64> = (0..rows)
        .flat_map(|row| ids[row * s..row * s + p].to_vec())
        .collect();
    let mut entries = vec![
        (
            "input_ids".to_string(),
            tensor(i64_tensor(vec![rows, s], &ids)),
        ),
        (
            "attention_mask".to_string(),
            tensor(i64_tensor(vec![rows, s], &mask)),
        ),
        (
            "prompts".to_string(),
            tensor(i64_tensor(vec![rows, p], &prompts)),
        ),
    ];
    if with_update {
        let adv: Vec<f32> = rmask
            .iter()
            .enumerate()
            .map(|(i, &m)| m as f32 * if (i / s) % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        let old: Vec<f32> = rmask.iter().map(|&m| -(m as f32)).collect();
        entries.push((
            "response_mask".into(),
            tensor(i64_tensor(vec![rows, s], &rmask)),
        ));
        entries.push((
            "loss_mask".into(),
            tensor(i64_tensor(vec![rows, s], &rmask)),
        ));
        entries.push(("advantages".into(), tensor(f32_tensor(vec![rows, s], &adv))));
        entries.push((
            "old_log_probs".into(),
            tensor(f32_tensor(vec![rows, s], &old)),
        ));
    }
    Node::Dict(entries)
}

fn model_call(batch: Node, processing: Value) -> Node {
    Node::Dict(vec![
        ("batch".into(), batch),
        (
            "meta".into(),
            Node::Json(json!({"pad_token_id": 0, "temperature": 1.0, "global_batch_size": 4})),
        ),
        ("processing".into(), Node::Json(processing)),
    ])
}

fn generate_call(prompts: &[&str], n: u64) -> Node {
    Node::Json(
        json!({"prompts": prompts, "sampling_params": {"n": n, "max_tokens": 16}, "strict": true}),
    )
}

async fn two_jobs(router: &Router) -> (u64, u64, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let s = post_json(router, "/initialize", sampling_config()).await;
    assert_eq!(s.status, StatusCode::OK, "{:?}", s.body);
    let t = post_json(
        router,
        "/initialize",
        training_config(&dir.path().display().to_string()),
    )
    .await;
    assert_eq!(t.status, StatusCode::OK, "{:?}", t.body);
    (
        s.json()["job_id"].as_u64().unwrap(),
        t.json()["job_id"].as_u64().unwrap(),
        dir,
    )
}

/// `/initialize` with a model name and a job type only.
async fn init_bare(router: &Router, job_type: &str) -> Answer {
    post_json(
        router,
        "/initialize",
        json!({"model_name": "m", "job_type": job_type}),
    )
    .await
}

mod arctic_014;
mod bodies;
mod digest;
mod jobs;
mod session;
