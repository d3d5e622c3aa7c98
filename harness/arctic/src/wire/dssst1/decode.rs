//! Decoding: a frame back to its [`Node`] tree (tensor data borrowed), and what a streaming
//! reader learns from the header alone (its extent, the frame's length, the tree's summary).

use std::collections::HashMap;

use bytes::Bytes;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::SafeTensors;
use serde_json::Value;

use super::error::{invalid, refuse};
use super::node::child_path;
use super::tensor::checked_numel;
use super::{DType, Node, Tensor, WireError, FORMAT_VERSION, MAX_HEADER_BYTES};
use crate::wire::pyjson;

/// Length of the whole header (8-byte prefix + JSON) announced by a frame's first 8 bytes,
/// checked against the reading rules. Lets a streaming reader know how much to keep; `prefix`
/// may be just those 8 bytes, or more (then the header must open with `{`).
pub fn header_extent(prefix: &[u8]) -> Result<usize, WireError> {
    let Some(len_bytes) = prefix.get(..8) else {
        return Err(refuse(
            prefix,
            format!(
                "{} bytes is shorter than the 8-byte header length",
                prefix.len()
            ),
        ));
    };
    let mut a = [0u8; 8];
    a.copy_from_slice(len_bytes);
    let n = u64::from_le_bytes(a);
    if n == 0 {
        return Err(refuse(prefix, "header length is 0"));
    }
    if n > MAX_HEADER_BYTES {
        return Err(refuse(
            prefix,
            format!("header of {n} bytes exceeds the 64 MiB limit"),
        ));
    }
    if prefix.get(8).is_some_and(|&b| b != b'{') {
        return Err(refuse(prefix, "the header is not a JSON object"));
    }
    // n <= 64 MiB, so this fits in usize on every supported target.
    Ok(8 + n as usize)
}

fn check_extent(buf: &[u8]) -> Result<usize, WireError> {
    let extent = header_extent(buf)?;
    if extent > buf.len() {
        return Err(refuse(
            buf,
            format!(
                "header length {} runs past the end of the {}-byte frame",
                extent - 8,
                buf.len()
            ),
        ));
    }
    Ok(extent)
}

/// Parse the `dss` document as Python's `json.loads` does (`NaN`/`Infinity` included).
fn parse_dss(text: &str) -> Result<Value, WireError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Ok(v),
        Err(_) => {
            pyjson::parse(text).map_err(|e| invalid(format!("dss metadata is not JSON: {e}")))
        }
    }
}

fn dss_tree(metadata: Option<&HashMap<String, String>>) -> Result<Value, WireError> {
    let dss = metadata
        .and_then(|m| m.get("dss"))
        .ok_or_else(|| invalid("__metadata__ has no 'dss' entry"))?;
    let mut doc = parse_dss(dss)?;
    match doc.get("v") {
        Some(Value::String(v)) if v == FORMAT_VERSION => {}
        Some(v) => {
            return Err(invalid(format!(
                "dss version is {v}, expected \"{FORMAT_VERSION}\""
            )))
        }
        None => return Err(invalid("dss metadata has no 'v'")),
    }
    match doc.get_mut("tree") {
        Some(t) => Ok(t.take()),
        None => Err(invalid("dss metadata has no 'tree'")),
    }
}

/// Rebuild the tree; `resolve(key, scalar, at)` yields the node for a `t` entry.
fn parse_node(
    v: &Value,
    at: &str,
    resolve: &mut dyn FnMut(&str, bool, &str) -> Result<Node, WireError>,
) -> Result<Node, WireError> {
    let at_or_root = if at.is_empty() { "<root>" } else { at };
    let items = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| invalid(format!("tree node at {at_or_root} is not a tagged array")))?;
    let tag = items[0].as_str().unwrap_or("");
    let arg = items.get(1);
    let list = |what: &str| {
        arg.and_then(Value::as_array)
            .ok_or_else(|| invalid(format!("'{what}' node at {at_or_root} needs an array")))
    };
    match tag {
        "t" => {
            let key = arg
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("'t' node at {at_or_root} needs a string key")))?;
            let scalar = items
                .get(2)
                .and_then(|o| o.get("scalar"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            resolve(key, scalar, at_or_root)
        }
        "j" => Ok(Node::Json(arg.cloned().unwrap_or(Value::Null))),
        "d" => {
            let mut entries = Vec::new();
            for pair in list("d")? {
                let (k, child) = match pair.as_array().map(Vec::as_slice) {
                    Some([Value::String(k), child]) => (k, child),
                    _ => {
                        return Err(invalid(format!(
                            "'d' node at {at_or_root} has an entry that is not [key, node]"
                        )))
                    }
                };
                entries.push((k.clone(), parse_node(child, &child_path(at, k), resolve)?));
            }
            Ok(Node::Dict(entries))
        }
        "l" | "u" => {
            let mut out = Vec::new();
            for (i, child) in list(tag)?.iter().enumerate() {
                out.push(parse_node(child, &child_path(at, &i.to_string()), resolve)?);
            }
            Ok(if tag == "l" {
                Node::List(out)
            } else {
                Node::Tuple(out)
            })
        }
        other => Err(invalid(format!(
            "unknown tree tag {other:?} at {at_or_root}"
        ))),
    }
}

fn tensor_shape(key: &str, info: &TensorInfo, scalar: bool) -> Result<Vec<usize>, WireError> {
    if scalar {
        if checked_numel(&info.shape) != Some(1) {
            return Err(invalid(format!(
                "scalar tensor '{key}' has shape {:?}, not one element",
                info.shape
            )));
        }
        Ok(Vec::new())
    } else {
        Ok(info.shape.clone())
    }
}

/// The tensor the tree names as `key` (at `at`), with its checked dtype and shape.
fn tree_tensor<'m>(
    metadata: &'m Metadata,
    key: &str,
    scalar: bool,
    at: &str,
) -> Result<(&'m TensorInfo, DType, Vec<usize>), WireError> {
    let info = metadata.info(key).ok_or_else(|| {
        invalid(format!(
            "tree names tensor '{key}' at {at}, which the frame lacks"
        ))
    })?;
    Ok((
        info,
        frame_dtype(key, info)?,
        tensor_shape(key, info, scalar)?,
    ))
}

fn frame_dtype(key: &str, info: &TensorInfo) -> Result<DType, WireError> {
    DType::from_safetensors(info.dtype).ok_or_else(|| {
        invalid(format!(
            "tensor '{key}' has unsupported dtype {:?}",
            info.dtype
        ))
    })
}

/// Decode one DSSST1 frame; tensor data borrows from `buf`.
pub fn decode(buf: Bytes) -> Result<Node, WireError> {
    let extent = check_extent(&buf)?;
    let (_, metadata) = SafeTensors::read_metadata(&buf)
        .map_err(|e| refuse(&buf, format!("safetensors container: {e}")))?;
    let tree = dss_tree(metadata.metadata().as_ref())?;
    let mut resolve = |key: &str, scalar: bool, at: &str| -> Result<Node, WireError> {
        let (info, dtype, shape) = tree_tensor(&metadata, key, scalar, at)?;
        // read_metadata checked every offset against the buffer.
        let (s, e) = info.data_offsets;
        let data = buf.slice(extent + s..extent + e);
        Ok(Node::Tensor {
            tensor: Tensor { dtype, shape, data },
            scalar,
        })
    };
    parse_node(&tree, "", &mut resolve)
}

/// The `op` metadata of a frame (chunk descriptors, router replay), parsed as JSON; `None`
/// when the frame carries none. Reads the header only.
pub fn op_metadata(buf: &[u8]) -> Result<Option<Value>, WireError> {
    check_extent(buf)?;
    let (_, metadata) = SafeTensors::read_metadata(buf)
        .map_err(|e| refuse(buf, format!("safetensors container: {e}")))?;
    let Some(op) = metadata.metadata().as_ref().and_then(|m| m.get("op")) else {
        return Ok(None);
    };
    parse_dss(op)
        .map(Some)
        .map_err(|_| invalid(format!("the op metadata is not JSON: {op:?}")))
}

/// The byte length of the whole frame its header announces: the header extent plus the end of
/// the last tensor's `data_offsets` (`prefix` holds at least [`header_extent`] bytes). A body
/// of another length is cut short or carries trailing bytes, and does not decode.
pub fn frame_len(prefix: &[u8]) -> Result<usize, WireError> {
    let extent = header_extent(prefix)?;
    let header = prefix
        .get(8..extent)
        .ok_or_else(|| refuse(prefix, "the header is cut short"))?;
    let metadata: Metadata = serde_json::from_slice(header)
        .map_err(|e| refuse(prefix, format!("safetensors container: {e}")))?;
    let end = metadata
        .tensors()
        .values()
        .map(|info| info.data_offsets.1)
        .max()
        .unwrap_or(0);
    Ok(extent + end)
}

/// The [`Node::summary`] of a frame from its header alone (`prefix` holds at least
/// [`header_extent`] bytes): a proxy can log a 256 MB frame without keeping its tensors.
pub fn header_summary(prefix: &[u8]) -> Result<Value, WireError> {
    let extent = header_extent(prefix)?;
    let header = prefix.get(8..extent).ok_or_else(|| {
        refuse(
            prefix,
            format!(
                "header of {} bytes is cut short at {} bytes",
                extent - 8,
                prefix.len() - 8
            ),
        )
    })?;
    let text = std::str::from_utf8(header)
        .map_err(|e| refuse(prefix, format!("header is not UTF-8: {e}")))?;
    let metadata: Metadata = serde_json::from_str(text)
        .map_err(|e| refuse(prefix, format!("safetensors container: {e}")))?;
    let tree = dss_tree(metadata.metadata().as_ref())?;
    let mut resolve = |key: &str, scalar: bool, at: &str| -> Result<Node, WireError> {
        let (_, dtype, shape) = tree_tensor(&metadata, key, scalar, at)?;
        Ok(Node::Json(
            serde_json::json!({"dtype": dtype.name(), "shape": shape}),
        ))
    };
    Ok(parse_node(&tree, "", &mut resolve)?.summary())
}
