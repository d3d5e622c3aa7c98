//! [`Node`]: the `dss` tree that places tensors inside JSON, and its readings as JSON (plain,
//! summary, values).

use serde_json::{Map, Value};

use super::{DType, Tensor};
use crate::wire::pyjson;

/// A node of the `dss` tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `["t", key]`; `scalar` is `["t", key, {"scalar": true}]` (a 0-dim tensor stored as `[1]`).
    Tensor { tensor: Tensor, scalar: bool },
    /// `["j", value]`: JSON with no tensor inside. Non-finite floats written by Python
    /// (`NaN`, `Infinity`) are `{"$float": "NaN"}` objects here (see [`pyjson`]), never
    /// `null`, and are written back as the literals.
    Json(serde_json::Value),
    /// `["d", [[k, node], ...]]`: an object holding at least one tensor; key order kept.
    Dict(Vec<(String, Node)>),
    /// `["l", [node, ...]]`: an array holding at least one tensor.
    List(Vec<Node>),
    /// `["u", [node, ...]]`: a tuple (always tagged `u`).
    Tuple(Vec<Node>),
}

impl From<Tensor> for Node {
    fn from(tensor: Tensor) -> Node {
        Node::Tensor {
            tensor,
            scalar: false,
        }
    }
}

impl Node {
    pub fn dict<K: Into<String>>(entries: impl IntoIterator<Item = (K, Node)>) -> Node {
        Node::Dict(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn json(value: impl Into<Value>) -> Node {
        Node::Json(value.into())
    }

    #[cfg(test)]
    pub(crate) fn tensor(tensor: Tensor) -> Node {
        Node::from(tensor)
    }

    /// A 0-dim tensor (Python's `torch.tensor(1.5)`), sent as shape `[1]` with the scalar flag.
    pub fn scalar(mut tensor: Tensor) -> Node {
        tensor.shape.clear();
        Node::Tensor {
            tensor,
            scalar: true,
        }
    }

    /// The child `key` of a `Dict` node. A tensor-free object arrives as `Json`: use
    /// [`Node::get_json`] for its fields.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Dict(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The JSON field `key` of a `Json` object, or of a `Dict` whose child is `Json`.
    pub fn get_json(&self, key: &str) -> Option<&Value> {
        match self {
            Node::Json(Value::Object(m)) => m.get(key),
            Node::Dict(_) => match self.get(key)? {
                Node::Json(v) => Some(v),
                _ => None,
            },
            _ => None,
        }
    }

    /// The tensor of a `Tensor` node.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Node::Tensor { tensor, .. } => Some(tensor),
            _ => None,
        }
    }

    /// Whether a tensor sits anywhere below (decides `d`/`l` versus `j` on the wire).
    pub fn has_tensor(&self) -> bool {
        match self {
            Node::Tensor { .. } => true,
            Node::Json(_) => false,
            Node::Dict(e) => e.iter().any(|(_, v)| v.has_tensor()),
            Node::List(v) | Node::Tuple(v) => v.iter().any(Node::has_tensor),
        }
    }

    /// The subtree as plain JSON, if it holds no tensor (tuples become arrays).
    pub fn to_json(&self) -> Option<Value> {
        match self {
            Node::Tensor { .. } => None,
            Node::Json(v) => Some(v.clone()),
            Node::Dict(e) => {
                let mut m = Map::with_capacity(e.len());
                for (k, v) in e {
                    m.insert(k.clone(), v.to_json()?);
                }
                Some(Value::Object(m))
            }
            Node::List(v) | Node::Tuple(v) => v
                .iter()
                .map(Node::to_json)
                .collect::<Option<Vec<_>>>()
                .map(Value::Array),
        }
    }

    /// The tree with each tensor rendered as `{"dtype", "shape"}` and every JSON value kept: what
    /// the recording proxy writes to `wire.jsonl`. A tuple keeps its tag as `{"$tuple": [...]}`;
    /// a non-finite float is `{"$float": "NaN"}` (see [`pyjson`]).
    pub fn summary(&self) -> Value {
        match self {
            Node::Tensor { tensor, .. } => tensor.summary(),
            Node::Json(v) => v.clone(),
            Node::Dict(e) => {
                Value::Object(e.iter().map(|(k, v)| (k.clone(), v.summary())).collect())
            }
            Node::List(v) => Value::Array(v.iter().map(Node::summary).collect()),
            Node::Tuple(v) => serde_json::json!({
                TUPLE_KEY: v.iter().map(Node::summary).collect::<Vec<_>>()
            }),
        }
    }

    /// The tree as JSON with every 0-d tensor read as its number (where a number is expected,
    /// as in `meta.batch_num_tokens`), other tensors as nested arrays of
    /// their values (complex and packed sub-byte ones as their `{"dtype", "shape"}` summary),
    /// tuples as arrays: what a route reads out of `meta`.
    pub(crate) fn to_values(&self) -> Value {
        match self {
            Node::Tensor { tensor, scalar } => match tensor.scalar_json() {
                Some(v) if *scalar || tensor.shape.is_empty() => v,
                _ => tensor_values(tensor).unwrap_or_else(|| tensor.summary()),
            },
            Node::Json(v) => v.clone(),
            Node::Dict(e) => {
                Value::Object(e.iter().map(|(k, v)| (k.clone(), v.to_values())).collect())
            }
            Node::List(v) | Node::Tuple(v) => Value::Array(v.iter().map(Node::to_values).collect()),
        }
    }
}

/// Key under which [`Node::summary`] keeps a tuple's tag.
const TUPLE_KEY: &str = "$tuple";

/// The dotted path of a child node (`segment` below `path`): a tensor's key in the frame.
pub(super) fn child_path(path: &str, segment: &str) -> String {
    if path.is_empty() {
        segment.to_string()
    } else {
        format!("{path}.{segment}")
    }
}

/// A tensor's values as nested arrays following its shape.
fn tensor_values(t: &Tensor) -> Option<Value> {
    let flat: Vec<Value> = if t.dtype.is_integer() && t.dtype != DType::Bool {
        t.to_i64_vec().ok()?.into_iter().map(Value::from).collect()
    } else if t.dtype == DType::Bool {
        t.data.iter().map(|&b| Value::Bool(b != 0)).collect()
    } else {
        t.to_f64_vec()
            .ok()?
            .into_iter()
            .map(pyjson::float)
            .collect()
    };
    fn nest(flat: &[Value], shape: &[usize]) -> Value {
        match shape {
            [] => flat.first().cloned().unwrap_or(Value::Null),
            [_] => Value::Array(flat.to_vec()),
            [n, rest @ ..] => {
                let step = flat.len() / (*n).max(1);
                Value::Array(
                    (0..*n)
                        .map(|i| nest(&flat[i * step..(i + 1) * step], rest))
                        .collect(),
                )
            }
        }
    }
    (flat.len() == t.numel()).then(|| nest(&flat, &t.shape))
}
