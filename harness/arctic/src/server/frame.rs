//! Reading and building the DSSST1 trees of the binary routes: typed views of the tensors a
//! client sent (any dtype the frame carries, checked against its shape) and the small JSON
//! conversions every route needs. Shared by the server and the engines.

use serde_json::{Map, Value};

use crate::wire::{DType, Node, Tensor};

/// Number of elements a shape holds (`[]` is a scalar: 1).
/// Saturates instead of overflowing: a hostile shape must not panic the server.
pub(crate) fn numel(shape: &[usize]) -> usize {
    shape.iter().fold(1usize, |a, &d| a.saturating_mul(d))
}

/// A tree or tensor that is not what a route reads: what was expected, and what came.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct FrameError(pub String);

fn check_len(t: &Tensor, name: &str) -> Result<usize, FrameError> {
    let n = numel(&t.shape);
    let want = t.dtype.byte_len(n);
    if want != Some(t.data.len()) {
        return Err(FrameError(format!(
            "tensor {name} of dtype {} and shape {:?} needs {} bytes but carries {}",
            t.dtype.name(),
            t.shape,
            want.map_or_else(|| "a whole number of".to_string(), |w| w.to_string()),
            t.data.len()
        )));
    }
    Ok(n)
}

/// The elements of any tensor with real elements as `f64` (integers and booleans converted;
/// every float dtype safetensors names, the 8-bit ones included). Complex and packed sub-byte
/// tensors are refused: no route computes with them, and the real server's torch code fails
/// on them too.
pub fn tensor_f64(t: &Tensor, name: &str) -> Result<Vec<f64>, FrameError> {
    check_len(t, name)?;
    t.to_f64_vec()
        .map_err(|e| FrameError(format!("tensor {name}: {e}")))
}

/// The elements of an integer or boolean tensor as `i64`; a float tensor is an error, since
/// token ids and masks must be exact.
pub(crate) fn tensor_i64(t: &Tensor, name: &str) -> Result<Vec<i64>, FrameError> {
    check_len(t, name)?;
    if !t.dtype.is_integer() {
        return Err(FrameError(format!(
            "tensor {name} must hold integers, got dtype {}",
            t.dtype.name()
        )));
    }
    t.to_i64_vec()
        .map_err(|e| FrameError(format!("tensor {name}: {e}")))
}

/// An `I64` tensor.
pub fn i64_tensor(shape: Vec<usize>, values: &[i64]) -> Tensor {
    Tensor {
        dtype: DType::I64,
        shape,
        data: crate::wire::dssst1::le_bytes(values, |v| v.to_le_bytes()),
    }
}

/// The JSON value of a node without tensors; `None` when a tensor sits somewhere inside.
pub fn node_to_json(node: &Node) -> Option<Value> {
    match node {
        Node::Tensor { .. } => None,
        Node::Json(v) => Some(v.clone()),
        Node::Dict(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                m.insert(k.clone(), node_to_json(v)?);
            }
            Some(Value::Object(m))
        }
        Node::List(items) | Node::Tuple(items) => items
            .iter()
            .map(node_to_json)
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
    }
}

/// The top-level entries of an object-shaped tree: a `d` node, or a `j` node holding an object
/// (a body without tensors). `what` names the body in the error.
pub(crate) fn object_entries(node: Node, what: &str) -> Result<Vec<(String, Node)>, FrameError> {
    match node {
        Node::Dict(entries) => Ok(entries),
        Node::Json(Value::Object(m)) => {
            Ok(m.into_iter().map(|(k, v)| (k, Node::Json(v))).collect())
        }
        other => Err(FrameError(format!(
            "{what} must be an object, got {}",
            node_kind(&other)
        ))),
    }
}

/// A short name of a node's kind for error messages.
pub(crate) fn node_kind(node: &Node) -> &'static str {
    match node {
        Node::Tensor { .. } => "a tensor",
        Node::Json(Value::Object(_)) => "a JSON object",
        Node::Json(Value::Array(_)) => "a JSON array",
        Node::Json(Value::Null) => "null",
        Node::Json(_) => "a JSON scalar",
        Node::Dict(_) => "an object with tensors",
        Node::List(_) => "a list with tensors",
        Node::Tuple(_) => "a tuple",
    }
}

/// Describe a tensor for error messages: `F32 [2, 8]`.
pub(crate) fn describe(t: &Tensor) -> String {
    format!("{} {:?}", t.dtype.name(), t.shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::f32_tensor;
    use bytes::Bytes;

    #[test]
    fn reads_every_dtype_it_promises() {
        let t = f32_tensor(vec![2], &[1.5, -2.0]);
        assert_eq!(tensor_f64(&t, "x").unwrap(), vec![1.5, -2.0]);
        assert!(tensor_i64(&t, "x").unwrap_err().0.contains("integers"));
        let i = i64_tensor(vec![3], &[1, -2, 3]);
        assert_eq!(tensor_i64(&i, "ids").unwrap(), vec![1, -2, 3]);
        assert_eq!(tensor_f64(&i, "ids").unwrap(), vec![1.0, -2.0, 3.0]);
        let bf = Tensor {
            dtype: DType::BF16,
            shape: vec![1],
            data: Bytes::from(half::bf16::from_f32(0.5).to_le_bytes().to_vec()),
        };
        assert_eq!(tensor_f64(&bf, "b").unwrap(), vec![0.5]);
    }

    #[test]
    fn short_data_is_an_error_naming_the_tensor() {
        let t = Tensor {
            dtype: DType::I64,
            shape: vec![2, 2],
            data: Bytes::from(vec![0u8; 8]),
        };
        let e = tensor_i64(&t, "batch.input_ids").unwrap_err();
        assert!(
            e.0.contains("batch.input_ids") && e.0.contains("32 bytes"),
            "{e}"
        );
    }

    #[test]
    fn json_object_roots_split_into_entries() {
        let n = Node::Json(serde_json::json!({"a": 1, "b": [2]}));
        let e = object_entries(n, "body").unwrap();
        assert_eq!(e.len(), 2);
        assert!(object_entries(Node::Json(Value::Null), "body")
            .unwrap_err()
            .0
            .contains("body must be an object, got null"));
        let d = Node::Dict(vec![(
            "x".into(),
            Node::Tensor {
                tensor: f32_tensor(vec![1], &[1.0]),
                scalar: false,
            },
        )]);
        assert_eq!(node_to_json(&d), None);
    }
}
