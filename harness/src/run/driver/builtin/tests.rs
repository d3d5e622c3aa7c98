//! The rollout's `/generate` answers and the update's reply metrics.

use serde_json::{json, Map, Value};

use super::generate::{canonical_groups, generate_request, parse_generate, GenResult};
use super::step::{accumulate_metrics, mean_of};
use crate::run::driver::client::Reply;
use rlharness_arctic::task::{CharTokenizer, Problem};
use rlharness_arctic::wire::{pyjson, Node};

fn reply(text: &str) -> Reply<GenResult> {
    Reply {
        body: GenResult {
            text: text.to_string(),
            token_ids: CharTokenizer::encode(text).unwrap(),
            logprobs: None,
        },
        seconds: 0.001,
        reported: true,
    }
}

/// A result's `logprobs`: one float per token id, or refused with what is wrong.
#[test]
fn generate_log_probs_are_parsed_and_bad_ones_refused() {
    let parse = |r: Value| {
        parse_generate(&Node::Json(json!({"results": [r]})))
            .map(|mut v| v.remove(0).logprobs)
            .map_err(|e| e.message())
    };
    let ok = json!({"text": "ab", "token_ids": [5, 6], "logprobs": [-0.5, -1.25]});
    assert_eq!(parse(ok), Ok(Some(vec![-0.5, -1.25])));
    assert_eq!(parse(json!({"text": "ab", "token_ids": [5, 6]})), Ok(None));
    for (bad, why) in [
        (
            json!({"text": "ab", "token_ids": [5, 6], "logprobs": [-0.5]}),
            "1 logprobs for 2 token ids",
        ),
        (
            json!({"text": "ab", "token_ids": [5, 6], "logprobs": "x"}),
            "`logprobs` is not a list",
        ),
        (
            json!({"text": "ab", "token_ids": [5, 6], "logprobs": [-0.5, "x"]}),
            "non-numeric entry",
        ),
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.contains(why), "{e}");
    }
}

/// The samples of a prompt come back in whatever order the server answered its `n`
/// identical requests; the groups the training sees are the same whatever that order,
/// also when two problems share a prompt text (their requests are identical too).
#[test]
fn groups_are_canonical_whatever_order_the_server_answers_in() {
    let problems = [
        Problem {
            prompt: "Q:1+2=?\nA:".into(),
            answer: 3,
        },
        Problem {
            prompt: "Q:2+2=?\nA:".into(),
            answer: 4,
        },
        Problem {
            prompt: "Q:1+2=?\nA:".into(),
            answer: 3,
        },
    ];
    let texts = [
        "#### 3", "#### 4", "#### 1", "#### 3", // Q:1+2, first problem
        "#### 5", "#### 4", "#### 2", "#### 9", // Q:2+2
        "#### 7", "#### 3", "#### 0", "#### 8", // Q:1+2 again
    ];
    let flatten = |groups: Vec<Vec<Reply<GenResult>>>| -> Vec<Vec<String>> {
        groups
            .into_iter()
            .map(|g| g.into_iter().map(|r| r.body.text).collect())
            .collect()
    };
    let want = flatten(canonical_groups(
        &problems,
        4,
        texts.iter().map(|t| reply(t)).collect(),
    ));
    assert_eq!(
        want,
        [
            ["#### 0", "#### 1", "#### 3", "#### 3"],
            ["#### 2", "#### 4", "#### 5", "#### 9"],
            ["#### 3", "#### 4", "#### 7", "#### 8"],
        ]
    );
    // Every arrival order that hands a prompt's samples to its requests differently.
    let same_prompt: Vec<usize> = [0, 1, 2, 3, 8, 9, 10, 11].to_vec();
    let other: Vec<usize> = [4, 5, 6, 7].to_vec();
    for shift in 1..8 {
        let mut order: Vec<usize> = (0..12).collect();
        for (k, &slot) in same_prompt.iter().enumerate() {
            order[slot] = same_prompt[(k + shift) % 8];
        }
        for (k, &slot) in other.iter().enumerate() {
            order[slot] = other[(k + shift) % 4];
        }
        let permuted = order.iter().map(|&i| reply(texts[i])).collect();
        assert_eq!(flatten(canonical_groups(&problems, 4, permuted)), want);
    }
}

/// A `/generate` body is the adapter's: the prompt as text, alone; its `sampling_params`
/// with no `n` and no `seed`; `routing_key` an explicit null; `strict` false.
#[test]
fn a_generate_request_is_the_adapters() {
    let params = json!({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 8,
                        "logprobs": null, "repetition_penalty": 1.0});
    let Value::Object(map) = params.clone() else {
        unreachable!()
    };
    let body = generate_request("Q:1+2=?\nA:", &map).to_json().unwrap();
    assert_eq!(
        body,
        json!({"prompts": ["Q:1+2=?\nA:"], "sampling_params": params,
               "routing_key": null, "strict": false})
    );
}

/// A NaN loss from the server (the `NaN` literal in the frame) stays NaN in the summed
/// metrics, never silently dropped or turned into 0.
#[test]
fn a_nan_loss_in_a_reply_stays_nan_in_the_metrics() {
    let reply = rlharness_arctic::wire::decode(bytes::Bytes::from(
        rlharness_arctic::wire::encode(&Node::json(json!({
            "job_id": 2,
            "metrics": {"loss": pyjson::float(f64::NAN), "actor/pg_loss": 0.5},
            "avg_loss": pyjson::float(f64::NAN),
        })))
        .unwrap(),
    ))
    .unwrap();
    let mut acc = Map::new();
    assert!(accumulate_metrics(&mut acc, &reply).is_ok());
    assert!(accumulate_metrics(&mut acc, &reply).is_ok());
    assert!(pyjson::as_f64(&acc["loss"]).unwrap().is_nan());
    assert_eq!(pyjson::as_f64(&acc["actor/pg_loss"]), Some(1.0));
    assert!(mean_of(&pyjson::float(f64::NAN)).unwrap().is_nan());
    assert_eq!(mean_of(&json!([1.0, 3.0])), Some(2.0));
}
