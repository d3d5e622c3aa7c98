//! Encoding: a [`Node`] tree to one DSSST1 frame, laid out byte for byte as Python writes it.

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::node::child_path;
use super::{
    DType, Node, Tensor, WireError, EMPTY_KEY, FORMAT_VERSION, MAX_HEADER_BYTES, ROOT_KEY,
};
use crate::wire::pyjson;

struct Collected<'a> {
    key: String,
    tensor: &'a Tensor,
    stored_shape: Vec<usize>,
}

/// The trees of a tuple's or a list's items, each at `path.<index>`.
fn build_items<'a>(
    items: &'a [Node],
    path: &str,
    out: &mut Vec<Collected<'a>>,
    keys: &mut HashSet<String>,
) -> Result<Vec<Value>, WireError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| build_tree(item, &child_path(path, &i.to_string()), out, keys))
        .collect()
}

/// Turns the tree into its `dss` JSON and collects the tensors under their dotted keys.
fn build_tree<'a>(
    node: &'a Node,
    path: &str,
    out: &mut Vec<Collected<'a>>,
    keys: &mut HashSet<String>,
) -> Result<Value, WireError> {
    Ok(match node {
        Node::Tensor { tensor, scalar } => {
            tensor.check_len()?;
            let key = if path.is_empty() {
                ROOT_KEY.to_string()
            } else {
                path.to_string()
            };
            if key == EMPTY_KEY || !keys.insert(key.clone()) {
                return Err(WireError::Encode(format!(
                    "two tensors map to the key '{key}' (a dict key containing '.' collides with a nested path)"
                )));
            }
            let stored_shape = if *scalar {
                if tensor.numel() != 1 {
                    return Err(WireError::Encode(format!(
                        "scalar tensor '{key}' has shape {:?}, not one element",
                        tensor.shape
                    )));
                }
                vec![1]
            } else {
                tensor.shape.clone()
            };
            let mut tag = vec![Value::from("t"), Value::from(key.clone())];
            if *scalar {
                tag.push(serde_json::json!({"scalar": true}));
            }
            out.push(Collected {
                key,
                tensor,
                stored_shape,
            });
            Value::Array(tag)
        }
        Node::Tuple(items) => serde_json::json!(["u", build_items(items, path, out, keys)?]),
        Node::Json(v) => serde_json::json!(["j", v]),
        Node::Dict(_) | Node::List(_) if !node.has_tensor() => {
            // Tensor-free, so `to_json` cannot fail; the fallback keeps this panic-free anyway.
            serde_json::json!(["j", node.to_json().unwrap_or(Value::Null)])
        }
        Node::Dict(entries) => {
            let mut v = Vec::with_capacity(entries.len());
            for (k, item) in entries {
                v.push(serde_json::json!([
                    k,
                    build_tree(item, &child_path(path, k), out, keys)?
                ]));
            }
            serde_json::json!(["d", v])
        }
        Node::List(items) => serde_json::json!(["l", build_items(items, path, out, keys)?]),
    })
}

/// Encode a tree as one DSSST1 frame.
pub fn encode(root: &Node) -> Result<Vec<u8>, WireError> {
    encode_with_op(root, None)
}

/// Encode a tree with the optional `op` metadata string (chunk descriptors on the hosted path).
pub fn encode_with_op(root: &Node, op: Option<&str>) -> Result<Vec<u8>, WireError> {
    let placeholder = Tensor {
        dtype: DType::U8,
        shape: vec![1],
        data: Bytes::from_static(&[0]),
    };
    let mut tensors = Vec::new();
    let tree = build_tree(root, "", &mut tensors, &mut HashSet::new())?;
    if tensors.is_empty() {
        tensors.push(Collected {
            key: EMPTY_KEY.to_string(),
            tensor: &placeholder,
            stored_shape: vec![1],
        });
    }
    let dss = pyjson::to_python(&serde_json::json!({"v": FORMAT_VERSION, "tree": tree}));

    // The order the safetensors crate (and so Python) writes: descending dtype, then name.
    tensors.sort_by(|a, b| {
        let (da, db) = (
            a.tensor.dtype.to_safetensors(),
            b.tensor.dtype.to_safetensors(),
        );
        db.cmp(&da).then_with(|| a.key.cmp(&b.key))
    });

    let mut meta = Map::new();
    meta.insert("dss".into(), Value::String(dss));
    if let Some(op) = op {
        meta.insert("op".into(), Value::String(op.to_string()));
    }
    let mut header = Map::with_capacity(tensors.len() + 1);
    header.insert("__metadata__".into(), Value::Object(meta));
    let mut offset = 0usize;
    for c in &tensors {
        let end = offset + c.tensor.data.len();
        header.insert(
            c.key.clone(),
            serde_json::json!({
                "dtype": c.tensor.dtype.name(),
                "shape": c.stored_shape,
                "data_offsets": [offset, end],
            }),
        );
        offset = end;
    }
    let mut header = serde_json::to_vec(&Value::Object(header))
        .map_err(|e| WireError::Encode(format!("header serialisation: {e}")))?;
    header.resize(header.len().next_multiple_of(8), b' ');
    if header.len() as u64 > MAX_HEADER_BYTES {
        return Err(WireError::Encode(format!(
            "header of {} bytes exceeds the 64 MiB limit",
            header.len()
        )));
    }

    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for c in &tensors {
        out.extend_from_slice(&c.tensor.data);
    }
    Ok(out)
}
