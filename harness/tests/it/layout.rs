//! The torch backend's layout (issue #21) end to end on the CPU: `rlharness run` passes
//! `remote_backend.colocate` to the `rlharness-torch` child, which records in the run
//! directory (`backend_layout.json`) each job's device and each weight sync's bytes and
//! seconds; `server_flags.json` records the flag as the server launch would carry it. And the
//! two-GPU scenario of that layout, listed and skipped here.

use crate::common::repo;

#[cfg(feature = "torch")]
use crate::common::rlharness_run;
#[cfg(feature = "torch")]
use std::path::Path;

use serde_json::Value;

/// The two-H200 split-layout scenario validates, asks for 2 GPUs, and (without them) is listed
/// as not runnable here, with the reason.
#[test]
fn the_two_gpu_split_scenario_validates_and_is_skipped_without_two_gpus() {
    let path = repo().join("scenarios/gpu/qwen3-0.6b-shape-grpo-2xh200.yaml");
    let outcome = rlharness::app::check(std::slice::from_ref(&path));
    assert!(
        outcome.is_ok(),
        "{}",
        rlharness::scenario::check::render_check(&outcome)
    );
    let scenario = rlharness::scenario::load_scenario(&path, &[]).unwrap();
    assert_eq!(scenario.requires.gpus, 2);
    let cfg = scenario.config.to_json();
    let rb = &cfg["remote_backend"];
    assert_eq!(
        (&rb["colocate"], &rb["training_gpus"], &rb["sampling_gpus"]),
        (&Value::from(false), &Value::from(1), &Value::from(1))
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("NO GOLDEN YET"),
        "the header says the golden is to come"
    );
    let listed = rlharness::app::list(&repo().join("scenarios"));
    let e = listed
        .iter()
        .find(|e| e.path.ends_with("qwen3-0.6b-shape-grpo-2xh200.yaml"))
        .expect("listed");
    assert!(e.requires.contains("2 GPUs"), "{}", e.requires);
    let two_gpus = rlharness::scenario::Requires {
        gpus: 2,
        ..Default::default()
    }
    .unmet()
    .is_empty();
    if !two_gpus {
        let reasons = e.runnable.clone().unwrap_err();
        assert!(
            reasons.iter().any(|r| r.contains("needs 2 GPUs")),
            "{reasons:?}"
        );
    }
}

/// Two steps of the CPU flagship into `out` with `sets` overrides; the run directory.
#[cfg(feature = "torch")]
fn run_flagship(out: &Path, sets: &[&str]) -> std::path::PathBuf {
    let mut cmd = rlharness_run(&["scenarios/tiny-gsm8k-grpo.yaml", "--steps", "2"], out);
    cmd.env_remove("RLHARNESS_TORCH_BIN");
    for s in sets {
        cmd.args(["--set", s]);
    }
    let o = cmd.output().unwrap();
    // Two steps judged against a 20-step golden may fail their checks (1), never the run (3).
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::canonicalize(out.join("tiny-gsm8k-grpo/latest")).unwrap()
}

#[cfg(feature = "torch")]
fn json_file(dir: &Path, name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
}

#[cfg(feature = "torch")]
#[test]
fn the_torch_backend_records_its_layout_split_and_colocated() {
    let tmp = tempfile::tempdir().unwrap();
    let split = run_flagship(
        &tmp.path().join("split"),
        &["config.remote_backend.colocate=false"],
    );
    let colocated = run_flagship(&tmp.path().join("colocated"), &[]);

    let s = json_file(&split, "backend_layout.json");
    assert_eq!(s["colocate"], false, "{s}");
    assert_eq!(s["devices"]["training"], "cpu");
    assert_eq!(s["devices"]["sampling"], "cpu");
    assert_eq!(s["rules"]["sync"], "device_to_device", "{s}");
    assert_eq!(s["rules"]["sampler_sleep_frees"], serde_json::json!([]));
    let types: Vec<&str> = s["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_type"].as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"training") && types.contains(&"sampling"),
        "{s}"
    );
    assert!(s["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["device"] == "cpu"));
    let syncs = s["weight_syncs"].as_array().unwrap();
    assert!(!syncs.is_empty(), "{s}");
    for sync in syncs {
        assert!(sync["bytes"].as_u64().unwrap() > 0, "{sync}");
        assert!(sync["seconds"].as_f64().unwrap() > 0.0, "{sync}");
        assert_eq!(sync["from"], "cpu");
    }
    // Split, nothing sleeps to make room for the other side: whatever sleeps frees nothing.
    let sleeps = s["sleeps"].as_array().unwrap();
    assert!(
        sleeps.iter().all(|e| e["frees"] == serde_json::json!([])),
        "{s}"
    );
    let flags = json_file(&split, "server_flags.json");
    assert_eq!(flags["flags"]["colocate"], false, "{flags}");
    assert!(!flags["argv"]
        .as_array()
        .unwrap()
        .contains(&"--colocate".into()));

    let c = json_file(&colocated, "backend_layout.json");
    assert_eq!(c["colocate"], true, "{c}");
    assert_eq!(c["rules"]["sync"], "same_device", "{c}");
    assert_eq!(
        c["rules"]["sampler_sleep_frees"],
        serde_json::json!(["weights", "kv_cache"])
    );
    let syncs = c["weight_syncs"].as_array().unwrap();
    assert!(!syncs.is_empty(), "{c}");
    // The same model either way: the same bytes a sync.
    assert_eq!(syncs[0]["bytes"], s["weight_syncs"][0]["bytes"]);
    // Colocated, the sampler sleeps around each rollout and its sleep frees its weights and
    // KV cache.
    let sampler_sleeps: Vec<&Value> = c["sleeps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["job_type"] == "sampling" && e["asleep"] == true)
        .collect();
    assert!(sampler_sleeps.len() >= 2, "one a step: {c}");
    for e in sampler_sleeps {
        assert_eq!(
            e["frees"],
            serde_json::json!(["weights", "kv_cache"]),
            "{e}"
        );
    }
    let flags = json_file(&colocated, "server_flags.json");
    assert_eq!(flags["flags"]["colocate"], true, "{flags}");
    assert!(flags["argv"]
        .as_array()
        .unwrap()
        .contains(&"--colocate".into()));
}
