//! DSSST1 encode/decode throughput on a forward-backward-sized frame (~256 MB), against a plain
//! memcpy of the same bytes and against Python's `safetensors` doing the same frame.
//!
//! `cargo bench --bench dssst1` (env `DSSST1_BENCH_RUNS`, default 7; `DSSST1_BENCH_MB`, default
//! 256). Python runs only if `python3 -c "import safetensors, numpy"` works.

use std::hint::black_box;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use bytes::Bytes;
use rlharness_arctic::wire::{self, DType, Node, Tensor};
use serde_json::json;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    let _ = black_box(f()); // warm-up: page faults of first use
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                let out = f();
                let s = t.elapsed().as_secs_f64();
                drop(black_box(out));
                s
            })
            .collect(),
    )
}

fn filled(dtype: DType, shape: Vec<usize>, seed: u8) -> Tensor {
    let n: usize = shape.iter().product::<usize>() * dtype.size();
    let data: Vec<u8> = (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    Tensor {
        dtype,
        shape,
        data: Bytes::from(data),
    }
}

/// verl's update batch: i64 [B,S] ids/mask/positions, i64 [B,P] prompts, bf16 [B,S] per-token
/// terms. B=1024, S=8192 gives ~260 MB.
/// (name, safetensors dtype, shape) of one batch tensor.
type Spec = (&'static str, &'static str, Vec<usize>);

fn frame(mb: usize) -> (Node, Vec<Spec>) {
    let (b, p) = (1024usize, 1024usize);
    // Each row of [B,S] costs 3*8 + 3*2 bytes per column.
    let s = ((mb << 20) / (b * 30)).max(p + 1);
    let specs: Vec<Spec> = vec![
        ("input_ids", "I64", vec![b, s]),
        ("attention_mask", "I64", vec![b, s]),
        ("position_ids", "I64", vec![b, s]),
        ("prompts", "I64", vec![b, p]),
        ("old_log_probs", "BF16", vec![b, s]),
        ("advantages", "BF16", vec![b, s]),
        ("response_mask", "BF16", vec![b, s]),
    ];
    let batch = Node::dict(specs.iter().enumerate().map(|(i, (k, dt, shape))| {
        let dtype = if *dt == "I64" {
            DType::I64
        } else {
            DType::BF16
        };
        (*k, Node::from(filled(dtype, shape.clone(), i as u8)))
    }));
    let root = Node::dict([
        ("batch", batch),
        (
            "meta",
            Node::json(
                json!({"temperature": 1.0, "micro_batch_size": 4, "clip_ratio": 0.2, "drop_position_ids": false}),
            ),
        ),
        (
            "processing",
            Node::json(
                json!({"post": ["apply_temperature", "compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"}),
            ),
        ),
    ]);
    (root, specs)
}

const PY: &str = r#"
import json, sys, time
import numpy as np
from safetensors.numpy import save, load
spec = json.loads(sys.stdin.read())
runs = spec["runs"]
np_dtype = {"I64": "<i8", "BF16": "<u2"}  # numpy has no bfloat16: same bytes, same work
tensors = {}
for i, (k, dt, shape) in enumerate(spec["tensors"]):
    n = int(np.prod(shape)) * (8 if dt == "I64" else 2)
    raw = ((np.arange(n, dtype=np.uint64) * 31 + i) & 0xFF).astype(np.uint8)
    tensors["batch." + k] = raw.view(np_dtype[dt]).reshape(shape)
tree = ["d", [["batch", ["d", [[k, ["t", "batch." + k]] for k, _, _ in spec["tensors"]]]],
              ["meta", ["j", spec["meta"]]], ["processing", ["j", spec["processing"]]]]]
def encode():
    return save(tensors, metadata={"dss": json.dumps({"v": "DSSST1", "tree": tree})})
def decode(b):
    out = load(b)
    return out
def med(f):
    f()
    ts = []
    for _ in range(runs):
        t = time.perf_counter(); r = f(); ts.append(time.perf_counter() - t); del r
    ts.sort(); return ts[len(ts) // 2]
blob = encode()
enc = med(encode)
dec = med(lambda: decode(blob))
print(json.dumps({"encode_s": enc, "decode_s": dec, "bytes": len(blob)}))
"#;

fn python(runs: usize, root: &Node, specs: &[Spec]) -> Result<(f64, f64, usize), String> {
    let ok = Command::new("python3")
        .args(["-c", "import safetensors, numpy"])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Err("python3 with safetensors and numpy not found".into());
    }
    let input = json!({
        "runs": runs,
        "tensors": specs,
        "meta": root.get_json("meta"),
        "processing": root.get_json("processing"),
    });
    let mut child = Command::new("python3")
        .args(["-c", PY])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start python3: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(input.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("python3 failed with {}", out.status));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok((
        v["encode_s"].as_f64().ok_or("no encode_s")?,
        v["decode_s"].as_f64().ok_or("no decode_s")?,
        v["bytes"].as_u64().ok_or("no bytes")? as usize,
    ))
}

fn main() {
    let runs: usize = std::env::var("DSSST1_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let mb: usize = std::env::var("DSSST1_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let (root, specs) = frame(mb);
    let encoded = Bytes::from(wire::encode(&root).expect("bench frame encodes"));
    let size = encoded.len();
    let gb = size as f64 / 1e9;
    println!(
        "DSSST1 frame: {:.1} MB, {} tensors, median of {runs} runs",
        size as f64 / 1e6,
        specs.len()
    );

    let enc = time(runs, || wire::encode(&root).expect("encode"));
    let dec = time(runs, || wire::decode(encoded.clone()).expect("decode"));
    // Decoding is zero copy; what a consumer pays to touch the data is one pass over it.
    let dec_touch = time(runs, || {
        let n = wire::decode(encoded.clone()).expect("decode");
        let mut out = Vec::new();
        if let Some(Node::Dict(b)) = n.get("batch") {
            for (_, t) in b {
                if let Some(t) = t.as_tensor() {
                    out.push(t.data.to_vec());
                }
            }
        }
        out
    });
    let memcpy = time(runs, || {
        let mut v = Vec::<u8>::with_capacity(size);
        v.extend_from_slice(&encoded);
        v
    });

    let row = |name: &str, s: f64, py: Option<f64>| {
        let vs_py = py
            .map(|p| format!("{:>8.2}x", p / s))
            .unwrap_or_else(|| "       -".into());
        println!(
            "{name:<28} {:>9.2} ms {:>8.2} GB/s   ours/memcpy {:>5.2}x   ours/python {vs_py}",
            s * 1e3,
            gb / s,
            memcpy / s
        );
    };
    let py = python(runs, &root, &specs);
    let (py_enc, py_dec) = match &py {
        Ok((e, d, bytes)) => {
            println!(
                "python safetensors.numpy frame: {:.1} MB (same tensors and metadata)",
                *bytes as f64 / 1e6
            );
            (Some(*e), Some(*d))
        }
        Err(why) => {
            println!("python comparison skipped: {why}");
            (None, None)
        }
    };
    println!(
        "{:<28} {:>12} {:>13}   (ratios are speed: >1 means ours is faster)",
        "", "median", "throughput"
    );
    row("memcpy (alloc + copy)", memcpy, None);
    row("encode", enc, py_enc);
    row("decode (zero copy)", dec, py_dec);
    row("decode + copy tensors out", dec_touch, py_dec);
    if let (Some(e), Some(d)) = (py_enc, py_dec) {
        println!(
            "python: encode {:.2} ms ({:.2} GB/s), decode {:.2} ms ({:.2} GB/s)",
            e * 1e3,
            gb / e,
            d * 1e3,
            gb / d
        );
    }
    println!(
        "targets: encode >= 2x python {}, decode >= 2x python {}, encode >= 0.5x memcpy {}, decode >= 0.5x memcpy {}",
        py_enc.map(|p| if p / enc >= 2.0 { "MET" } else { "MISSED" }).unwrap_or("n/a"),
        py_dec.map(|p| if p / dec >= 2.0 { "MET" } else { "MISSED" }).unwrap_or("n/a"),
        if memcpy / enc >= 0.5 { "MET" } else { "MISSED" },
        if memcpy / dec >= 0.5 { "MET" } else { "MISSED" },
    );
}
