//! Cost of the recording proxy on forward-backward-sized POSTs: the same DSSST1 frame sent
//! directly to a trivial upstream and through the proxy, interleaved, median of N.
//!
//! `cargo bench --bench proxy` (env `PROXY_BENCH_RUNS`, default 9; `PROXY_BENCH_MB`, default 256).

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use futures_util::StreamExt;
use rlharness::run::proxy::{self, ProxyConfig};
use rlharness_arctic::wire::{self, DType, Node, Tensor};
use serde_json::json;
use tokio::net::TcpListener;

/// Reads the whole body (counting it, as a server decoding in place would touch it) and answers.
async fn consume(body: Body) -> axum::Json<serde_json::Value> {
    let mut n = 0usize;
    let mut s = body.into_data_stream();
    while let Some(chunk) = s.next().await {
        match chunk {
            Ok(c) => n += c.len(),
            Err(_) => break,
        }
    }
    axum::Json(json!({"job_id": 1, "bytes": n}))
}

fn frame(mb: usize) -> Bytes {
    let (b, s) = (1024usize, ((mb << 20) / (1024 * 30)).max(2));
    let t = |dtype: DType, seed: u8| {
        let n = b * s * dtype.size();
        let data: Vec<u8> = (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        Node::from(Tensor {
            dtype,
            shape: vec![b, s],
            data: Bytes::from(data),
        })
    };
    let root = Node::dict([
        (
            "batch",
            Node::dict([
                ("input_ids", t(DType::I64, 1)),
                ("attention_mask", t(DType::I64, 2)),
                ("position_ids", t(DType::I64, 3)),
                ("old_log_probs", t(DType::BF16, 4)),
                ("advantages", t(DType::BF16, 5)),
                ("response_mask", t(DType::BF16, 6)),
            ]),
        ),
        ("meta", Node::json(json!({"temperature": 1.0}))),
        (
            "processing",
            Node::json(json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"})),
        ),
    ]);
    Bytes::from(wire::encode(&root).expect("bench frame encodes"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn send(c: &reqwest::Client, url: &str, body: &Bytes) -> f64 {
    let t = Instant::now();
    let r = c
        .post(url)
        .header("content-type", "application/octet-stream")
        .body(body.clone())
        .send()
        .await
        .expect("bench request");
    assert!(
        r.status().is_success(),
        "bench request failed: {}",
        r.status()
    );
    let v: serde_json::Value = r.json().await.expect("bench response");
    assert_eq!(v["bytes"].as_u64(), Some(body.len() as u64));
    t.elapsed().as_secs_f64()
}

/// `name`'s value from the environment as a count, else `default`.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The trivial upstream on a free local port: its address.
async fn start_upstream() -> std::net::SocketAddr {
    let up = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let up_addr = up.local_addr().expect("upstream addr");
    let app = Router::new()
        .route("/forward-backward", post(consume))
        .layer(axum::extract::DefaultBodyLimit::disable());
    tokio::spawn(async move { axum::serve(up, app).await });
    up_addr
}

/// The floor of any user-space relay: a raw TCP relay (no HTTP, no recording) between the
/// same client and upstream. What it adds is the cost of moving the bytes through one more
/// process hop on this machine's cores. Its address.
async fn start_relay(up_addr: std::net::SocketAddr) -> std::net::SocketAddr {
    let relay = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
    let relay_addr = relay.local_addr().expect("relay addr");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = relay.accept().await {
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(up_addr).await else {
                    return;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut inbound,
                    &mut outbound,
                    1 << 20,
                    1 << 20,
                )
                .await;
            });
        }
    });
    relay_addr
}

#[tokio::main]
async fn main() {
    let runs = env_count("PROXY_BENCH_RUNS", 9);
    let mb = env_count("PROXY_BENCH_MB", 256);
    let body = frame(mb);

    let up_addr = start_upstream().await;

    let dir = tempfile::tempdir().expect("temp dir");
    let pl = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let handle = proxy::start(
        pl,
        ProxyConfig {
            upstream: format!("http://{up_addr}"),
            record_dir: dir.path().to_path_buf(),
            body_limit: 4 << 30,
            request_timeout: Duration::from_secs(600),
        },
        None,
    )
    .await
    .expect("start proxy");

    let relay_addr = start_relay(up_addr).await;

    let c = reqwest::Client::new();
    let direct_url = format!("http://{up_addr}/forward-backward?job_id=1");
    let proxy_url = format!("http://{}/forward-backward?job_id=1", handle.addr);
    let relay_url = format!("http://{relay_addr}/forward-backward?job_id=1");
    // Warm every path (connections, page faults).
    send(&c, &direct_url, &body).await;
    send(&c, &proxy_url, &body).await;
    send(&c, &relay_url, &body).await;
    let (mut direct, mut proxied, mut relayed) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        // Rotate which goes first so drift in the machine's load hits all alike.
        for k in 0..3 {
            match (i + k) % 3 {
                0 => direct.push(send(&c, &direct_url, &body).await),
                1 => proxied.push(send(&c, &proxy_url, &body).await),
                _ => relayed.push(send(&c, &relay_url, &body).await),
            }
        }
    }
    handle.shutdown().await;
    let lines = std::fs::read_to_string(dir.path().join("wire.jsonl"))
        .unwrap_or_default()
        .lines()
        .count();
    print_results(&body, runs, &direct, &proxied, &relayed, lines);
}

/// The medians (and minima) of the three paths, and the overheads against the direct one.
fn print_results(
    body: &Bytes,
    runs: usize,
    direct: &[f64],
    proxied: &[f64],
    relayed: &[f64],
    lines: usize,
) {
    let (d, p) = (median(direct.to_vec()), median(proxied.to_vec()));
    let gb = body.len() as f64 / 1e9;
    println!(
        "proxy bench: {:.1} MB DSSST1 POST /forward-backward, median of {runs} interleaved runs",
        body.len() as f64 / 1e6
    );
    println!(
        "direct        {:>9.1} ms  {:>6.2} GB/s   (min {:.1} ms)",
        d * 1e3,
        gb / d,
        direct.iter().cloned().fold(f64::MAX, f64::min) * 1e3
    );
    println!(
        "through proxy {:>9.1} ms  {:>6.2} GB/s   (min {:.1} ms)",
        p * 1e3,
        gb / p,
        proxied.iter().cloned().fold(f64::MAX, f64::min) * 1e3
    );
    let r = median(relayed.to_vec());
    println!(
        "raw TCP relay {:>9.1} ms  {:>6.2} GB/s   (min {:.1} ms; the floor of any relay here)",
        r * 1e3,
        gb / r,
        relayed.iter().cloned().fold(f64::MAX, f64::min) * 1e3
    );
    let overhead = (p - d) / d * 100.0;
    println!(
        "proxy overhead: {overhead:+.1}% of the direct time (target <= 2%); {lines} lines recorded"
    );
    println!(
        "raw relay overhead: {:+.1}%; the recording proxy over the raw relay: {:+.1}%; {} cores",
        (r - d) / d * 100.0,
        (p - r) / r * 100.0,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}
