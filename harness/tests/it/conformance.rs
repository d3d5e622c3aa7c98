//! Conformance with the real Python side: frames written the way `arctic_platform.wire`
//! writes them (every dtype, 0-d tensors, tensors in `meta`, tuples, nested lists, non-finite
//! floats, the empty placeholder) must decode in rlharness and re-encode byte for byte, frames
//! rlharness writes must decode in Python, and one verl step scripted in Python (the adapter's
//! route order, `meta` and payloads) must go through `rlharness serve mock`, directly and
//! through `rlharness proxy`.
//!
//! The scripts live in `tests/conformance/` and need Python 3 with `safetensors` and `numpy`
//! (test dependencies only): `bash ci/python-deps.sh` installs them into `.pydeps/` at the
//! repository root, which these tests put on `PYTHONPATH`.

use crate::common::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use rlharness_arctic::wire::{decode, encode};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(name)
}

/// `python3` with the project-local test dependencies on its path; fails (never skips) when
/// they are missing, naming the command that installs them.
fn python() -> Command {
    let mut path = vec![repo().join(".pydeps")];
    if let Some(p) = std::env::var_os("PYTHONPATH") {
        path.extend(std::env::split_paths(&p));
    }
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", std::env::join_paths(path).unwrap());
    c
}

fn require_python_deps() {
    let ok = python()
        .args(["-c", "import safetensors, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python3 with safetensors and numpy is needed: run `bash ci/python-deps.sh` (installs them into .pydeps/)"
    );
}

#[track_caller]
fn run_ok(c: &mut Command) {
    let out = c.output().expect("python3 runs");
    assert!(
        out.status.success(),
        "{:?} failed: {}\n{}",
        c,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn python_frames(dir: &Path) -> Vec<(String, Vec<u8>)> {
    run_ok(python().arg(script("frames.py")).arg("write").arg(dir));
    let mut frames: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "dssst1"))
        .map(|p| {
            (
                p.file_stem().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    frames.sort();
    frames
}

#[test]
fn python_frames_decode_and_reencode_byte_for_byte() {
    require_python_deps();
    let dir = tempfile::tempdir().unwrap();
    let frames = python_frames(dir.path());
    for want in [
        "dtype_i8",
        "dtype_f8_e4m3",
        "dtype_c64",
        "scalars",
        "tensors_in_meta",
        "tuples",
        "nested_lists",
        "non_finite",
        "empty_placeholder",
    ] {
        assert!(frames.iter().any(|(n, _)| n == want), "no {want} case");
    }
    for (name, bytes) in &frames {
        let root = decode(Bytes::from(bytes.clone()))
            .unwrap_or_else(|e| panic!("{name}: rlharness cannot decode Python's frame: {e}"));
        let ours = encode(&root).unwrap_or_else(|e| panic!("{name}: {e}"));
        if &ours != bytes {
            let at = ours
                .iter()
                .zip(bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(ours.len().min(bytes.len()));
            panic!(
                "{name}: re-encoded bytes differ from Python's at byte {at}:\n ours: {}\n python: {}",
                String::from_utf8_lossy(&ours[at.saturating_sub(40)..(at + 80).min(ours.len())]),
                String::from_utf8_lossy(&bytes[at.saturating_sub(40)..(at + 80).min(bytes.len())])
            );
        }
    }
}

#[test]
fn frames_rlharness_writes_decode_in_python() {
    require_python_deps();
    let src = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    for (name, bytes) in python_frames(src.path()) {
        let root = decode(Bytes::from(bytes)).unwrap();
        let path = out.path().join(format!("{name}.dssst1"));
        std::fs::write(&path, encode(&root).unwrap()).unwrap();
        // Python decodes our frame to the case's tree and writes back the same bytes.
        run_ok(python().arg(script("frames.py")).arg("check").arg(&path));
    }
}

/// A child process killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Killed {
    Killed(
        Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rlharness starts"),
    )
}

#[test]
fn a_verl_step_in_python_runs_against_serve_mock_directly_and_through_the_proxy() {
    require_python_deps();
    let port = free_port().to_string();
    let _server = spawn(&["serve", "mock", "--port", &port]);
    let server = format!("http://127.0.0.1:{port}");

    let ckpt = tempfile::tempdir().unwrap();
    run_ok(
        python()
            .arg(script("session.py"))
            .arg(&server)
            .arg(ckpt.path()),
    );

    // The same session through the recording proxy: the server answers as before (the
    // proxy passes bytes unchanged) and the record describes what the adapter sent.
    let record = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let _proxy = spawn(&[
        "proxy",
        "--upstream",
        &server,
        "--listen",
        &listen,
        "--record",
        &record.path().to_string_lossy(),
    ]);
    run_ok(
        python()
            .arg(script("session.py"))
            .arg(format!("http://{listen}"))
            .arg(ckpt.path()),
    );
    let wire = std::fs::read_to_string(record.path().join("wire.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = wire
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fb = lines
        .iter()
        .find(|l| {
            l["route"]
                .as_str()
                .is_some_and(|r| r.starts_with("/forward-backward"))
        })
        .expect("a /forward-backward line");
    assert!(fb["request"].get("dssst1_error").is_none(), "{fb}");
    let meta = &fb["request"]["dssst1"]["meta"];
    assert_eq!(
        meta["batch_num_tokens"],
        serde_json::json!({"dtype": "I64", "shape": []})
    );
    assert_eq!(meta["rollout_is_weights"], serde_json::Value::Null);
    assert!(lines.iter().all(|l| l["status"] == 200), "{wire}");
    let configs: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(record.path().join("server_config.json")).unwrap(),
    )
    .unwrap();
    assert!(configs["sampling"].get("ds_config").is_none(), "{configs}");
    assert_eq!(configs["training"]["cuda_ipc"], false);
}
