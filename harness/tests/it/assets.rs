//! `rlharness assets verl` as a user runs it: the files it writes, what they say, and the exit
//! status of bad input.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{repo, says, text};

fn assets(args: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .current_dir(repo())
        .args(["assets", "verl", "--out"])
        .arg(out)
        .args(args)
        .output()
        .unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn verl_assets_follow_the_flagship() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("verl");
    let o = assets(&["--rows", "40", "--val-rows", "8"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let config = json(&out.join("model/config.json"));
    assert_eq!(config["model_type"], "qwen3");
    assert_eq!(config["vocab_size"], 23);
    assert_eq!(config["hidden_size"], 64);
    assert_eq!(config["num_key_value_heads"], 2);
    let tok = json(&out.join("model/tokenizer.json"));
    assert_eq!(tok["model"]["vocab"]["Q"], 21);
    assert_eq!(tok["model"]["vocab"]["\n"], 18);
    let tc = json(&out.join("model/tokenizer_config.json"));
    assert_eq!(tc["eos_token"], "<eos>");
    for f in ["special_tokens_map.json", "generation_config.json"] {
        assert!(out.join("model").join(f).is_file(), "{f}");
    }

    let train = lines(&out.join("data/train.jsonl"));
    assert_eq!(train.len(), 40);
    assert_eq!(lines(&out.join("data/val.jsonl")).len(), 8);
    // The flagship's task: a+b with operands up to 4.
    for r in &train {
        let q = r["prompt"][0]["content"].as_str().unwrap();
        let body = q
            .strip_prefix("Q:")
            .unwrap()
            .strip_suffix("=?\nA:")
            .unwrap();
        let (a, b) = body.split_once('+').unwrap();
        let (a, b): (i64, i64) = (a.parse().unwrap(), b.parse().unwrap());
        assert!((0..=4).contains(&a) && (0..=4).contains(&b), "{q}");
        assert_eq!(r["reward_model"]["ground_truth"], (a + b).to_string());
    }

    // The same seed gives the same bytes (--force: the folder is not empty now).
    let before = std::fs::read(out.join("data/train.jsonl")).unwrap();
    let o = assets(&["--rows", "40", "--val-rows", "8", "--force"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read(out.join("data/train.jsonl")).unwrap(), before);
}

#[test]
fn verl_assets_refuse_bad_input_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("verl");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let o = assets(&[], &out);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(&text(&o), &["verl", "is not empty", "--force"]);

    let fresh = dir.path().join("fresh");
    let o = assets(&["--rows", "0"], &fresh);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(&text(&o), &["--rows must be at least 1"]);

    let o = assets(
        &["--scenario", "scenarios/smoke/mock-gsm8k-grpo.yaml"],
        &fresh,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(&text(&o), &["mock-gsm8k-grpo.yaml", "torch", "mock"]);

    let below_a_file = out.join("keep.txt").join("x");
    let o = assets(&[], &below_a_file);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    says(&text(&o), &["keep.txt/x"]);
    assert!(!fresh.exists());
}
