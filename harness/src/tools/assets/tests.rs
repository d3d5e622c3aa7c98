use super::*;
use rlharness_arctic::task::ArithConfig;
use rlharness_arctic::torch_spec::ModelSpec;

fn task(max_operand: i64) -> ArithTask {
    ArithTask::new(ArithConfig {
        max_operand,
        ops: vec!['+'],
    })
    .unwrap()
}

fn plan(rows: usize, val_rows: usize, seed: u64) -> DataPlan {
    DataPlan {
        rows,
        val_rows,
        seed,
    }
}

/// What `tokenizers` does with [`tokenizer_json`]: special tokens first, then one piece a
/// character, each looked up in the WordLevel vocabulary.
fn hf_encode(tokenizer: &Value, text: &str) -> Vec<i64> {
    let vocab = &tokenizer["model"]["vocab"];
    let mut ids = Vec::new();
    let mut rest = text;
    'outer: while let Some(c) = rest.chars().next() {
        for t in tokenizer["added_tokens"].as_array().unwrap() {
            let content = t["content"].as_str().unwrap();
            if let Some(r) = rest.strip_prefix(content) {
                ids.push(t["id"].as_i64().unwrap());
                rest = r;
                continue 'outer;
            }
        }
        ids.push(
            vocab[c.to_string()]
                .as_i64()
                .expect("a character of the vocab"),
        );
        rest = &rest[c.len_utf8()..];
    }
    ids
}

#[test]
fn tokenizer_ids_are_the_engine_tokenizers() {
    let tok = tokenizer_json();
    for text in [
        "Q:12+3=?\nA:",
        "Q:4+4=?\nA:#### 8",
        "0123456789+-*= #\n?:QA",
    ] {
        assert_eq!(hf_encode(&tok, text), CharTokenizer::encode(text).unwrap());
    }
    let mut with_eos = CharTokenizer::encode("#### 3").unwrap();
    with_eos.push(EOS_ID);
    assert_eq!(hf_encode(&tok, "#### 3<eos>"), with_eos);
    // Every id from 0 to the vocabulary's size, once.
    let mut ids: Vec<i64> = vocab().iter().map(|(_, id)| *id).collect();
    ids.sort();
    let want: Vec<i64> = (0..CharTokenizer::vocab_size() as i64).collect();
    assert_eq!(ids, want);
    assert_eq!(tok["model"]["vocab"]["<pad>"], json!(PAD_ID));
    assert_eq!(tok["model"]["vocab"]["<eos>"], json!(EOS_ID));
    assert_eq!(tok["decoder"]["type"], "Fuse");
}

#[test]
fn config_numbers_are_the_model_specs() {
    let tiny = DecoderConfig::from_spec(&ModelSpec::default()).unwrap();
    let c = hf_config(&tiny);
    let got = |k: &str| c[k].as_u64().unwrap() as usize;
    assert_eq!(got("vocab_size"), CharTokenizer::vocab_size());
    assert_eq!(
        [
            got("hidden_size"),
            got("num_hidden_layers"),
            got("num_attention_heads"),
            got("num_key_value_heads"),
            got("head_dim"),
            got("intermediate_size"),
            got("max_position_embeddings"),
        ],
        [64, 2, 4, 2, 16, 192, 64]
    );
    assert_eq!(c["model_type"], "qwen3");
    assert_eq!(c["architectures"], json!(["Qwen3ForCausalLM"]));
    assert_eq!(c["rope_theta"].as_f64(), Some(tiny.rope_theta));
    assert_eq!(c["rms_norm_eps"].as_f64(), Some(tiny.rms_eps));
    assert_eq!(c["tie_word_embeddings"], true);
    assert_eq!(
        (c["eos_token_id"].as_i64(), c["pad_token_id"].as_i64()),
        (Some(1), Some(0))
    );
    // A scenario's overrides reach the config.
    let spec = ModelSpec {
        layers: Some(3),
        d_model: Some(32),
        ..ModelSpec::default()
    };
    let c = hf_config(&DecoderConfig::from_spec(&spec).unwrap());
    assert_eq!(
        (c["num_hidden_layers"].as_u64(), c["hidden_size"].as_u64()),
        (Some(3), Some(32))
    );
    assert_eq!(c["head_dim"].as_u64(), Some(8));
}

#[test]
fn rows_are_gsm8k_shaped_and_seeded() {
    let t = task(4);
    let files = verl_files(&DecoderConfig::tiny(), &t, plan(40, 5, 7)).unwrap();
    assert_eq!(
        files,
        verl_files(&DecoderConfig::tiny(), &t, plan(40, 5, 7)).unwrap()
    );
    assert_ne!(
        files,
        verl_files(&DecoderConfig::tiny(), &t, plan(40, 5, 8)).unwrap()
    );
    let train = String::from_utf8(files[0].1.clone()).unwrap();
    let rows: Vec<Value> = train
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 40);
    let r = &rows[3];
    let prompt = r["prompt"][0]["content"].as_str().unwrap();
    let answer = ArithTask::solve(prompt).unwrap();
    assert_eq!(r["data_source"], "openai/gsm8k");
    assert_eq!(r["prompt"][0]["role"], "user");
    assert_eq!(r["reward_model"]["ground_truth"], answer.to_string());
    assert_eq!(r["extra_info"]["answer"], format!("#### {answer}"));
    assert_eq!(r["extra_info"]["index"], 3);
    assert_eq!(r["extra_info"]["split"], "train");
    // 25 problems: every one in the first 25 rows, then again.
    let first: HashSet<&str> = rows[..25]
        .iter()
        .map(|r| r["prompt"][0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(first.len(), 25);
}

#[test]
fn validation_is_held_out_when_the_task_has_room() {
    let (train, val) = problems(&task(9), plan(60, 30, 1));
    let seen: HashSet<&String> = train.iter().map(|p| &p.prompt).collect();
    assert_eq!(seen.len(), 60);
    assert!(val.iter().all(|p| !seen.contains(&p.prompt)));
    // No room (25 problems): both splits draw from all of them.
    let (train, val) = problems(&task(4), plan(20, 20, 1));
    assert_eq!((train.len(), val.len()), (20, 20));
}

#[test]
fn bad_inputs_are_refused_with_the_reason() {
    let t = task(4);
    let err = verl_files(&DecoderConfig::tiny(), &t, plan(0, 5, 1)).unwrap_err();
    assert_eq!(err.to_string(), "--rows must be at least 1");
    let err = verl_files(&DecoderConfig::tiny(), &t, plan(5, 0, 1)).unwrap_err();
    assert_eq!(err.to_string(), "--val-rows must be at least 1");

    let dir = tempfile::tempdir().unwrap();
    let files = verl_files(&DecoderConfig::tiny(), &t, plan(5, 5, 1)).unwrap();
    let out = dir.path().join("assets");
    write_files(&out, &files, false).unwrap();
    assert!(out.join("model/tokenizer.json").is_file());
    let err = write_files(&out, &files, false).unwrap_err().to_string();
    assert!(
        err.contains("is not empty") && err.contains("--force"),
        "{err}"
    );
    write_files(&out, &files, true).unwrap();
    // A file where the folder should be, and a folder below a file: both named.
    let file = out.join("data/train.jsonl");
    let err = write_files(&file, &files, true).unwrap_err().to_string();
    assert!(
        err.contains("train.jsonl") && err.contains("not a directory"),
        "{err}"
    );
    let err = write_files(&file.join("sub"), &files, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("train.jsonl/sub"), "{err}");
}
