//! The rollout's `/generate` requests, one prompt and one sample each, as the adapter sends
//! them, and their answers in canonical order.

use std::collections::HashMap;

use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::{protocol, StepError};
use crate::run::driver::client::{ArcticClient, Reply};
use rlharness_arctic::task::{CharTokenizer, Problem};
use rlharness_arctic::wire::{pyjson, Node};

/// Generate `n` samples of every prompt as the adapter does: verl repeats each prompt
/// `rollout.n` times before generating and the adapter sends one prompt a request, so every
/// request carries one prompt as text and asks for one sample, with the adapter's
/// `sampling_params` (no `n`, no `seed`) and every key present. A bounded number are in
/// flight; the answer holds, per problem, its `n` samples in the canonical order of
/// [`canonical_groups`].
pub(super) async fn generate_all(
    client: &ArcticClient,
    job: u64,
    problems: &[Problem],
    n: usize,
    sampling_params: &Map<String, Value>,
) -> Result<Vec<Vec<Reply<GenResult>>>, StepError> {
    let requests: Vec<Node> = problems
        .iter()
        .flat_map(|p| std::iter::repeat_n(generate_request(&p.prompt, sampling_params), n))
        .collect();
    let futs = requests.into_iter().map(|request| {
        let client = client.clone();
        async move {
            let r = client.generate(job, &request).await?;
            let mut results = parse_generate(&r.body)?;
            if results.len() != 1 {
                return Err(protocol(format!(
                    "/generate returned {} results for one prompt and one sample",
                    results.len()
                )));
            }
            Ok::<_, StepError>(Reply {
                body: results.remove(0),
                seconds: r.seconds,
                reported: r.reported,
            })
        }
    });
    let replies: Vec<Reply<GenResult>> = futures_util::stream::iter(futs)
        // 16 prompts' worth of samples in flight, so a batching engine (vLLM, the torch
        // engine on CUDA) still sees as many rows at once as when a request asked for `n`.
        .buffered(16 * n.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    Ok(canonical_groups(problems, n, replies))
}

/// One `/generate` body, as the adapter writes it: every key, with explicit nulls.
pub(super) fn generate_request(prompt: &str, sampling_params: &Map<String, Value>) -> Node {
    Node::Json(json!({
        "prompts": [prompt],
        "sampling_params": sampling_params,
        "routing_key": null,
        "strict": false,
    }))
}

/// Deal `replies` (`n` a problem, problem-major) back into one group per problem, each in a
/// canonical order: sorted by token ids, then text.
///
/// Why: the `n` requests of a prompt are identical, so which of them receives which sample
/// depends on the order they reach the server (a server seeds a request from its prompt and
/// how many times that prompt came before it, never from anything the client sends). The
/// samples of a prompt are a set; a GRPO group is exchangeable (its advantages are computed
/// over the whole group), so ordering the set canonically changes nothing the training
/// depends on and makes a run reproducible bit for bit whatever order the server answered
/// in. Problems with the same prompt text pool their samples before they are dealt, since
/// their requests are identical too.
pub(super) fn canonical_groups(
    problems: &[Problem],
    n: usize,
    replies: Vec<Reply<GenResult>>,
) -> Vec<Vec<Reply<GenResult>>> {
    let mut pools: HashMap<&str, Vec<Reply<GenResult>>> = HashMap::new();
    let mut replies = replies.into_iter();
    for p in problems {
        pools
            .entry(p.prompt.as_str())
            .or_default()
            .extend(replies.by_ref().take(n));
    }
    for pool in pools.values_mut() {
        pool.sort_by(|a, b| {
            (&a.body.token_ids, &a.body.text).cmp(&(&b.body.token_ids, &b.body.text))
        });
        // Dealt from the back by `pop`, so reversed.
        pool.reverse();
    }
    problems
        .iter()
        .map(|p| match pools.get_mut(p.prompt.as_str()) {
            Some(pool) => (0..n).filter_map(|_| pool.pop()).collect(),
            None => Vec::new(),
        })
        .collect()
}

pub(super) struct GenResult {
    pub(super) text: String,
    pub(super) token_ids: Vec<i64>,
    /// `logprobs`: one per token id, when the sampler sent them.
    pub(super) logprobs: Option<Vec<f32>>,
}

pub(super) fn parse_generate(node: &Node) -> Result<Vec<GenResult>, StepError> {
    let v = node
        .to_json()
        .ok_or_else(|| protocol("/generate response holds tensors where JSON was expected"))?;
    let results = v
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| protocol("/generate response has no `results` list"))?;
    results
        .iter()
        .map(|r| {
            let text = r
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| protocol("/generate result without `text`"))?
                .to_string();
            let token_ids = match r.get("token_ids").and_then(Value::as_array) {
                Some(ids) => ids
                    .iter()
                    .map(|i| i.as_i64().ok_or_else(|| protocol("non-integer token id")))
                    .collect::<Result<Vec<_>, _>>()?,
                None => CharTokenizer::encode(&text).map_err(|e| protocol(e.to_string()))?,
            };
            let logprobs = match r.get("logprobs") {
                None | Some(Value::Null) => None,
                Some(v) => {
                    let lps = v
                        .as_array()
                        .ok_or_else(|| protocol("/generate result `logprobs` is not a list"))?
                        .iter()
                        .map(|x| {
                            pyjson::as_f64(x)
                                .map(|x| x as f32)
                                .ok_or_else(|| protocol("non-numeric entry in `logprobs`"))
                        })
                        .collect::<Result<Vec<f32>, _>>()?;
                    if lps.len() != token_ids.len() {
                        return Err(protocol(format!(
                            "/generate result has {} logprobs for {} token ids",
                            lps.len(),
                            token_ids.len()
                        )));
                    }
                    Some(lps)
                }
            };
            Ok(GenResult {
                text,
                token_ids,
                logprobs,
            })
        })
        .collect()
}
