//! Load: the standalone mock server and the recording proxy in front of it each take 1,000
//! concurrent requests, 100 of them malformed (bad JSON, bad DSSST1, a wrong content type,
//! a truncated body), three rounds in a row, on loopback only. Nothing may crash, every
//! valid request must succeed, every malformed one must be refused as the real server refuses
//! it: bad JSON a 4xx, a frame that does not decode the plain-text 500 of a failure inside the
//! handler, a truncated body a 4xx or a closed connection. The resident memory must not keep
//! growing from round to round.
//!
//! Part of the test command (a few seconds: 1.9 s on 2 cores); `ci/load.sh` runs it alone and
//! prints the latency percentiles and the peak RSS of each server process.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use rlharness_arctic::wire::{encode, Node};

const CONCURRENT: usize = 1000;
const MALFORMED: usize = 100;
const ROUNDS: usize = 3;

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `rlharness ARGS` and read the `http://ADDR` it prints when it listens.
fn start(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    Server { child, addr }
}

/// `VmHWM` (peak) and `VmRSS` of a process, in MiB.
fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
            / 1024.0
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// One raw HTTP/1.1 exchange: the status, or what went wrong (`closed` when the connection
/// ended without a status line).
async fn exchange(addr: &str, head: String, body: &[u8], truncate: bool) -> Result<u16, String> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    s.write_all(body).await.map_err(|e| format!("write: {e}"))?;
    if truncate {
        // Fewer bytes than Content-Length, then end of stream.
        s.shutdown().await.map_err(|e| format!("shutdown: {e}"))?;
    }
    let mut buf = Vec::new();
    let read = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| match read {
            Err(e) => format!("read: {e}"),
            Ok(_) => "closed".to_string(),
        })
}

async fn raw(addr: &str, head: String, body: &[u8], truncate: bool) -> Option<u16> {
    exchange(addr, head, body, truncate).await.ok()
}

fn request(method: &str, path: &str, ct: &str, len: usize) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: load\r\ncontent-type: {ct}\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n"
    )
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Valid,
    Malformed,
}

/// Request `i` of a round: what it is and the answer it must get.
async fn one(addr: String, i: usize) -> (Kind, Duration, Result<(), String>) {
    let started = Instant::now();
    let (kind, outcome) = if i % (CONCURRENT / MALFORMED) == 0 {
        let k = i / (CONCURRENT / MALFORMED);
        // What each kind must get: bad JSON the framework's 4xx; an undecodable frame (bad
        // DSSST1, or JSON sent where a frame belongs) the real server's 500, as it decodes
        // inside its handler; a truncated body a 4xx or a closed connection.
        let (status, truncated) = match k % 4 {
            0 => {
                let body = b"{\"model_name\": \"Qwen/Qwen3-0.6B\", \"job_type\": ";
                let h = request("POST", "/initialize", "application/json", body.len());
                (raw(&addr, h, body, false).await, false)
            }
            1 => {
                let body = b"DSSST1\x00\xff\xff\xff\xffnot a frame";
                let h = request(
                    "POST",
                    "/forward?job_id=2",
                    "application/octet-stream",
                    body.len(),
                );
                (raw(&addr, h, body, false).await, false)
            }
            2 => {
                let body = br#"{"prompts": ["1+1="]}"#;
                let h = request("POST", "/generate?job_id=1", "text/plain", body.len());
                (raw(&addr, h, body, false).await, false)
            }
            _ => {
                let body = vec![b'{'; 100];
                let h = request("POST", "/step?job_id=2", "application/json", 4096);
                (raw(&addr, h, &body, true).await, true)
            }
        };
        let undecodable = matches!(k % 4, 1 | 2);
        let ok = match status {
            Some(500) if undecodable => Ok(()),
            Some(s) if (400..500).contains(&s) && !undecodable => Ok(()),
            None if truncated => Ok(()),
            other => Err(format!(
                "malformed request {i} (kind {}): got {other:?}",
                k % 4
            )),
        };
        (Kind::Malformed, ok)
    } else {
        let (h, body) = match i % 3 {
            0 => {
                let frame = encode(&Node::Json(json!({
                    "prompts": [format!("{}+{}=", i % 97, i % 13)],
                    "sampling_params": {"n": 4, "max_tokens": 16, "seed": i},
                })))
                .unwrap();
                (
                    request(
                        "POST",
                        "/generate?job_id=1",
                        "application/octet-stream",
                        frame.len(),
                    ),
                    frame,
                )
            }
            1 => {
                let body =
                    json!({"prompts": [format!("{}+1=", i % 50)], "completions": ["#### 7"]})
                        .to_string()
                        .into_bytes();
                (
                    request(
                        "POST",
                        "/log-probs?job_id=3",
                        "application/json",
                        body.len(),
                    ),
                    body,
                )
            }
            _ => (request("GET", "/status", "application/json", 0), Vec::new()),
        };
        let status = exchange(&addr, h, &body, false).await;
        let ok = match status {
            Ok(200) => Ok(()),
            other => Err(format!("valid request {i}: got {other:?}")),
        };
        (Kind::Valid, ok)
    };
    (kind, started.elapsed(), outcome)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// Three rounds of 1,000 concurrent requests against `addr`; returns the report lines.
async fn hammer(label: &str, addr: &str, pid: u32) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rss_after = Vec::new();
    for round in 1..=ROUNDS {
        let tasks: Vec<_> = (0..CONCURRENT)
            .map(|i| {
                tokio::spawn(tokio::time::timeout(
                    Duration::from_secs(120),
                    one(addr.to_string(), i),
                ))
            })
            .collect();
        let started = Instant::now();
        let mut lat = Vec::new();
        let mut errors = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok((kind, d, res)) => {
                    lat.push((kind, d));
                    if let Err(e) = res {
                        errors.push(e);
                    }
                }
                Err(_) => errors.push("a request took over 120 s".into()),
            }
        }
        let wall = started.elapsed();
        assert!(
            errors.is_empty(),
            "{label} round {round}: {} errors, first: {:?}",
            errors.len(),
            &errors[..errors.len().min(5)]
        );
        let (peak, rss) = memory_mib(pid);
        rss_after.push(rss);
        for (name, filter) in [
            ("all", None),
            ("valid", Some(Kind::Valid)),
            ("malformed", Some(Kind::Malformed)),
        ] {
            let mut d: Vec<Duration> = lat
                .iter()
                .filter(|(k, _)| filter.is_none_or(|f| f == *k))
                .map(|(_, d)| *d)
                .collect();
            d.sort();
            lines.push(format!(
                "{label:<13} round {round} {name:<9} n={:<4} p50 {:>7.1} ms  p90 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
                d.len(),
                pct(&d, 0.50),
                pct(&d, 0.90),
                pct(&d, 0.99),
                pct(&d, 1.0),
            ));
        }
        lines.push(format!(
            "{label:<13} round {round} wall {:.2} s, server RSS {rss:.1} MiB, peak RSS {peak:.1} MiB",
            wall.as_secs_f64()
        ));
    }
    // Bounded memory: the last round does not need much more than the first left behind.
    let growth = rss_after[ROUNDS - 1] - rss_after[0];
    assert!(
        growth < 64.0,
        "{label}: RSS grew {growth:.1} MiB from round 1 to round {ROUNDS}: {rss_after:?}"
    );
    assert!(memory_mib(pid).0 < 1024.0, "{label}: peak RSS over 1 GiB");
    lines
}

async fn setup(addr: &str, checkpoints: &Path) {
    let post = |path: &str, body: serde_json::Value| {
        let b = body.to_string().into_bytes();
        let h = request("POST", path, "application/json", b.len());
        let addr = addr.to_string();
        async move { raw(&addr, h, &b, false).await }
    };
    for cfg in [
        json!({"model_name": "Qwen/Qwen3-0.6B", "job_type": "sampling", "vllm_config": {"max_model_len": 64}}),
        json!({"model_name": "Qwen/Qwen3-0.6B", "job_type": "training",
               "checkpoint_path": checkpoints.display().to_string(),
               "ds_config": {"optimizer": {"type": "AdamW", "params": {"lr": 1e-6}}}}),
        json!({"model_name": "Qwen/Qwen3-0.6B", "job_type": "log_prob"}),
    ] {
        assert_eq!(post("/initialize", cfg.clone()).await, Some(200), "{cfg}");
    }
    assert_eq!(
        post("/wake-inference?job_id=1", json!(["weights", "kv_cache"])).await,
        Some(200)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_and_proxy_hold_1000_concurrent_requests_with_100_malformed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut mock = start(&["serve", "mock", "--host", "127.0.0.1", "--port", "0"]);
    setup(&mock.addr, tmp.path()).await;
    let mut report = hammer("mock direct", &mock.addr, mock.child.id()).await;

    let record = tmp.path().join("proxy");
    let upstream = format!("http://{}", mock.addr);
    let mut proxy = start(&[
        "proxy",
        "--upstream",
        &upstream,
        "--listen",
        "127.0.0.1:0",
        "--record",
        record.to_str().unwrap(),
        "--timeout-s",
        "120",
    ]);
    report.extend(hammer("through proxy", &proxy.addr, proxy.child.id()).await);
    let (mock_peak, _) = memory_mib(mock.child.id());
    report.push(format!(
        "mock server peak RSS over both phases: {mock_peak:.1} MiB"
    ));

    // Still alive and answering.
    assert!(mock.child.try_wait().unwrap().is_none(), "the mock died");
    assert!(proxy.child.try_wait().unwrap().is_none(), "the proxy died");
    let h = request("GET", "/health", "application/json", 0);
    assert_eq!(raw(&proxy.addr, h, b"", false).await, Some(200));
    let recorded = std::fs::read_to_string(Path::new(&record).join("wire.jsonl")).unwrap();
    assert_eq!(
        recorded.lines().count(),
        ROUNDS * CONCURRENT + 1,
        "every request recorded"
    );
    println!("{}", report.join("\n"));
}
