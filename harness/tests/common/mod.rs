//! Helpers the end-to-end tests share: where the repository is, the run options of a test
//! run (the project's goldens, never written; the run directory at `OUT/run`), and reading a
//! run's `wire.jsonl`. Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rlharness::runner::RunOptions;
use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Options of a test run into `out/run`, with `--set` overrides.
pub fn opts(out: &Path, set: &[&str]) -> RunOptions {
    RunOptions {
        out: out.to_path_buf(),
        golden: repo().join("golden"),
        seed: None,
        steps: None,
        set: set.iter().map(|s| s.to_string()).collect(),
        update_golden: false,
        hardware: None,
        progress: false,
        // Tests never write goldens.
        ci: true,
        run_dir: Some(out.join("run")),
    }
}

/// Every record of a run's `wire.jsonl`.
pub fn wire(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("wire.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
