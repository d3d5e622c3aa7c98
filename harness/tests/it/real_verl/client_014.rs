//! The released Arctic-Platform 0.1.4 client, unmodified, against rlharness: its own
//! `ArcticClientConfig` and `AsyncArcticRLClient` over its HTTP transport run one training
//! step (`harness/tests/conformance/client_014.py`: job creation, a refused conflicting
//! sequence-parallel JobConfig, weight sync, generate, forward, forward-backward with
//! `return_fwd_batch` and with 0.1.4's GRPO names, a `force_chunk` envelope, step, save,
//! sleep/wake, shutdown) against `rlharness serve mock`, `rlharness serve torch`, and
//! `rlharness proxy` in front of the mock, whose record must show every call answered.
//!
//! The 0.1.4 package comes from `ARCTIC_RELEASED_SRC` (a folder holding `arctic_platform/` and
//! its `[verl]` extra, made by `pip install --target`), which `bash ci/verl-tests.sh` sets; the
//! Python is verl's (`VERL_PYTHON`, default the project's `.venv-verl/bin/python`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, repo, text};

/// A child process killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str], dir: &std::path::Path) -> Killed {
    Killed(
        Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rlharness starts"),
    )
}

/// Wait until `GET /health` at `addr` answers 200 (the client posts `/initialize` at once).
fn wait_healthy(addr: &str, server: &mut Killed, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return;
            }
        }
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("the server at {addr} exited before answering /health: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "{addr} did not answer /health within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The 0.1.4 package's folder; a clear failure when it is not set.
fn released_src() -> PathBuf {
    let src = std::env::var("ARCTIC_RELEASED_SRC")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "ARCTIC_RELEASED_SRC is not set: it names the folder holding the released arctic_platform 0.1.4 (pip install --target); the real-verl tests run through `bash ci/verl-tests.sh`"
            )
        });
    let src = PathBuf::from(src);
    assert!(
        src.join("arctic_platform/client/__init__.py").is_file(),
        "ARCTIC_RELEASED_SRC={} holds no arctic_platform/client: install the 0.1.4 wheel there with pip install --target (bash ci/verl-tests.sh does)",
        src.display()
    );
    src
}

/// Run the client script against `base`; its output, asserting it exited 0.
#[track_caller]
fn run_client(base: &str, label: &str) -> String {
    let python = std::env::var("VERL_PYTHON")
        .unwrap_or_else(|_| repo().join(".venv-verl/bin/python").display().to_string());
    let mut path = vec![released_src()];
    if let Some(p) = std::env::var_os("PYTHONPATH") {
        path.extend(std::env::split_paths(&p));
    }
    let ckpt = tempfile::tempdir().unwrap();
    let o = Command::new(&python)
        .arg(repo().join("harness/tests/conformance/client_014.py"))
        .arg(base)
        .arg(ckpt.path())
        .env("PYTHONPATH", std::env::join_paths(path).unwrap())
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap_or_else(|e| panic!("{python} does not run: {e}"));
    let out = text(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the 0.1.4 client against {label}:\n{out}"
    );
    assert!(out.contains("client_014: shut down"), "{label}: {out}");
    out
}

#[test]
#[ignore = "needs real verl: bash ci/verl-tests.sh"]
fn the_released_client_runs_a_session_against_mock_torch_and_the_proxy() {
    let work = tempfile::tempdir().unwrap();

    // The mock, directly.
    let port = free_port().to_string();
    let mut mock = spawn(&["serve", "mock", "--port", &port], work.path());
    let mock_addr = format!("127.0.0.1:{port}");
    wait_healthy(&mock_addr, &mut mock, Duration::from_secs(60));
    run_client(&format!("http://{mock_addr}"), "serve mock");

    // The recording proxy in front of the mock: every call reached the server and, but the
    // one refused on purpose, was answered 200.
    let record = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut proxy = spawn(
        &[
            "proxy",
            "--upstream",
            &format!("http://{mock_addr}"),
            "--listen",
            &listen,
            "--record",
            &record.path().to_string_lossy(),
        ],
        work.path(),
    );
    wait_healthy(&listen, &mut proxy, Duration::from_secs(60));
    run_client(&format!("http://{listen}"), "rlharness proxy");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(record.path().join("wire.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let route = |l: &serde_json::Value| {
        let r = l["route"].as_str().unwrap_or_default();
        r.split('?').next().unwrap_or_default().to_string()
    };
    let refused: Vec<String> = lines
        .iter()
        .filter(|l| l["status"] != 200)
        .map(|l| format!("{} {}", route(l), l["status"]))
        .collect();
    assert_eq!(refused, ["/initialize 422"], "answers other than 200");
    for want in [
        "/initialize",
        "/job",
        "/sleep-inference",
        "/wake-inference",
        "/operation",
        "/generate",
        "/forward",
        "/forward-backward",
        "/step",
        "/save",
        "/sleep-training",
        "/wake-training",
        "/destroy",
    ] {
        assert!(
            lines.iter().any(|l| route(l).starts_with(want)),
            "the record has no {want} call"
        );
    }
    let fbs = lines
        .iter()
        .filter(|l| route(l) == "/forward-backward")
        .count();
    assert_eq!(
        fbs, 7,
        "forward-backward calls: return_fwd_batch, plain, 4 names, 1 envelope"
    );
    drop(proxy);
    drop(mock);

    // The torch engine (its shipped warm start).
    let port = free_port().to_string();
    let mut torch = spawn(&["serve", "torch", "--port", &port], work.path());
    let torch_addr = format!("127.0.0.1:{port}");
    wait_healthy(&torch_addr, &mut torch, Duration::from_secs(300));
    run_client(&format!("http://{torch_addr}"), "serve torch");
}
