//! The recording proxy against a tiny in-process upstream on real ports.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use rlharness::run::proxy::{self, ProxyConfig, ProxyHandle};
use rlharness_arctic::wire::{self, api::SIM_DURATION_HEADER, Node, Tensor};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

const OCTET: &str = "application/octet-stream";

async fn initialize(body: Bytes) -> impl IntoResponse {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if v.get("model_name").is_none() {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            axum::Json(json!({"detail": "model_name missing"})),
        );
    }
    let job_type = v.get("job_type").cloned().unwrap_or(json!("training"));
    (
        StatusCode::OK,
        axum::Json(json!({"job_id": 1, "job_type": job_type, "running": true})),
    )
}

async fn forward_backward(body: Bytes) -> impl IntoResponse {
    let root = match wire::decode(body) {
        Ok(r) => r,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                HeaderMap::new(),
                e.to_string().into_bytes(),
            )
        }
    };
    let b = root
        .get("batch")
        .and_then(|b| b.get("input_ids"))
        .and_then(Node::as_tensor);
    let rows = b.map(|t| t.shape[0]).unwrap_or(0);
    let out = Node::dict([
        ("job_id", Node::json(1)),
        (
            "metrics",
            Node::json(json!({"actor/pg_loss": 0.25, "rows": rows})),
        ),
        (
            "avg_loss",
            Node::scalar(Tensor::from_f32(vec![], &[0.25]).unwrap()),
        ),
    ]);
    let mut h = HeaderMap::new();
    h.insert("content-type", OCTET.parse().unwrap());
    h.insert(SIM_DURATION_HEADER, "1.25".parse().unwrap());
    (StatusCode::OK, h, wire::encode(&out).unwrap())
}

async fn echo(body: Bytes) -> impl IntoResponse {
    let digest = format!("{:x}", Sha256::digest(&body));
    let mut h = HeaderMap::new();
    h.insert("content-type", OCTET.parse().unwrap());
    h.insert("x-sha256", digest.parse().unwrap());
    (h, body)
}

async fn job(Path(id): Path<u64>) -> axum::Json<Value> {
    axum::Json(json!({"job_id": id, "status": "RUNNING"}))
}

async fn stall() -> &'static str {
    std::future::pending::<()>().await;
    "never"
}

async fn upstream() -> String {
    let app = Router::new()
        .route("/initialize", post(initialize))
        .route("/forward-backward", post(forward_backward))
        .route("/echo", post(echo))
        .route("/job/{id}", get(job))
        .route("/stall", get(stall))
        .layer(axum::extract::DefaultBodyLimit::disable());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    format!("http://{addr}")
}

async fn proxy_to(
    upstream: &str,
    body_limit: u64,
    timeout: Duration,
) -> (ProxyHandle, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = ProxyConfig {
        upstream: upstream.to_string(),
        record_dir: dir.path().to_path_buf(),
        body_limit,
        request_timeout: timeout,
    };
    let h = proxy::start(l, cfg, None).await.unwrap();
    let url = format!("http://{}", h.addr);
    (h, dir, url)
}

/// POST `n` chunks of `size` bytes with `Transfer-Encoding: chunked`; the response status.
async fn chunked_post_status(base: &str, path: &str, n: usize, size: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n").into_bytes();
    for _ in 0..n {
        req.extend_from_slice(format!("{size:x}\r\n").as_bytes());
        req.extend(std::iter::repeat_n(b'1', size));
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    // The proxy may answer and close before reading everything; a failed write is fine.
    let _ = s.write_all(&req).await;
    let mut head = Vec::new();
    let _ = s.read_to_end(&mut head).await;
    let text = String::from_utf8_lossy(&head);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn records(dir: &tempfile::TempDir) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.path().join("wire.jsonl")).unwrap();
    let mut v: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    v.sort_by_key(|r| r["seq"].as_u64());
    v
}

#[tokio::test]
async fn json_and_frames_are_recorded_and_configs_kept_by_job_type() {
    let up = upstream().await;
    let (events_tx, mut events_rx) = rlharness::model::events::channel();
    let dir = tempfile::tempdir().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = ProxyConfig {
        upstream: up.clone(),
        record_dir: dir.path().to_path_buf(),
        body_limit: 1 << 30,
        request_timeout: Duration::from_secs(30),
    };
    let h = proxy::start(l, cfg, Some(events_tx)).await.unwrap();
    let url = format!("http://{}", h.addr);
    let c = reqwest::Client::new();

    let training = json!({"model_name": "m", "job_type": "training", "checkpoint_path": "/c",
        "ds_config": {"zero_optimization": {"stage": 2}}, "mystery_knob": 7});
    let sampling = json!({"model_name": "m", "job_type": "sampling", "vllm_config": {"gpu_memory_utilization": 0.5}});
    for cfg in [&training, &sampling] {
        let r = c
            .post(format!("{url}/initialize"))
            .json(cfg)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // A refused initialize is not a config the server received.
    let r = c
        .post(format!("{url}/initialize"))
        .json(&json!({"job_type": "log_prob"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);

    let batch = Node::dict([
        (
            "batch",
            Node::dict([
                (
                    "input_ids",
                    Node::from(Tensor::from_i64([2, 3], &[1, 2, 3, 4, 5, 6]).unwrap()),
                ),
                (
                    "old_log_probs",
                    Node::from(Tensor::from_f32_as_bf16([2, 3], &[0.0; 6]).unwrap()),
                ),
            ]),
        ),
        (
            "meta",
            Node::json(json!({"temperature": 0.7, "drop_position_ids": true})),
        ),
        (
            "processing",
            Node::json(json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"})),
        ),
    ]);
    let frame = wire::encode(&batch).unwrap();
    let r = c
        .post(format!("{url}/forward-backward?job_id=3"))
        .header("content-type", OCTET)
        .body(frame.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let back = wire::decode(r.bytes().await.unwrap()).unwrap();
    assert_eq!(back.get_json("metrics").unwrap()["rows"], 2);

    let r = c.get(format!("{url}/job/5")).send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["job_id"], 5);
    assert!(
        h.last_activity()
            .unwrap()
            .starts_with("GET /job/5 answered 200"),
        "{:?}",
        h.last_activity()
    );
    h.shutdown().await;

    let recs = records(&dir);
    assert_eq!(recs.len(), 5);
    assert_eq!(recs[0]["route"], "/initialize");
    assert_eq!(recs[0]["request"]["json"], training);
    assert_eq!(recs[0]["response"]["json"]["job_id"], 1);
    assert!(recs[0]["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(recs[2]["status"], 422);

    let fb = &recs[3];
    assert_eq!(
        (
            fb["method"].as_str(),
            fb["route"].as_str(),
            fb["job_id"].as_i64()
        ),
        (Some("POST"), Some("/forward-backward"), Some(3))
    );
    assert_eq!(fb["request"]["bytes"], frame.len());
    assert_eq!(fb["request"]["dssst1"], batch.summary());
    assert_eq!(
        fb["request"]["dssst1"]["batch"]["old_log_probs"],
        json!({"dtype": "BF16", "shape": [2, 3]})
    );
    assert_eq!(fb["request"]["dssst1"]["meta"]["temperature"], 0.7);
    assert_eq!(
        fb["response"]["dssst1"]["avg_loss"],
        json!({"dtype": "F32", "shape": []})
    );
    assert_eq!(fb["sim_seconds"], 1.25);
    assert!(fb["duration_s"].as_f64().unwrap() >= 0.0);
    assert_eq!(recs[4]["job_id"], 5);
    assert_eq!(recs[4]["request"], Value::Null);

    let configs: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("server_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(configs, json!({"training": training, "sampling": sampling}));

    let mut routes = Vec::new();
    while let Ok(ev) = events_rx.try_recv() {
        if let rlharness::model::events::RunEvent::Request { route, status, .. } = ev {
            routes.push((route, status));
        }
    }
    assert_eq!(routes.len(), 5);
    assert!(routes.contains(&("/forward-backward".into(), 200)));
}

#[tokio::test]
async fn refused_upstream_gets_502_quickly() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (h, dir, url) = proxy_to(
        &format!("http://127.0.0.1:{port}"),
        1 << 20,
        Duration::from_secs(20),
    )
    .await;
    let t = Instant::now();
    let r = reqwest::Client::new()
        .post(format!("{url}/step?job_id=1"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert!(t.elapsed() < Duration::from_secs(5));
    let detail = r.json::<Value>().await.unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.contains(&format!(
            "upstream http://127.0.0.1:{port} refused the connection on POST /step"
        )),
        "{detail}"
    );
    h.shutdown().await;
    let recs = records(&dir);
    assert_eq!(recs[0]["status"], 502);
    assert_eq!(recs[0]["error"], detail);
    assert_eq!(recs[0]["request"]["json"], json!({}));
}

#[tokio::test]
async fn upstream_that_drops_the_connection_gets_502() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    let (h, _dir, url) =
        proxy_to(&format!("http://{addr}"), 1 << 20, Duration::from_secs(20)).await;
    let r = reqwest::Client::new()
        .get(format!("{url}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let detail = r.json::<Value>().await.unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains("on GET /health"), "{detail}");
    h.shutdown().await;
}

#[tokio::test]
async fn stalled_upstream_gets_504_within_the_timeout() {
    let up = upstream().await;
    let (h, dir, url) = proxy_to(&up, 1 << 20, Duration::from_millis(300)).await;
    // The proxy shows the request in flight for its 0.3 s; a test thread the machine did not
    // run for that long finds it answered instead, and asks again (it used to poll 100 times
    // and then fail, wherever the request had got to).
    let mut attempts = 0;
    let (r, activity) = loop {
        attempts += 1;
        let t = Instant::now();
        let request = tokio::spawn(reqwest::Client::new().get(format!("{url}/stall")).send());
        // Poll until the proxy shows the request in flight, or has answered it.
        let mut activity = None;
        while activity.is_none() && !request.is_finished() {
            activity = h
                .last_activity()
                .filter(|a| a.starts_with("GET /stall (in flight"));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let r = request.await.unwrap().unwrap();
        assert_eq!(r.status(), 504);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        if let Some(a) = activity {
            break (r, a);
        }
        assert!(attempts < 20, "never seen in flight in {attempts} requests");
    };
    assert!(activity.starts_with("GET /stall (in flight"), "{activity}");
    let detail = r.json::<Value>().await.unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.contains("did not answer within 0.3 s on GET /stall"),
        "{detail}"
    );
    h.shutdown().await;
    let recs = records(&dir);
    assert_eq!(recs.len(), attempts);
    assert!(recs.iter().all(|r| r["status"] == 504), "{recs:?}");
}

#[tokio::test]
async fn body_over_the_limit_gets_413() {
    let up = upstream().await;
    let (h, dir, url) = proxy_to(&up, 1000, Duration::from_secs(20)).await;
    let c = reqwest::Client::new();
    let echo = |len: usize| c.post(format!("{url}/echo")).body(vec![0u8; len]).send();
    let r = echo(1001).await.unwrap();
    assert_eq!(r.status(), 413);
    assert!(r.json::<Value>().await.unwrap()["detail"]
        .as_str()
        .unwrap()
        .contains("limit of 1000 bytes"));
    // Without a length up front (chunked) the limit cuts the stream.
    assert_eq!(chunked_post_status(&url, "/echo", 4, 400).await, 413);
    let r = echo(1000).await.unwrap();
    assert_eq!(r.status(), 200);
    h.shutdown().await;
    let recs = records(&dir);
    assert_eq!(
        recs.iter()
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![413, 413, 200]
    );
    assert_eq!(recs[0]["request"]["bytes"], 1001);
}

#[tokio::test]
async fn a_64_mb_body_streams_through_unchanged() {
    let up = upstream().await;
    let (h, dir, url) = proxy_to(&up, 1 << 30, Duration::from_secs(120)).await;
    let mut body = vec![0u8; 64 << 20];
    let mut x = 0x9E3779B97F4A7C15u64;
    for chunk in body.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let want = format!("{:x}", Sha256::digest(&body));
    let r = reqwest::Client::new()
        .post(format!("{url}/echo"))
        .header("content-type", OCTET)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-sha256"].to_str().unwrap(), want);
    let back = r.bytes().await.unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(&back)), want);
    h.shutdown().await;
    let rec = &records(&dir)[0];
    assert_eq!(rec["request"]["bytes"], 64u64 << 20);
    assert_eq!(rec["response"]["bytes"], 64u64 << 20);
    // Random bytes are not a frame: the record says so instead of failing.
    assert!(rec["request"]["dssst1_error"].is_string(), "{rec}");
}
