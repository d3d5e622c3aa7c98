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

use rlharness::backend::f32_tensor;
use rlharness::backend::mock::{MockEngine, MockScript};
use rlharness::backend::server::frame::{i64_tensor, node_to_json, tensor_f64};
use rlharness::backend::server::{self, ServerHandle, ServerOptions};
use rlharness::task::CharTokenizer;
use rlharness::wire::api::{JobType, SIM_DURATION_HEADER};
use rlharness::wire::{decode, encode, Node, Tensor};

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
        assert_eq!(self.status, status);
        assert!(self.detail().contains(needle), "{}", self.detail());
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

#[tokio::test]
async fn job_table_rules() {
    let (router, handle) = app();
    assert_eq!(
        call(&router, "GET", "/health", Body::empty()).await.json(),
        json!({"status": "OK"})
    );
    let s = post_json(&router, "/initialize", sampling_config()).await;
    assert_eq!(
        s.json(),
        json!({"job_id": 1, "job_type": "sampling", "running": true})
    );

    let no_ckpt = post_json(
        &router,
        "/initialize",
        json!({"model_name": "m", "job_type": "training"}),
    )
    .await;
    no_ckpt.assert_refused(StatusCode::BAD_REQUEST, "checkpoint_path");

    let dir = tempfile::tempdir().unwrap();
    let cfg = training_config(&dir.path().display().to_string());
    let t = post_json(&router, "/initialize", cfg.clone()).await;
    assert_eq!(t.json()["job_id"], json!(2));
    let again = post_json(&router, "/initialize", cfg.clone()).await;
    again.assert_refused(StatusCode::CONFLICT, "training job is already running");

    let unknown = call(&router, "GET", "/job/99", Body::empty()).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.detail(), "job 99 not found");
    assert_eq!(
        call(&router, "GET", "/job/abc", Body::empty()).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let info = call(&router, "GET", "/job/2", Body::empty()).await.json();
    assert_eq!(info["status"], json!("RUNNING"));
    assert_eq!(info["checkpoint_path"], cfg["checkpoint_path"]);
    assert!(info["sync_path"].is_string());

    let wrong = post_json(&router, "/step?job_id=1", json!({"learning_rate": null})).await;
    wrong.assert_refused(StatusCode::BAD_REQUEST, "needs a training job");
    let missing = post_json(&router, "/step", json!({})).await;
    assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(missing.detail().contains("job_id"));
    let bad_id = post_json(&router, "/step?job_id=x", json!({})).await;
    assert_eq!(bad_id.status, StatusCode::UNPROCESSABLE_ENTITY);
    let bad_json = call(&router, "POST", "/initialize", Body::from("{not json")).await;
    bad_json.assert_refused(StatusCode::UNPROCESSABLE_ENTITY, "not valid JSON");
    let no_model = post_json(&router, "/initialize", json!({"job_type": "sampling"})).await;
    no_model.assert_refused(StatusCode::UNPROCESSABLE_ENTITY, "model_name");

    let status = call(&router, "GET", "/status", Body::empty()).await.json();
    assert_eq!(status["training_gpus"], json!(1));
    assert_eq!(status["jobs"]["1"]["job_type"], json!("sampling"));
    assert_eq!(status["jobs"]["2"]["job_type"], json!("training"));

    let not_found = call(&router, "GET", "/nope", Body::empty()).await;
    assert_eq!(not_found.status, StatusCode::NOT_FOUND);
    assert_eq!(not_found.detail(), "Not Found");
    assert_eq!(
        call(&router, "GET", "/initialize", Body::empty())
            .await
            .status,
        StatusCode::METHOD_NOT_ALLOWED
    );

    let mismatch = post_json(
        &router,
        "/destroy?job_id=2",
        json!({"job_type": "sampling"}),
    )
    .await;
    assert_eq!(mismatch.status, StatusCode::BAD_REQUEST);
    let d = post_json(
        &router,
        "/destroy?job_id=2",
        json!({"job_type": "training"}),
    )
    .await;
    assert_eq!(d.json(), json!({"job_id": 2}));
    let t3 = post_json(&router, "/initialize", cfg).await;
    assert_eq!(t3.json()["job_id"], json!(3));

    // Every accepted JobConfig is recorded raw, unknown keys included.
    let configs = handle.recorded_job_configs();
    assert_eq!(
        configs.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(configs[1].1["not_a_jobconfig_key"], json!(1));
    let reqs = handle.requests();
    assert!(reqs
        .iter()
        .any(|r| r.route == "/job/{job_id}" && r.job_id == Some(99) && r.status == 404));

    handle.restart();
    assert!(handle.jobs().is_empty());
    assert_eq!(
        call(&router, "GET", "/job/1", Body::empty()).await.status,
        StatusCode::NOT_FOUND
    );
    let after = post_json(&router, "/initialize", sampling_config()).await;
    assert_eq!(after.json()["job_id"], json!(1));
}

#[tokio::test]
async fn job_types_without_gpus_are_refused() {
    let (router, _) = app_with(ServerOptions {
        log_prob_gpus: 0,
        ..ServerOptions::default()
    });
    let r = post_json(
        &router,
        "/initialize",
        json!({"model_name": "m", "job_type": "log_prob"}),
    )
    .await;
    r.assert_refused(StatusCode::BAD_REQUEST, "no GPUs of that kind");
    let status = call(&router, "GET", "/status", Body::empty()).await.json();
    assert_eq!(status["log_prob_gpus"], json!(0));
}

#[tokio::test]
async fn sleep_wake_state_machine() {
    let (router, _) = app();
    let (sid, _tid, _dir) = two_jobs(&router).await;
    let q = |route: &str| format!("{route}?job_id={sid}");
    let gen = generate_call(&["Q:1+2=?\nA:"], 1);
    assert_eq!(
        post_frame(&router, &q("/generate"), &gen).await.status,
        StatusCode::OK
    );

    let s = post_json(&router, &q("/sleep-inference"), json!({"level": 2}))
        .await
        .json();
    assert_eq!(s["sampling"], json!({"status": "sleeping", "level": 2}));
    let s = post_json(&router, &q("/sleep-inference"), json!({"level": 1}))
        .await
        .json();
    assert_eq!(s["sampling"]["status"], json!("already_sleeping"));
    // Generating while asleep raises inside the real server's handler: a plain-text 500.
    let g = post_frame(&router, &q("/generate"), &gen).await;
    assert_eq!(g.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(g.body, "Internal Server Error");
    assert!(g.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));

    let kv = post_json(&router, &q("/wake-inference"), json!(["kv_cache"])).await;
    kv.assert_refused(StatusCode::BAD_REQUEST, "wake [\"weights\"] first");
    let w = post_json(&router, &q("/wake-inference"), json!(["weights"]))
        .await
        .json();
    assert_eq!(
        w["sampling"],
        json!({"status": "weights_ready", "tags": ["weights"]})
    );
    let info = call(&router, "GET", &format!("/job/{sid}"), Body::empty())
        .await
        .json();
    assert_eq!(info["sampling_state"], json!("WEIGHTS_READY"));
    let g = post_frame(&router, &q("/generate"), &gen).await;
    g.assert_refused(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    let r = post_json(&router, &q("/wake-inference"), json!(["kv_cache"]))
        .await
        .json();
    assert_eq!(r["sampling"]["status"], json!("ready"));
    let r = call(&router, "POST", &q("/wake-inference"), Body::empty())
        .await
        .json();
    assert_eq!(r["sampling"]["status"], json!("already_ready"));
    let bogus = post_json(&router, &q("/wake-inference"), json!(["gpu"])).await;
    assert_eq!(bogus.status, StatusCode::UNPROCESSABLE_ENTITY);

    // The same machine through /operation; a wake with no tags goes straight to READY.
    let op = |t: &str, payload: Value| json!({"operation_type": t, "sub_job_id": sid, "sub_job_type": "sampling", "payload": payload});
    let s = post_json(
        &router,
        &q("/operation"),
        op("sleep-inference", json!({"level": 1})),
    )
    .await
    .json();
    assert_eq!(s["sampling"]["status"], json!("sleeping"));
    let w = post_json(&router, &q("/operation"), op("wake-inference", Value::Null))
        .await
        .json();
    assert_eq!(w["sampling"]["status"], json!("ready"));
    let r = post_json(
        &router,
        &q("/operation"),
        op("reset-prefix-cache", Value::Null),
    )
    .await
    .json();
    assert_eq!(r["sampling"]["status"], json!("prefix_cache_reset"));
    let unknown = post_json(&router, &q("/operation"), op("defragment", Value::Null)).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert!(unknown.detail().contains("defragment"));
}

#[tokio::test]
async fn loss_fn_absent_means_grpo() {
    let (router, handle) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let uri = format!("/forward?job_id={tid}");
    // Absent: the server's default loss, which needs advantages the forward-only batch lacks.
    let absent = post_frame(
        &router,
        &uri,
        &model_call(batch_node(2, false), json!({"post": []})),
    )
    .await;
    // The real server looks up `grpo`, whose signature does not match the call: a 500.
    assert_eq!(absent.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(absent.detail(), "Internal Server Error");
    // Explicit null: forward only.
    let null = post_frame(
        &router,
        &uri,
        &model_call(
            batch_node(2, false),
            json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": null}),
        ),
    )
    .await;
    assert_eq!(null.status, StatusCode::OK, "{:?}", null.body);
    let f = null.frame();
    assert_eq!(f["job_id"], json!(tid));
    assert_eq!(f["batch"]["logprobs"], json!({"shape": [2, 20]}));
    assert_eq!(f["batch"]["entropy"], json!({"shape": [2, 20]}));
    // A forward-only call answers `avg_loss: 0.0`, as the real server does.
    assert_eq!(f["avg_loss"], json!(0.0));
    assert!(null.headers.contains_key(SIM_DURATION_HEADER));

    // forward-backward with loss_fn absent fails as the real server does (a 500).
    let absent = post_frame(
        &router,
        &format!("/forward-backward?job_id={tid}"),
        &model_call(
            batch_node(4, true),
            json!({"post": ["compute_entropy_and_logprobs"]}),
        ),
    )
    .await;
    assert_eq!(absent.status, StatusCode::INTERNAL_SERVER_ERROR);
    // With the adapter's loss.
    let fb = post_frame(
        &router,
        &format!("/forward-backward?job_id={tid}"),
        &model_call(
            batch_node(4, true),
            json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"}),
        ),
    )
    .await;
    assert_eq!(fb.status, StatusCode::OK, "{:?}", fb.body);
    let m = fb.frame();
    for k in [
        "actor/pg_loss",
        "actor/ppo_kl",
        "actor/pg_clipfrac",
        "actor/pg_clipfrac_lower",
        "loss",
        "actor/entropy_loss",
    ] {
        assert!(m["metrics"][k].is_number(), "{k}: {m}");
    }
    assert!(m["avg_loss"].is_number());
    let sim: f64 = fb.headers[SIM_DURATION_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(sim > 0.0);
    let rec = handle.requests();
    let last = rec.last().unwrap();
    assert_eq!(last.route, "/forward-backward");
    assert_eq!(last.meta.as_ref().unwrap()["global_batch_size"], json!(4));
}

/// The adapter sends `meta.batch_num_tokens` as a 0-d I64 tensor and may send per-sample
/// values (`rollout_is_weights`) as tensors: the server reads a 0-d tensor as a number.
#[tokio::test]
async fn tensors_in_meta_are_accepted_and_a_0d_tensor_reads_as_a_number() {
    let (router, handle) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let meta = Node::dict([
        ("pad_token_id", Node::json(0)),
        ("temperature", Node::json(1.0)),
        ("global_batch_size", Node::json(4)),
        ("batch_num_tokens", Node::scalar(i64_tensor(vec![], &[37]))),
        (
            "rollout_is_weights",
            tensor(rlharness::wire::Tensor::from_f32([4], &[1.0; 4]).unwrap()),
        ),
    ]);
    for route in ["/forward", "/forward-backward"] {
        let root = Node::Dict(vec![
            ("batch".into(), batch_node(4, true)),
            ("meta".into(), meta.clone()),
            (
                "processing".into(),
                Node::Json(
                    json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"}),
                ),
            ),
        ]);
        let r = post_frame(&router, &format!("{route}?job_id={tid}"), &root).await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {:?}", r.body);
        let rec = handle.requests();
        let m = rec.last().unwrap().meta.clone().unwrap();
        assert_eq!(m["batch_num_tokens"], json!(37), "{route}");
        assert_eq!(
            m["rollout_is_weights"],
            json!([1.0, 1.0, 1.0, 1.0]),
            "{route}"
        );
    }
}

/// A NaN loss comes back as the `NaN` literal inside the frame (the adapter averages the
/// losses with numpy; a `null` there crashes it).
#[tokio::test]
async fn a_nan_loss_comes_back_as_nan_not_null() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let Node::Dict(mut e) = batch_node(2, true) else {
        unreachable!()
    };
    for (k, v) in &mut e {
        if k == "advantages" {
            let shape = v.as_tensor().unwrap().shape.clone();
            let n = shape.iter().product::<usize>();
            *v = tensor(rlharness::wire::Tensor::from_f32(shape, &vec![f32::NAN; n]).unwrap());
        }
    }
    let r = post_frame(
        &router,
        &format!("/forward-backward?job_id={tid}"),
        &model_call(Node::Dict(e), json!({"post": [], "loss_fn": "verl_grpo"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(text.contains(r#"\"avg_loss\": NaN"#), "{text}");
    let root = rlharness::wire::decode(r.body.clone()).unwrap();
    let v = root.to_json().unwrap();
    assert!(rlharness::wire::pyjson::as_f64(&v["avg_loss"])
        .unwrap()
        .is_nan());
    assert!(rlharness::wire::pyjson::as_f64(&v["metrics"]["loss"])
        .unwrap()
        .is_nan());
}

#[tokio::test]
async fn ill_shaped_tensors_are_unprocessable() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let uri = format!("/forward?job_id={tid}");
    let processing = json!({"loss_fn": null});
    let with = |f: &dyn Fn(&mut Entries)| {
        let Node::Dict(mut e) = batch_node(2, false) else {
            unreachable!()
        };
        f(&mut e);
        model_call(Node::Dict(e), processing.clone())
    };
    let one_d = with(&|e| e[0].1 = tensor(i64_tensor(vec![40], &[0; 40])));
    let r = post_frame(&router, &uri, &one_d).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.detail().contains("input_ids") && r.detail().contains("[40]"),
        "{}",
        r.detail()
    );
    let mask = with(&|e| e[1].1 = tensor(i64_tensor(vec![2, 19], &[1; 38])));
    let r = post_frame(&router, &uri, &mask).await;
    r.assert_refused(
        StatusCode::UNPROCESSABLE_ENTITY,
        "attention_mask has shape [2, 19]",
    );
    let wide = with(&|e| e[2].1 = tensor(i64_tensor(vec![2, 21], &[1; 42])));
    let r = post_frame(&router, &uri, &wide).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.detail().contains("prompts") && r.detail().contains("[2, 21]"),
        "{}",
        r.detail()
    );
    let missing = with(&|e| e.retain(|(k, _)| k != "prompts"));
    let r = post_frame(&router, &uri, &missing).await;
    assert_eq!(r.detail(), "/forward: missing tensor batch.prompts");
    let gen = post_frame(
        &router,
        "/generate?job_id=1",
        &Node::Json(json!({"prompts": [1, 2]})),
    )
    .await;
    assert_eq!(gen.status, StatusCode::UNPROCESSABLE_ENTITY);
    let unknown_loss = post_frame(
        &router,
        &uri,
        &model_call(batch_node(1, true), json!({"loss_fn": "dpo"})),
    )
    .await;
    assert_eq!(unknown_loss.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn legacy_pickle_payloads_are_refused() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let pickle = Bytes::from_static(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.");
    let zip = Bytes::from_static(b"PK\x03\x04torch.save archive");
    for (route, id) in [
        ("/forward", tid),
        ("/forward-backward", tid),
        ("/generate", sid),
    ] {
        for body in [pickle.clone(), zip.clone()] {
            let r = call(
                &router,
                "POST",
                &format!("{route}?job_id={id}"),
                Body::from(body),
            )
            .await;
            // A frame that does not decode raises inside the real server's handler: a
            // plain-text 500 (the mock's log names the legacy payload).
            assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{route}");
            assert_eq!(r.body, "Internal Server Error", "{route}");
            assert!(r.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"));
        }
        let r = call(
            &router,
            "POST",
            &format!("{route}?job_id={id}"),
            Body::from(&b"\x03\x00\x00\x00\x00\x00\x00\x00abc"[..]),
        )
        .await;
        r.assert_refused(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    }
}

#[tokio::test]
async fn garbage_bodies_never_crash_the_server() {
    let (router, _) = app();
    let (_sid, _tid, _dir) = two_jobs(&router).await;
    let routes = [
        "/initialize",
        "/forward-backward",
        "/forward",
        "/step",
        "/save",
        "/load-checkpoint",
        "/generate",
        "/log-probs",
        "/sleep-inference",
        "/wake-inference",
        "/reset-prefix-cache",
        "/operation",
        "/weight-sync",
        "/weight-norm",
        "/destroy",
    ];
    let bodies: Vec<Bytes> = vec![
        Bytes::new(),
        Bytes::from_static(b"null"),
        Bytes::from_static(b"[]"),
        Bytes::from_static(b"{}"),
        Bytes::from_static(b"\"text\""),
        Bytes::from_static(b"1e999999"),
        Bytes::from_static(b"{\"job_type\": 5, \"payload\": [1], \"operation_type\": {}}"),
        Bytes::from_static(b"\x80\x02garbage"),
        Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2]),
        Bytes::from_static(&[
            8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}', b' ', b' ', b' ', b' ', b' ', b' ',
        ]),
        Bytes::from(vec![0u8; 1000]),
    ];
    for route in routes {
        for q in ["", "?job_id=1", "?job_id=2", "?job_id=99", "?job_id=-1"] {
            for body in &bodies {
                let r = call(
                    &router,
                    "POST",
                    &format!("{route}{q}"),
                    Body::from(body.clone()),
                )
                .await;
                // Garbage is refused: a 4xx, or the real server's plain-text 500 for a
                // failure inside a handler; never a crash or another 5xx.
                assert!(
                    r.status.as_u16() < 500
                        || (r.status == StatusCode::INTERNAL_SERVER_ERROR
                            && r.body == "Internal Server Error"),
                    "{route}{q} {body:?}: {} {:?}",
                    r.status,
                    r.body
                );
                if !r.status.is_success() {
                    assert!(!r.detail().is_empty(), "{route}{q}: {:?}", r.body);
                }
            }
        }
    }
    let health = call(&router, "GET", "/health", Body::empty()).await;
    assert_eq!(health.status, StatusCode::OK);
}

/// A `meta` with `load_balancer` but no `max_token_len_per_gpu` fails inside the real server's
/// handler: a plain-text 500 that says nothing. The `x-rlharness-error` header (which the
/// recording proxy writes to the wire) names the missing key.
#[tokio::test]
async fn a_load_balancer_without_max_token_len_is_a_plain_500() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let call_with = |meta: Value, update: bool| {
        let processing = if update {
            json!({"loss_fn": "grpo"})
        } else {
            json!({"loss_fn": null})
        };
        Node::Dict(vec![
            ("batch".into(), batch_node(2, update)),
            ("meta".into(), Node::Json(meta)),
            ("processing".into(), Node::Json(processing)),
        ])
    };
    for (route, update) in [("/forward", false), ("/forward-backward", true)] {
        let uri = format!("{route}?job_id={tid}");
        let bad = json!({"load_balancer": true, "pad_token_id": 0, "temperature": 1.0});
        let r = post_frame(&router, &uri, &call_with(bad, update)).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{route}");
        assert_eq!(r.body, "Internal Server Error", "{route}");
        assert!(r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        let why = r.headers["x-rlharness-error"].to_str().unwrap();
        assert!(
            why.contains("load_balancer") && why.contains("max_token_len_per_gpu"),
            "{why}"
        );
        let good = json!({"load_balancer": true, "max_token_len_per_gpu": 4096,
                          "pad_token_id": 0, "temperature": 1.0});
        let r = post_frame(&router, &uri, &call_with(good, update)).await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {:?}", r.body);
        assert!(!r.headers.contains_key("x-rlharness-error"));
    }
}

/// An empty body (zero bytes) on a route that requires one is FastAPI's 422, before the
/// handler runs: exactly `{"detail": [{"type": "missing", "loc": ["body"], ...}]}`, whatever
/// the route. Routes whose body is optional still take an empty one.
#[tokio::test]
async fn an_empty_body_is_fastapis_field_required() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let want = json!({"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}]});
    for (route, id) in [
        ("/initialize", None),
        ("/destroy", Some(tid)),
        ("/forward-backward", Some(tid)),
        ("/forward", Some(tid)),
        ("/step", Some(tid)),
        ("/save", Some(tid)),
        ("/load-checkpoint", Some(tid)),
        ("/generate", Some(sid)),
        ("/log-probs", Some(sid)),
        ("/operation", Some(sid)),
        ("/weight-sync", Some(tid)),
        ("/weight-norm", None),
    ] {
        let uri = id.map_or(route.to_string(), |id| format!("{route}?job_id={id}"));
        let r = call(&router, "POST", &uri, Body::empty()).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{route}");
        assert_eq!(r.json(), want, "{route}");
        assert!(r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let why = r.headers["x-rlharness-error"].to_str().unwrap();
        assert!(why.contains(route) && why.contains("empty"), "{why}");
    }
    // Nothing was destroyed or created on the way.
    let status = call(&router, "GET", "/status", Body::empty()).await.json();
    assert_eq!(status["jobs"].as_object().unwrap().len(), 2, "{status}");
    for route in ["/wake-inference", "/reset-prefix-cache", "/sleep-inference"] {
        let r = call(
            &router,
            "POST",
            &format!("{route}?job_id={sid}"),
            Body::empty(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {:?}", r.body);
    }
}

/// The done-when session of the issue, over a real port with an HTTP client.
#[tokio::test]
async fn full_session_over_a_real_port() {
    let engine = MockEngine::new(MockScript::default(), 3).unwrap();
    let (router, handle) = recorded(engine, ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server::serve(listener, router, async {
        let _ = stop_rx.await;
    }));
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();

    let get = |route: String| {
        let http = http.clone();
        let url = format!("{base}{route}");
        async move {
            http.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let post = |route: String, body: Value| {
        let http = http.clone();
        let url = format!("{base}{route}");
        async move {
            let r = http.post(url).json(&body).send().await.unwrap();
            let status = r.status();
            let v: Value = r.json().await.unwrap();
            assert!(status.is_success(), "{status}: {v}");
            v
        }
    };
    let post_frame = |route: String, root: Node| {
        let http = http.clone();
        let url = format!("{base}{route}");
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/octet-stream")
                .body(encode(&root).unwrap())
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            assert!(r.headers()["content-type"]
                .to_str()
                .unwrap()
                .contains("application/octet-stream"));
            assert!(r.headers().contains_key(SIM_DURATION_HEADER));
            decode(r.bytes().await.unwrap()).unwrap()
        }
    };

    let health = get("/health".into()).await;
    assert_eq!(health, json!({"status": "OK"}));
    let sid = post("/initialize".into(), sampling_config()).await["job_id"]
        .as_u64()
        .unwrap();
    let tid = post(
        "/initialize".into(),
        training_config(&dir.path().display().to_string()),
    )
    .await["job_id"]
        .as_u64()
        .unwrap();
    let info = get(format!("/job/{tid}")).await;
    assert_eq!(info["status"], json!("RUNNING"));

    // generate: one prompt a request, n rollouts.
    let gen = post_frame(
        format!("/generate?job_id={sid}"),
        generate_call(&["Q:3+4=?\nA:"], 4),
    )
    .await;
    let gen = node_to_json(&gen).unwrap();
    assert_eq!(gen["job_id"], json!(sid));
    let results = gen["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        assert_eq!(r["prompt_len"], json!(10));
        assert_eq!(
            r["generation_len"],
            json!(r["token_ids"].as_array().unwrap().len())
        );
        assert!(["stop", "length"].contains(&r["finish_reason"].as_str().unwrap()));
        assert!(r["prefix_cache_len"].is_number() && r["text"].is_string());
    }

    // forward (old log-probs), DSSST1 in and out.
    let fwd = post_frame(
        format!("/forward?job_id={tid}"),
        model_call(
            batch_node(4, false),
            json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": null}),
        ),
    )
    .await;
    let Node::Dict(entries) = fwd else {
        panic!("forward answer is not a dict")
    };
    let batch = &entries.iter().find(|(k, _)| k == "batch").unwrap().1;
    let Node::Dict(batch) = batch else {
        panic!("batch is not a dict")
    };
    let Node::Tensor { tensor: lp, .. } = &batch[0].1 else {
        panic!("logprobs is not a tensor")
    };
    assert_eq!(lp.shape, vec![4, 20]);
    let lp = tensor_f64(lp, "logprobs").unwrap();
    assert!(lp[11..17].iter().all(|&v| v < 0.0), "{lp:?}");
    assert!(lp[17..20].iter().all(|&v| v == 0.0));

    // forward-backward and step.
    let fb = post_frame(
        format!("/forward-backward?job_id={tid}"),
        model_call(batch_node(4, true), json!({"post": ["apply_temperature", "compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"})),
    )
    .await;
    let fb = node_to_json(&fb).unwrap();
    assert!(fb["metrics"]["actor/pg_loss"].is_number(), "{fb}");
    let step = post(
        format!("/step?job_id={tid}"),
        json!({"learning_rate": null}),
    )
    .await;
    assert_eq!(step["metrics"]["last_lr"], json!(1e-6));
    assert!(step["metrics"]["grad_norm"].as_f64().unwrap() > 0.0);
    assert_eq!(step["batch"], json!({}));

    // Weight sync as verl does it.
    let norms = |body: Value| post("/weight-norm".into(), body);
    let before = norms(json!({"training_job_id": tid, "sampling_job_id": sid})).await;
    assert_ne!(before["training_norm"], before["sampling_norm"]);
    post(
        format!("/sleep-inference?job_id={sid}"),
        json!({"level": 1}),
    )
    .await;
    let w = post(format!("/wake-inference?job_id={sid}"), json!(["weights"])).await;
    assert_eq!(w["sampling"]["status"], json!("weights_ready"));
    let ws = post(
        format!("/operation?job_id={tid}"),
        json!({"operation_type": "weight-sync", "sub_job_id": tid, "sub_job_type": "training",
               "payload": {"source_sub_job_id": tid, "target_sub_job_ids": [sid], "cuda_ipc": false}}),
    )
    .await;
    assert_eq!(ws, json!({"job_id": tid, "status": "ok"}));
    let k = post(format!("/wake-inference?job_id={sid}"), json!(["kv_cache"])).await;
    assert_eq!(k["sampling"]["status"], json!("ready"));
    post(
        format!("/operation?job_id={sid}"),
        json!({"operation_type": "reset-prefix-cache", "sub_job_id": sid, "sub_job_type": "sampling", "payload": {}}),
    )
    .await;
    let after = norms(json!({"training_job_id": tid, "sampling_job_id": sid})).await;
    assert_eq!(after["training_norm"], after["sampling_norm"]);
    assert!(after["training_num_params"].as_u64().unwrap() > 500_000_000);

    // save, then destroy both jobs.
    let saved = post(
        format!("/save?job_id={tid}"),
        json!({"checkpoint_type": "full", "export_hf": false}),
    )
    .await;
    assert_eq!(saved["job_id"], json!(tid));
    assert_eq!(saved["global_step"], json!(1));
    assert!(std::path::Path::new(saved["path"].as_str().unwrap())
        .join("mock_checkpoint.json")
        .exists());
    let loaded = post(format!("/load-checkpoint?job_id={tid}"), json!({"step": 1})).await;
    assert_eq!(loaded["global_step"], json!(1));
    post(
        format!("/destroy?job_id={sid}"),
        json!({"job_type": "sampling"}),
    )
    .await;
    post(
        format!("/destroy?job_id={tid}"),
        json!({"job_type": "training"}),
    )
    .await;
    let status = get("/status".into()).await;
    assert_eq!(status["jobs"], json!({}));

    let routes: Vec<String> = handle.requests().into_iter().map(|r| r.route).collect();
    for want in [
        "/generate",
        "/forward",
        "/forward-backward",
        "/step",
        "/operation",
        "/save",
        "/destroy",
    ] {
        assert!(
            routes.iter().any(|r| r == want),
            "{want} not recorded: {routes:?}"
        );
    }
    stop_tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn log_prob_jobs_forward_and_score() {
    let (router, _) = app();
    let lp = post_json(
        &router,
        "/initialize",
        json!({"model_name": "m", "job_type": "log_prob"}),
    )
    .await;
    let id = lp.json()["job_id"].as_u64().unwrap();
    // Without ds_config the log_prob job runs no DeepSpeed engine to forward.
    let f = post_frame(
        &router,
        &format!("/forward?job_id={id}"),
        &model_call(batch_node(1, false), json!({"loss_fn": null})),
    )
    .await;
    f.assert_refused(StatusCode::BAD_REQUEST, "ds_config");
    let r = post_json(
        &router,
        &format!("/log-probs?job_id={id}"),
        json!({"prompts": ["Q:1+1=?\nA:"], "completions": ["#### 2"], "top_k": 1}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let v = r.frame();
    assert_eq!(v["results"][0]["logprobs"], json!({"shape": [6]}));
    assert_eq!(v["results"][0]["token_ids"].as_array().unwrap().len(), 6);
}

#[tokio::test]
async fn standalone_server_refuses_an_invalid_script() {
    let script = MockScript {
        device: "abacus".into(),
        ..MockScript::default()
    };
    let err = rlharness::backend::mock::serve_mock_standalone("127.0.0.1", 0, script, 1)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("abacus"), "{err}");
}

/// The five routes the client exposes beyond the adapter's, and the `workers` lists of the
/// sleep/wake answers.
#[tokio::test]
async fn training_and_log_prob_sleep_routes_answer_with_workers() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let post = |uri: String, body: Value| {
        let router = router.clone();
        async move { post_json(&router, &uri, body).await.json() }
    };
    let r = post(
        format!("/sleep-training?job_id={tid}&mode=non_lp"),
        json!({}),
    )
    .await;
    assert_eq!(
        r,
        json!({"job_id": tid, "workers": [{"status": "offloaded_non_lp"}]})
    );
    let r = post(
        format!("/sleep-training?job_id={tid}"),
        json!({"mode": "non_lp"}),
    )
    .await;
    assert_eq!(r["workers"][0]["status"], "already_offloaded");
    let r = post(format!("/wake-training?job_id={tid}"), Value::Null).await;
    assert_eq!(r["workers"][0]["status"], "on_gpu");
    let r = post(format!("/wake-training?job_id={tid}"), Value::Null).await;
    assert_eq!(r["workers"][0]["status"], "already_on_gpu");
    let r = post(format!("/empty-training-cache?job_id={tid}"), Value::Null).await;
    assert!(r["workers"].is_array(), "{r}");
    let wrong = post_json(&router, &format!("/sleep-log-prob?job_id={tid}"), json!({})).await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);

    let r = post(
        format!("/sleep-inference?job_id={sid}&level=1"),
        Value::Null,
    )
    .await;
    assert_eq!(r["sampling"], json!({"status": "sleeping", "level": 1}));
    assert!(r["workers"].is_array(), "{r}");
    let r = post(format!("/wake-inference?job_id={sid}"), Value::Null).await;
    assert_eq!(r["sampling"]["status"], "ready");
    let r = post(format!("/wake-inference?job_id={sid}"), Value::Null).await;
    assert_eq!(r["sampling"], json!({"status": "already_ready"}), "no tags");
    assert!(r["workers"].is_array(), "{r}");
}

/// `/forward` looks its job up before checking it exists: an unknown id is the real server's
/// plain-text 500, while other routes answer a JSON 404.
#[tokio::test]
async fn an_unknown_job_on_forward_is_a_500_elsewhere_a_404() {
    let (router, _) = app();
    let (_sid, _tid, _dir) = two_jobs(&router).await;
    let r = post_frame(
        &router,
        "/forward?job_id=99",
        &model_call(batch_node(2, false), json!({"loss_fn": null})),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.body, "Internal Server Error");
    let r = post_json(&router, "/step?job_id=99", json!({})).await;
    r.assert_refused(StatusCode::NOT_FOUND, "job 99");
}

/// An assertion inside `/save` or `/load-checkpoint` (here: no checkpoint to load, a
/// checkpoint folder that does not exist) is the real server's plain-text 500, not a JSON 4xx;
/// a value of the wrong type is the framework's 422 with a list in `detail`.
#[tokio::test]
async fn save_and_load_assertions_are_plain_500s() {
    let (router, _) = app();
    let (_sid, tid, dir) = two_jobs(&router).await;
    let q = |route: &str| format!("{route}?job_id={tid}");
    let missing = dir.path().join("nowhere").display().to_string();
    for load in [
        json!({"path": null, "step": null}),
        json!({"path": missing, "step": null}),
    ] {
        let r = post_json(&router, &q("/load-checkpoint"), load).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.body, "Internal Server Error");
    }
    let r = post_json(&router, &q("/save"), json!({"step": "one"})).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.json()["detail"].is_array());
}
