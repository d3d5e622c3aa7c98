//! `rlharness assets verl`: the files a real verl needs to train against the torch engine, made
//! from the definitions the engine itself uses, so they cannot drift from it:
//!
//! - `model/config.json`: the engine's decoder ([`DecoderConfig`], resolved from the scenario's
//!   `backend.model` block) as a HuggingFace Qwen3 config;
//! - `model/tokenizer.json` and friends: a `tokenizers` WordLevel model whose vocabulary is
//!   [`CharTokenizer`]'s (every id read back from its encoder), one token a character;
//! - `data/train.jsonl`, `data/val.jsonl`: GSM8K-shaped rows of the scenario's arith task, drawn
//!   by the task's own generator. JSON Lines because verl's loader reads `.jsonl` as it reads
//!   parquet (`datasets.load_dataset("json", ...)`) and it needs no parquet writer here.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use rlharness_arctic::fsx::FsError;
use rlharness_arctic::task::{ArithTask, CharTokenizer, Problem, ALPHABET, EOS_ID, PAD_ID};
use rlharness_arctic::torch_spec::decoder::DecoderConfig;

/// The text forms of the two special ids (the harness's tokenizer has none: it never prints
/// them).
pub(crate) const PAD_TOKEN: &str = "<pad>";
pub(crate) const EOS_TOKEN: &str = "<eos>";
/// A chat template that adds nothing: the prompt verl renders is the task's prompt, byte for
/// byte, as the builtin driver sends it.
pub(crate) const CHAT_TEMPLATE: &str = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
/// verl's reward router sends this data source to its GSM8K scorer (`#### N`, strict mode).
pub(crate) const DATA_SOURCE: &str = "openai/gsm8k";

/// Why the assets were not written.
#[derive(Debug, thiserror::Error)]
pub enum AssetsError {
    #[error("{0} is not empty (pass --force to write into it anyway)")]
    NotEmpty(PathBuf),
    #[error("{0} exists and is not a directory")]
    NotADirectory(PathBuf),
    #[error("--{0} must be at least 1")]
    NoRows(&'static str),
    #[error(transparent)]
    Fs(#[from] FsError),
}

/// How many rows of each split, and the seed they are drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPlan {
    pub rows: usize,
    pub val_rows: usize,
    pub seed: u64,
}

/// One file to write: its path below the output folder and its bytes.
pub type AssetFile = (&'static str, Vec<u8>);

/// Every file of the verl assets, in the order they are written.
pub(crate) fn verl_files(
    model: &DecoderConfig,
    task: &ArithTask,
    plan: DataPlan,
) -> Result<Vec<AssetFile>, AssetsError> {
    if plan.rows == 0 {
        return Err(AssetsError::NoRows("rows"));
    }
    if plan.val_rows == 0 {
        return Err(AssetsError::NoRows("val-rows"));
    }
    let (train, val) = problems(task, plan);
    Ok(vec![
        ("data/train.jsonl", jsonl(&train, "train")),
        ("data/val.jsonl", jsonl(&val, "val")),
        ("model/config.json", pretty(&hf_config(model))),
        ("model/tokenizer.json", pretty(&tokenizer_json())),
        (
            "model/tokenizer_config.json",
            pretty(&tokenizer_config(model)),
        ),
        (
            "model/special_tokens_map.json",
            pretty(&special_tokens_map()),
        ),
        ("model/generation_config.json", pretty(&generation_config())),
    ])
}

/// Write `files` below `out`, each atomically (a temp file, then a rename). An `out` that
/// holds anything is refused unless `force`.
pub(crate) fn write_files(out: &Path, files: &[AssetFile], force: bool) -> Result<(), AssetsError> {
    if out.exists() && !out.is_dir() {
        return Err(AssetsError::NotADirectory(out.to_path_buf()));
    }
    if out.is_dir() && !force {
        let mut entries = std::fs::read_dir(out).map_err(|source| FsError {
            action: "read directory",
            path: out.to_path_buf(),
            source,
        })?;
        if entries.next().is_some() {
            return Err(AssetsError::NotEmpty(out.to_path_buf()));
        }
    }
    for (rel, bytes) in files {
        rlharness_arctic::fsx::write_atomic(&out.join(rel), bytes)?;
    }
    Ok(())
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(v).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The engine's decoder as a HuggingFace Qwen3 `config.json`. The architecture is Qwen3's
/// (per-head q/k RMSNorm, SwiGLU, no attention bias, rotary positions); the sizes are `c`'s.
pub(crate) fn hf_config(c: &DecoderConfig) -> Value {
    json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "intermediate_size": c.intermediate,
        "max_position_embeddings": c.max_positions,
        "rope_theta": c.rope_theta,
        "rope_scaling": null,
        "rms_norm_eps": c.rms_eps,
        "hidden_act": "silu",
        "attention_bias": false,
        "use_sliding_window": false,
        "tie_word_embeddings": DecoderConfig::TIED_EMBEDDINGS,
        // No beginning-of-sequence token: as Qwen3's config does, it names end-of-sequence.
        "bos_token_id": EOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "torch_dtype": "float32",
    })
}

/// Every token and its id: padding, end-of-sequence, then each character of the task's
/// alphabet with the id the harness's tokenizer encodes it to.
pub(crate) fn vocab() -> Vec<(String, i64)> {
    let mut out = vec![
        (PAD_TOKEN.to_string(), PAD_ID),
        (EOS_TOKEN.to_string(), EOS_ID),
    ];
    for c in ALPHABET.chars() {
        let text = c.to_string();
        let ids = CharTokenizer::encode(&text).unwrap_or_default();
        out.extend(ids.first().map(|&id| (text, id)));
    }
    out
}

/// A special token as `tokenizer_config.json`'s `added_tokens_decoder` lists it (by id).
fn special_token(content: &str) -> Value {
    json!({
        "content": content, "single_word": false, "lstrip": false, "rstrip": false,
        "normalized": false, "special": true,
    })
}

/// A special token as `tokenizer.json`'s `added_tokens` lists it: the same, with its id.
fn special(id: i64, content: &str) -> Value {
    let mut t = special_token(content);
    t["id"] = json!(id);
    t
}

/// The `tokenizers` JSON: a WordLevel model over [`vocab`] behind a pre-tokenizer that splits
/// every character off on its own (`[\s\S]`, isolated: newlines and spaces too), and a `Fuse`
/// decoder that joins them back without spaces. There is no unknown token, as the harness
/// has none: a character outside the alphabet is an error, not a silent id.
pub(crate) fn tokenizer_json() -> Value {
    let vocab: serde_json::Map<String, Value> =
        vocab().into_iter().map(|(t, id)| (t, json!(id))).collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(PAD_ID, PAD_TOKEN), special(EOS_ID, EOS_TOKEN)],
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Split",
            "pattern": {"Regex": "[\\s\\S]"},
            "behavior": "Isolated",
            "invert": false,
        },
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    })
}

/// `tokenizer_config.json`: a fast tokenizer with the two special tokens and a chat template
/// that only concatenates the messages' contents.
pub(crate) fn tokenizer_config(c: &DecoderConfig) -> Value {
    json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            PAD_ID.to_string(): special_token(PAD_TOKEN),
            EOS_ID.to_string(): special_token(EOS_TOKEN),
        },
        "pad_token": PAD_TOKEN,
        "eos_token": EOS_TOKEN,
        "bos_token": null,
        "unk_token": null,
        "model_max_length": c.max_positions,
        "clean_up_tokenization_spaces": false,
        "chat_template": CHAT_TEMPLATE,
    })
}

pub fn special_tokens_map() -> Value {
    json!({"pad_token": PAD_TOKEN, "eos_token": EOS_TOKEN})
}

pub fn generation_config() -> Value {
    json!({"bos_token_id": EOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID})
}

/// The train and validation problems: `plan.rows` and `plan.val_rows` draws of `task`'s own
/// generator, from two streams of `plan.seed`. A split repeats no problem before it has used
/// every problem the task has; validation shares none with training when the task has
/// problems enough for both.
pub fn problems(task: &ArithTask, plan: DataPlan) -> (Vec<Problem>, Vec<Problem>) {
    let space = task.distinct_problems();
    let mut train = Draws::new(task, plan.seed, 0, HashSet::new());
    let rows: Vec<Problem> = (0..plan.rows).map(|_| train.next()).collect();
    let disjoint = (plan.rows as u64).saturating_add(plan.val_rows as u64) <= space;
    let held = if disjoint { train.seen } else { HashSet::new() };
    let mut val = Draws::new(task, plan.seed, 1, held);
    let val_rows = (0..plan.val_rows).map(|_| val.next()).collect();
    (rows, val_rows)
}

/// Draws without repeats until the task's problems are used up, then again.
struct Draws<'a> {
    task: &'a ArithTask,
    rng: ChaCha8Rng,
    seen: HashSet<String>,
    space: u64,
}

impl<'a> Draws<'a> {
    fn new(task: &'a ArithTask, seed: u64, stream: u64, seen: HashSet<String>) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        let space = task.distinct_problems();
        Draws {
            task,
            rng,
            seen,
            space,
        }
    }

    fn next(&mut self) -> Problem {
        if self.seen.len() as u64 >= self.space {
            self.seen.clear();
        }
        // A bound on the rejections, so a miscounted space can never hang the command.
        let patience = self.space.saturating_mul(64).max(1024);
        let mut rejected = 0u64;
        loop {
            let p = self.task.draw(&mut self.rng);
            if self.seen.insert(p.prompt.clone()) || rejected >= patience {
                return p;
            }
            rejected += 1;
        }
    }
}

/// One GSM8K-shaped row, as verl's `gsm8k.py` preprocessing writes them.
pub fn row(p: &Problem, split: &str, index: usize) -> Value {
    json!({
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": p.prompt}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": p.ground_truth()},
        "extra_info": {
            "split": split,
            "index": index,
            "question": p.prompt,
            "answer": p.ideal_response(),
        },
    })
}

fn jsonl(problems: &[Problem], split: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in problems.iter().enumerate() {
        out.extend(row(p, split, i).to_string().into_bytes());
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests;
