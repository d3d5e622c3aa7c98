//! A `{batch, meta, processing}` frame (`/forward`, `/forward-backward`): decoded, checked
//! against the real server's rules and verl's padded layout, and turned into a [`ModelBatch`].

use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::frame::{self, describe, object_entries};
use crate::engine::ModelBatch;
use crate::processing::{self, LossConfigError};
use crate::wire::chunk::unwrap_request;
use crate::wire::{decode, DType, Node, Tensor};

/// What a handler read from a binary request, attached to its response as an extension: the
/// `meta` as the server understood it (tensors in it read as numbers or lists) and the JSON
/// part of the tree (tensors as their dtype and shape). The server itself keeps nothing; a
/// test that wants to see what reached the server wraps the router and reads this.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    pub meta: Option<Value>,
    pub body: Option<Value>,
}

use crate::processing::POST_PROCESSORS;

/// Tensors that share `input_ids`' `[B,S]` shape when present.
pub(super) const FULL_WIDTH_TENSORS: [&str; 7] = [
    "attention_mask",
    "position_ids",
    "response_mask",
    "loss_mask",
    "old_log_probs",
    "advantages",
    "ref_log_prob",
];

/// Decode and check a `{batch, meta, processing}` frame.
pub(super) fn model_batch(
    bytes: Bytes,
    route: &str,
) -> Result<(ModelBatch, ParsedRequest), ApiError> {
    // A 0.1.4 client may wrap the frame in a single-chunk envelope (`force_chunk`).
    let root = decode(unwrap_request(bytes)?)?;
    let FrameSections {
        batch,
        meta,
        processing,
    } = frame_sections(root, route)?;
    check_meta(&meta, route)?;
    let batch = batch_tensors(batch, route)?;
    let post = post_processors(&processing, route)?;
    let loss_fn = loss_fn_of(&processing, route)?;
    crate::processing::return_fwd_batch(&meta)
        .map_err(|e| ApiError::unprocessable(format!("{route}: {e}")))?;
    let mb = ModelBatch {
        batch,
        meta,
        post,
        loss_fn,
    };
    check_batch_shapes(&mb, route)?;
    let recorded = ParsedRequest {
        meta: Some(Value::Object(mb.meta.clone())),
        body: Some(json!({
            "batch": mb.batch.iter().map(|(k, t)| (k.clone(), json!(describe(t)))).collect::<Map<_, _>>(),
            "processing": Value::Object(processing),
        })),
    };
    Ok((mb, recorded))
}

/// A `{batch, meta, processing}` frame's sections.
pub(super) struct FrameSections {
    batch: Node,
    /// Empty when absent or null.
    meta: Map<String, Value>,
    /// Empty when absent or null.
    processing: Map<String, Value>,
}

/// A frame's three sections: the `batch` node (required), `meta` and `processing` (objects).
pub(super) fn frame_sections(root: Node, route: &str) -> Result<FrameSections, ApiError> {
    let entries = object_entries(root, &format!("{route} body"))
        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    let mut batch_node = None;
    let mut meta = Map::new();
    let mut processing = Map::new();
    for (k, v) in entries {
        match k.as_str() {
            "batch" => batch_node = Some(v),
            // `meta` may hold tensors anywhere (the adapter sends `batch_num_tokens` as a 0-d
            // I64 tensor): a one-element tensor reads as its number.
            "meta" => match v.to_values() {
                Value::Object(m) => meta = m,
                Value::Null => {}
                other => {
                    return Err(ApiError::unprocessable(format!(
                        "{route}: `meta` must be an object, got {}",
                        frame::node_kind(&Node::Json(other))
                    )))
                }
            },
            "processing" => match v.to_values() {
                Value::Object(m) => processing = m,
                Value::Null => {}
                _ => {
                    return Err(ApiError::unprocessable(format!(
                        "{route}: `processing` must be a JSON object"
                    )))
                }
            },
            _ => {}
        }
    }
    let batch_node =
        batch_node.ok_or_else(|| ApiError::unprocessable(format!("{route}: missing `batch`")))?;
    Ok(FrameSections {
        batch: batch_node,
        meta,
        processing,
    })
}

/// The `meta` keys the real server's handler reads unguarded: with `load_balancer` present it
/// looks `max_token_len_per_gpu` up by subscript, so a `meta` without it raises inside the
/// handler: the plain-text 500.
pub(super) fn check_meta(meta: &Map<String, Value>, route: &str) -> Result<(), ApiError> {
    if meta.contains_key("load_balancer") && !meta.contains_key("max_token_len_per_gpu") {
        return Err(ApiError::internal(format!(
            "{route}: meta has load_balancer but no max_token_len_per_gpu (the real server's handler fails on the missing key)"
        )));
    }
    Ok(())
}

/// The tensors of a frame's `batch`, by name in the order sent.
pub(super) fn batch_tensors(
    batch_node: Node,
    route: &str,
) -> Result<Vec<(String, Tensor)>, ApiError> {
    let mut batch: Vec<(String, Tensor)> = Vec::new();
    for (k, v) in object_entries(batch_node, &format!("{route}: `batch`"))
        .map_err(|e| ApiError::unprocessable(e.to_string()))?
    {
        match v {
            Node::Tensor { tensor, .. } => batch.push((k, tensor)),
            // Non-tensor batch entries (verl's non_tensor_batch leftovers) are not read.
            Node::Json(_) => {}
            other => {
                return Err(ApiError::unprocessable(format!(
                    "{route}: batch.{k} must be a tensor, got {}",
                    frame::node_kind(&other)
                )))
            }
        }
    }
    Ok(batch)
}

/// `processing.post`: a list of known post-processors (none when absent or null).
pub(super) fn post_processors(
    processing: &Map<String, Value>,
    route: &str,
) -> Result<Vec<String>, ApiError> {
    let post = match processing.get("post") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::unprocessable(format!(
                        "{route}: processing.post must be a list of names, got {i}"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "{route}: processing.post must be a list of names, got {other}"
            )))
        }
    };
    if let Some(p) = post.iter().find(|p| !POST_PROCESSORS.contains(&p.as_str())) {
        return Err(ApiError::bad_request(format!(
            "{route}: unknown post-processor {p:?} (known: {})",
            POST_PROCESSORS.join(", ")
        )));
    }
    Ok(post)
}

/// `processing.loss_fn`: a known loss function, or `None` (an explicit null) for forward only.
pub(super) fn loss_fn_of(
    processing: &Map<String, Value>,
    route: &str,
) -> Result<Option<String>, ApiError> {
    // ABSENT: the real server looks up its default `grpo`, whose signature does not match the
    // call, so the request fails with a 500 after the forward pass (which changes nothing).
    // An explicit null means forward only.
    let loss_fn = match processing.get("loss_fn") {
        None => {
            return Err(ApiError::internal(format!(
                "{route}: processing.loss_fn is absent: the default `grpo` loss cannot be called this way (send a name, or null for forward only)"
            )))
        }
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "{route}: processing.loss_fn must be a name or null, got {other}"
            )))
        }
    };
    let Some(name) = loss_fn.as_deref() else {
        return Ok(None);
    };
    if !processing::is_known_loss(name) {
        return Err(ApiError::bad_request(format!(
            "{route}: unknown loss_fn {name:?} (known: {})",
            processing::loss_names().collect::<Vec<_>>().join(", ")
        )));
    }
    let config = match processing.get("config") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "{route}: processing.config must be an object, got {other}"
            )))
        }
    };
    // 0.1.4's loss functions raise inside the handler (its 500); what it would compute but
    // this server does not is a 400 that says so.
    processing::check_loss_config(name, &config).map_err(|e| match e {
        LossConfigError::Refused(m) => ApiError::internal(format!("{route}: {m}")),
        LossConfigError::NotServed(m) => ApiError::bad_request(format!("{route}: {m}")),
    })?;
    Ok(loss_fn)
}

/// Shape rules of verl's padded layout, checked once here so every engine can index freely.
pub(super) fn check_batch_shapes(mb: &ModelBatch, route: &str) -> Result<(), ApiError> {
    let need = |name: &str| {
        mb.tensor(name)
            .ok_or_else(|| ApiError::unprocessable(format!("{route}: missing tensor batch.{name}")))
    };
    let ids = need("input_ids")?;
    // Any integer dtype will do for ids and masks (torch indexes with all of them); a float or
    // complex tensor fails in the real server's embedding lookup too.
    let is_int = |t: &Tensor| t.dtype.is_integer() && t.dtype != DType::Bool;
    if ids.shape.len() != 2 || !is_int(ids) {
        return Err(ApiError::unprocessable(format!(
            "{route}: batch.input_ids must be a 2-D integer tensor [B,S], got {}",
            describe(ids)
        )));
    }
    let (b, s) = (ids.shape[0], ids.shape[1]);
    let mask = need("attention_mask")?;
    let prompts = need("prompts")?;
    if prompts.shape.len() != 2 || prompts.shape[0] != b || prompts.shape[1] > s {
        return Err(ApiError::unprocessable(format!(
            "{route}: batch.prompts must be [B,P] with B = {b} and P <= S = {s}, got {}",
            describe(prompts)
        )));
    }
    let p = prompts.shape[1];
    for name in FULL_WIDTH_TENSORS {
        if let Some(t) = mb.tensor(name) {
            if t.shape != ids.shape {
                return Err(ApiError::unprocessable(format!(
                    "{route}: batch.{name} has shape {:?} but batch.input_ids has shape {:?}",
                    t.shape, ids.shape
                )));
            }
        }
    }
    if !is_int(mask) && mask.dtype != DType::Bool {
        return Err(ApiError::unprocessable(format!(
            "{route}: batch.attention_mask must be an integer or boolean tensor, got {}",
            describe(mask)
        )));
    }
    if let Some(r) = mb.tensor("responses") {
        if r.shape != [b, s - p] {
            return Err(ApiError::unprocessable(format!(
                "{route}: batch.responses must be [B,R] = [{b}, {}] (S - P), got {}",
                s - p,
                describe(r)
            )));
        }
    }
    for (name, t) in &mb.batch {
        let want = t.dtype.byte_len(frame::numel(&t.shape));
        if want != Some(t.data.len()) {
            return Err(ApiError::unprocessable(format!(
                "{route}: batch.{name} ({}) needs {} bytes but carries {}",
                describe(t),
                want.map_or_else(|| "a whole number of".to_string(), |w| w.to_string()),
                t.data.len()
            )));
        }
    }
    Ok(())
}

pub(super) fn with_parts(mut resp: Response, parts: ParsedRequest) -> Response {
    resp.extensions_mut().insert(parts);
    resp
}
