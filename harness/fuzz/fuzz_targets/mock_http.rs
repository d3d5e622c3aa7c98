//! The mock's HTTP handlers on arbitrary requests: the first byte picks the route, the second
//! the job id and the content type, the rest is the body. The server has a training and an
//! awake sampling job, so binary and JSON bodies reach the engine. Every request must be
//! answered (an error status is fine) with a well-formed body, never a panic. `/save` is left
//! out: it writes wherever its body's `path` says, and the fuzzer would litter the disk.
#![no_main]

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use rlharness_arctic::mock::{MockEngine, MockScript};
use rlharness_arctic::server::{self, ServerOptions};
use serde_json::json;
use tower::ServiceExt;

const ROUTES: &[(&str, &str)] = &[
    ("POST", "/initialize"),
    ("GET", "/job/"),
    ("GET", "/status"),
    ("POST", "/destroy"),
    ("POST", "/forward-backward"),
    ("POST", "/forward"),
    ("POST", "/step"),
    ("POST", "/load-checkpoint"),
    ("POST", "/generate"),
    ("POST", "/log-probs"),
    ("POST", "/sleep-inference"),
    ("POST", "/wake-inference"),
    ("POST", "/reset-prefix-cache"),
    ("POST", "/operation"),
    ("POST", "/weight-sync"),
    ("POST", "/weight-norm"),
    ("POST", "/weight-digest"),
    ("GET", "/health"),
];

const CONTENT_TYPES: &[&str] = &["application/json", "application/octet-stream", "text/plain"];

async fn send(
    router: &axum::Router,
    method: &str,
    uri: &str,
    ct: &str,
    body: Vec<u8>,
) -> (u16, bytes::Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .body(Body::from(body))
        .expect("a well-formed request");
    let resp = router
        .clone()
        .oneshot(req)
        .await
        .expect("the router is infallible");
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a response body");
    (status, bytes)
}

/// The training job's checkpoint folder, made once a process.
fn checkpoints() -> String {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temp folder"))
        .path()
        .display()
        .to_string()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (method, route) = ROUTES[data[0] as usize % ROUTES.len()];
    // Job 1 is the training job, 2 the sampling job, 3 does not exist.
    let job = 1 + (data[1] % 4) as u64;
    let ct = CONTENT_TYPES[(data[1] / 4) as usize % CONTENT_TYPES.len()];
    let body = data[2..].to_vec();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let engine = MockEngine::new(MockScript::default(), 7).expect("the default script");
        let (router, _) = server::router(Arc::new(engine), ServerOptions::default());
        for cfg in [
            json!({"model_name": "Qwen/Qwen3-0.6B", "job_type": "training",
                   "checkpoint_path": checkpoints(),
                   "ds_config": {"optimizer": {"type": "AdamW", "params": {"lr": 1e-6}}}}),
            json!({"model_name": "Qwen/Qwen3-0.6B", "job_type": "sampling",
                   "vllm_config": {"max_model_len": 64}}),
        ] {
            let (s, _) = send(
                &router,
                "POST",
                "/initialize",
                "application/json",
                cfg.to_string().into_bytes(),
            )
            .await;
            assert_eq!(s, 200);
        }
        let (s, _) = send(
            &router,
            "POST",
            "/wake-inference?job_id=2",
            "application/json",
            b"[\"weights\", \"kv_cache\"]".to_vec(),
        )
        .await;
        assert_eq!(s, 200);
        let uri = if route == "/job/" {
            format!("/job/{job}")
        } else {
            format!("{route}?job_id={job}")
        };
        let (status, answer) = send(&router, method, &uri, ct, body).await;
        assert!((200..600).contains(&status));
        if status >= 400 {
            let v: serde_json::Value = serde_json::from_slice(&answer)
                .unwrap_or_else(|e| panic!("error answer {status} is not JSON ({e})"));
            assert!(
                v.get("detail").is_some(),
                "error answer without detail: {v}"
            );
        }
    });
});
