//! DSSST1: a safetensors container whose `__metadata__.dss` holds a JSON tree that places the
//! tensors inside arbitrary JSON (see the project's reference on the frame).
//!
//! Decoding borrows tensor bytes from the input `Bytes` (no copy); encoding writes the header
//! once and copies each tensor once into a buffer allocated at its final size.
//!
//! Byte compatibility with a Python peer (`safetensors` + `json`), for the same tree:
//! - the container is laid out as the `safetensors` package (which wraps the same Rust crate)
//!   writes it: tensors ordered, in the header and in the data, by the crate's dtype order
//!   (largest first) and then by name; a compact JSON header with `__metadata__` first, padded
//!   with spaces to a multiple of 8. The only freedom left is the order of the `__metadata__`
//!   keys, which the crate keeps in a hash map (random per process); we write `dss` before `op`;
//! - the `dss` string is `json.dumps` with Python's defaults (see [`super::pyjson`]): `", "` and
//!   `": "`, non-ASCII escaped, floats in `repr` form, `NaN`/`Infinity` literals.
//!
//! Decoding follows the real codec's order: the container is parsed first, and only when that
//! fails does a pickle or ZIP signature get its own refusal (a valid frame whose header is 640
//! bytes long starts with `80 02`).

use std::collections::HashSet;

use bytes::Bytes;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors};
use serde_json::{Map, Value};

use super::pyjson;

/// Format tag inside the `dss` document.
pub(crate) const FORMAT_VERSION: &str = "DSSST1";
/// Tensor key of a tensor that is the whole tree.
pub(crate) const ROOT_KEY: &str = "__root__";
/// Placeholder tensor of a frame that carries no tensor (safetensors needs at least one).
pub(crate) const EMPTY_KEY: &str = "__dss_empty__";
/// Largest header a reader accepts.
pub(crate) const MAX_HEADER_BYTES: u64 = 64 * 1024 * 1024;

/// Tensor element types the frame carries: every dtype the safetensors container names (the
/// real codec takes any torch tensor, so any of them can arrive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DType {
    #[serde(rename = "BOOL")]
    Bool,
    F4,
    #[serde(rename = "F6_E2M3")]
    F6E2M3,
    #[serde(rename = "F6_E3M2")]
    F6E3M2,
    U8,
    I8,
    #[serde(rename = "F8_E5M2")]
    F8E5M2,
    #[serde(rename = "F8_E4M3")]
    F8E4M3,
    #[serde(rename = "F8_E8M0")]
    F8E8M0,
    #[serde(rename = "F8_E4M3FNUZ")]
    F8E4M3Fnuz,
    #[serde(rename = "F8_E5M2FNUZ")]
    F8E5M2Fnuz,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl DType {
    pub const ALL: [DType; 22] = [
        DType::Bool,
        DType::F4,
        DType::F6E2M3,
        DType::F6E3M2,
        DType::U8,
        DType::I8,
        DType::F8E5M2,
        DType::F8E4M3,
        DType::F8E8M0,
        DType::F8E4M3Fnuz,
        DType::F8E5M2Fnuz,
        DType::I16,
        DType::U16,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U32,
        DType::F32,
        DType::C64,
        DType::F64,
        DType::I64,
        DType::U64,
    ];

    /// Bits of one element (4 and 6 for the packed micro-scaling floats).
    pub fn bits(self) -> usize {
        self.to_safetensors().bitsize()
    }

    /// Bytes of one element, rounded up (1 for the packed sub-byte floats: use
    /// [`DType::byte_len`] for lengths).
    pub fn size(self) -> usize {
        self.bits().div_ceil(8)
    }

    /// Bytes that `numel` elements take, or `None` on overflow or when sub-byte elements do
    /// not fill whole bytes (the container refuses such a tensor).
    pub fn byte_len(self, numel: usize) -> Option<usize> {
        let bits = numel.checked_mul(self.bits())?;
        (bits % 8 == 0).then_some(bits / 8)
    }

    /// The safetensors name (`F32`, `BF16`, `F8_E4M3`, ..., `BOOL`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "BOOL",
            DType::F4 => "F4",
            DType::F6E2M3 => "F6_E2M3",
            DType::F6E3M2 => "F6_E3M2",
            DType::U8 => "U8",
            DType::I8 => "I8",
            DType::F8E5M2 => "F8_E5M2",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E8M0 => "F8_E8M0",
            DType::F8E4M3Fnuz => "F8_E4M3FNUZ",
            DType::F8E5M2Fnuz => "F8_E5M2FNUZ",
            DType::I16 => "I16",
            DType::U16 => "U16",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::U32 => "U32",
            DType::F32 => "F32",
            DType::C64 => "C64",
            DType::F64 => "F64",
            DType::I64 => "I64",
            DType::U64 => "U64",
        }
    }

    /// Whether elements are integers (booleans included): token ids and masks.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DType::Bool
                | DType::U8
                | DType::I8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    }

    fn to_safetensors(self) -> Dtype {
        match self {
            DType::Bool => Dtype::BOOL,
            DType::F4 => Dtype::F4,
            DType::F6E2M3 => Dtype::F6_E2M3,
            DType::F6E3M2 => Dtype::F6_E3M2,
            DType::U8 => Dtype::U8,
            DType::I8 => Dtype::I8,
            DType::F8E5M2 => Dtype::F8_E5M2,
            DType::F8E4M3 => Dtype::F8_E4M3,
            DType::F8E8M0 => Dtype::F8_E8M0,
            DType::F8E4M3Fnuz => Dtype::F8_E4M3FNUZ,
            DType::F8E5M2Fnuz => Dtype::F8_E5M2FNUZ,
            DType::I16 => Dtype::I16,
            DType::U16 => Dtype::U16,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
            DType::I32 => Dtype::I32,
            DType::U32 => Dtype::U32,
            DType::F32 => Dtype::F32,
            DType::C64 => Dtype::C64,
            DType::F64 => Dtype::F64,
            DType::I64 => Dtype::I64,
            DType::U64 => Dtype::U64,
        }
    }

    fn from_safetensors(dtype: Dtype) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.to_safetensors() == dtype)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One element of a dtype as `f64`. `None` for what has no single real value: complex numbers
/// and the packed sub-byte floats.
fn element_f64(dtype: DType, b: &[u8]) -> Option<f64> {
    let a = |n: usize| -> Option<[u8; 8]> {
        let mut out = [0u8; 8];
        out[..n].copy_from_slice(b.get(..n)?);
        Some(out)
    };
    Some(match dtype {
        DType::Bool => f64::from(u8::from(*b.first()? != 0)),
        DType::U8 => f64::from(*b.first()?),
        DType::I8 => f64::from(*b.first()? as i8),
        DType::I16 => f64::from(i16::from_le_bytes([*b.first()?, *b.get(1)?])),
        DType::U16 => f64::from(u16::from_le_bytes([*b.first()?, *b.get(1)?])),
        DType::F16 => half::f16::from_le_bytes([*b.first()?, *b.get(1)?]).to_f64(),
        DType::BF16 => half::bf16::from_le_bytes([*b.first()?, *b.get(1)?]).to_f64(),
        DType::I32 => f64::from(i32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::U32 => f64::from(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::F32 => f64::from(f32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::F64 => f64::from_le_bytes(a(8)?),
        DType::I64 => i64::from_le_bytes(a(8)?) as f64,
        DType::U64 => u64::from_le_bytes(a(8)?) as f64,
        DType::F8E4M3 => f8_value(*b.first()?, 3, 7, F8Kind::Fn),
        DType::F8E5M2 => f8_value(*b.first()?, 2, 15, F8Kind::Ieee),
        DType::F8E4M3Fnuz => f8_value(*b.first()?, 3, 8, F8Kind::Fnuz),
        DType::F8E5M2Fnuz => f8_value(*b.first()?, 2, 16, F8Kind::Fnuz),
        DType::F8E8M0 => match *b.first()? {
            0xff => f64::NAN,
            e => 2f64.powi(i32::from(e) - 127),
        },
        DType::F4 | DType::F6E2M3 | DType::F6E3M2 | DType::C64 => return None,
    })
}

/// How an 8-bit float spends its special encodings.
#[derive(Clone, Copy)]
enum F8Kind {
    /// IEEE style: the top exponent holds infinities and NaNs (E5M2).
    Ieee,
    /// "Finite" (E4M3FN): no infinities, only all-ones is NaN.
    Fn,
    /// "Finite, unsigned zero" (FNUZ): `0x80` is the only NaN, no infinities, no -0.
    Fnuz,
}

fn f8_value(byte: u8, mant_bits: u32, bias: i32, kind: F8Kind) -> f64 {
    let exp_bits = 7 - mant_bits;
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((byte >> mant_bits) & ((1 << exp_bits) - 1) as u8);
    let m = f64::from(byte & ((1 << mant_bits) - 1) as u8);
    let scale = f64::from(1u32 << mant_bits);
    let max_e = (1 << exp_bits) - 1;
    match kind {
        F8Kind::Fnuz if byte == 0x80 => return f64::NAN,
        F8Kind::Fn if byte & 0x7f == 0x7f => return f64::NAN,
        F8Kind::Ieee if e == max_e => {
            return if m == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        _ => {}
    }
    if e == 0 {
        sign * (m / scale) * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + m / scale) * 2f64.powi(e - bias)
    }
}

/// A dense tensor: little-endian element bytes in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

/// Number of elements of `shape`, or `None` on overflow (a hostile header can claim anything).
fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Values as their little-endian bytes, one allocation of the exact size (the data of a
/// tensor built from a slice).
pub fn le_bytes<T, const N: usize>(values: &[T], bytes_of: impl Fn(&T) -> [u8; N]) -> Bytes {
    let mut data = Vec::with_capacity(values.len() * N);
    for v in values {
        data.extend_from_slice(&bytes_of(v));
    }
    Bytes::from(data)
}

impl Tensor {
    /// A tensor whose byte length is checked against its dtype and shape.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Bytes) -> Result<Tensor, WireError> {
        let t = Tensor { dtype, shape, data };
        t.check_len()?;
        Ok(t)
    }

    pub(crate) fn numel(&self) -> usize {
        checked_numel(&self.shape).unwrap_or(usize::MAX)
    }

    /// Bytes the data must have for this dtype and shape.
    pub(crate) fn expected_len(&self) -> Option<usize> {
        self.dtype.byte_len(checked_numel(&self.shape)?)
    }

    fn check_len(&self) -> Result<(), WireError> {
        match self.expected_len() {
            Some(n) if n == self.data.len() => Ok(()),
            Some(n) => Err(WireError::Encode(format!(
                "{} tensor of shape {:?} needs {n} bytes, got {}",
                self.dtype,
                self.shape,
                self.data.len()
            ))),
            None => Err(WireError::Encode(format!(
                "{} tensor of shape {:?} overflows the address space",
                self.dtype, self.shape
            ))),
        }
    }

    fn from_le<const N: usize, T>(
        dtype: DType,
        shape: Vec<usize>,
        values: &[T],
        to_bytes: impl Fn(&T) -> [u8; N],
    ) -> Result<Tensor, WireError> {
        Tensor::new(dtype, shape, le_bytes(values, to_bytes))
    }

    pub fn from_f32(shape: impl Into<Vec<usize>>, values: &[f32]) -> Result<Tensor, WireError> {
        Self::from_le(DType::F32, shape.into(), values, |v| v.to_le_bytes())
    }

    /// An F32 slice stored as BF16 (round to nearest even), the dtype verl ships log-probs in.
    pub fn from_f32_as_bf16(
        shape: impl Into<Vec<usize>>,
        values: &[f32],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::BF16, shape.into(), values, |v| {
            half::bf16::from_f32(*v).to_le_bytes()
        })
    }

    #[cfg(test)]
    pub(crate) fn from_f64(
        shape: impl Into<Vec<usize>>,
        values: &[f64],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::F64, shape.into(), values, |v| v.to_le_bytes())
    }

    pub fn from_i64(shape: impl Into<Vec<usize>>, values: &[i64]) -> Result<Tensor, WireError> {
        Self::from_le(DType::I64, shape.into(), values, |v| v.to_le_bytes())
    }

    #[cfg(test)]
    pub(crate) fn from_i32(
        shape: impl Into<Vec<usize>>,
        values: &[i32],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::I32, shape.into(), values, |v| v.to_le_bytes())
    }

    #[cfg(test)]
    pub(crate) fn from_bool(
        shape: impl Into<Vec<usize>>,
        values: &[bool],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::Bool, shape.into(), values, |v| [u8::from(*v)])
    }

    /// Every element as f32, whatever the dtype (integers and booleans convert by value, F64
    /// rounds; complex and packed sub-byte elements, which have no single real value, read as
    /// NaN). Trailing bytes that do not make a whole element are ignored.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let d = &self.data[..];
        match self.dtype {
            DType::F32 => chunks::<4, _>(d, f32::from_le_bytes),
            DType::BF16 => chunks::<2, _>(d, |b| half::bf16::from_le_bytes(b).to_f32()),
            dt => d
                .chunks_exact(dt.size())
                .map(|c| element_f64(dt, c).unwrap_or(f64::NAN) as f32)
                .collect(),
        }
    }

    /// Every element as f64; an error for complex and packed sub-byte dtypes, which no route
    /// computes with (the real server's torch code would fail on them too).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>, WireError> {
        let dt = self.dtype;
        self.data
            .chunks_exact(dt.size())
            .map(|c| {
                element_f64(dt, c).ok_or_else(|| {
                    WireError::Tree(format!(
                        "cannot compute with a {dt} tensor of shape {:?}: its elements are not real numbers",
                        self.shape
                    ))
                })
            })
            .collect()
    }

    /// Every element as i64; only integer and boolean tensors qualify (a float tensor here is
    /// a caller reading the wrong field, not something to round silently).
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, WireError> {
        let d = &self.data[..];
        let not_int = || {
            WireError::Tree(format!(
                "expected an integer tensor, got {} of shape {:?}",
                self.dtype, self.shape
            ))
        };
        Ok(match self.dtype {
            DType::I64 => chunks::<8, _>(d, i64::from_le_bytes),
            DType::I32 => chunks::<4, _>(d, |b| i64::from(i32::from_le_bytes(b))),
            DType::U32 => chunks::<4, _>(d, |b| i64::from(u32::from_le_bytes(b))),
            DType::I16 => chunks::<2, _>(d, |b| i64::from(i16::from_le_bytes(b))),
            DType::U16 => chunks::<2, _>(d, |b| i64::from(u16::from_le_bytes(b))),
            DType::U8 => d.iter().map(|&b| i64::from(b)).collect(),
            DType::I8 => d.iter().map(|&b| i64::from(b as i8)).collect(),
            DType::Bool => d.iter().map(|&b| i64::from(b != 0)).collect(),
            DType::U64 => chunks::<8, _>(d, u64::from_le_bytes)
                .into_iter()
                .map(|v| i64::try_from(v).map_err(|_| not_int()))
                .collect::<Result<_, _>>()?,
            _ => return Err(not_int()),
        })
    }

    /// The value of a one-element tensor (a 0-d tensor where a number is expected) as JSON:
    /// an integer for integer dtypes, `true`/`false` for BOOL, a float otherwise (non-finite
    /// ones as [`pyjson::float`] writes them).
    pub(crate) fn scalar_json(&self) -> Option<Value> {
        if self.numel() != 1 {
            return None;
        }
        match self.dtype {
            DType::Bool => Some(Value::Bool(self.data.first().copied()? != 0)),
            DType::U64 => {
                let v = u64::from_le_bytes(self.data.get(..8)?.try_into().ok()?);
                Some(Value::from(v))
            }
            dt if dt.is_integer() => Some(Value::from(*self.to_i64_vec().ok()?.first()?)),
            dt => Some(pyjson::float(element_f64(dt, &self.data)?)),
        }
    }

    /// `{"dtype": "BF16", "shape": [B, S]}`: what logs show of a tensor.
    pub(crate) fn summary(&self) -> Value {
        serde_json::json!({"dtype": self.dtype.name(), "shape": self.shape})
    }
}

fn chunks<const N: usize, T>(d: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    d.chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}

/// A node of the `dss` tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `["t", key]`; `scalar` is `["t", key, {"scalar": true}]` (a 0-dim tensor stored as `[1]`).
    Tensor { tensor: Tensor, scalar: bool },
    /// `["j", value]`: JSON with no tensor inside. Non-finite floats written by Python
    /// (`NaN`, `Infinity`) are `{"$float": "NaN"}` objects here (see [`super::pyjson`]), never
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
    /// a non-finite float is `{"$float": "NaN"}` (see [`super::pyjson`]).
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
pub(crate) const TUPLE_KEY: &str = "$tuple";

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

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Bytes that are not a safetensors container and start like a pickle or a ZIP
    /// (`torch.save`) file. The wording is the real codec's.
    #[error("refusing to deserialize a legacy pickle/torch.save payload; the peer must use the DSSST1 safetensors wire protocol")]
    LegacyPayload,
    /// The container does not parse (the real codec's wording wraps the inner error).
    #[error("not a valid DSSST1 safetensors payload: {0}")]
    Invalid(String),
    /// The container parses, but its `dss` document or tree is wrong.
    #[error("invalid DSSST1 tree: {0}")]
    Tree(String),
    #[error("cannot encode DSSST1 frame: {0}")]
    Encode(String),
}

fn invalid(msg: impl Into<String>) -> WireError {
    WireError::Tree(msg.into())
}

/// The error for a container that failed to parse: the legacy refusal when the bytes carry a
/// pickle or ZIP signature, else the wrapped inner error.
fn refuse(buf: &[u8], inner: impl Into<String>) -> WireError {
    if is_legacy_payload(buf) {
        WireError::LegacyPayload
    } else {
        WireError::Invalid(inner.into())
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

struct Collected<'a> {
    key: String,
    tensor: &'a Tensor,
    stored_shape: Vec<usize>,
}

fn child_path(path: &str, segment: &str) -> String {
    if path.is_empty() {
        segment.to_string()
    } else {
        format!("{path}.{segment}")
    }
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
pub(crate) fn encode_with_op(root: &Node, op: Option<&str>) -> Result<Vec<u8>, WireError> {
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

// ---------------------------------------------------------------------------------------------
// Decoding

/// Whether `buf` starts like a pickle (protocol 2..5) or a ZIP (`torch.save`) file. Only
/// consulted once the container has failed to parse: a frame whose header length happens to
/// begin with the same bytes (0x0280 = 640 does) is a frame.
pub(crate) fn is_legacy_payload(buf: &[u8]) -> bool {
    matches!(buf, [0x80, 2..=5, ..]) || buf.starts_with(b"PK\x03\x04")
}

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

fn dss_tree(
    metadata: Option<&std::collections::HashMap<String, String>>,
) -> Result<Value, WireError> {
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

/// The byte length of the whole frame its header announces: the header extent plus the end of
/// the last tensor's `data_offsets` (`prefix` holds at least [`header_extent`] bytes). A body
/// of another length is cut short or carries trailing bytes, and does not decode.
pub(crate) fn frame_len(prefix: &[u8]) -> Result<usize, WireError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(header: &str, data: &[u8]) -> Bytes {
        let mut h = header.as_bytes().to_vec();
        h.resize(h.len().next_multiple_of(8), b' ');
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        Bytes::from(out)
    }

    fn sample() -> Node {
        Node::dict([
            (
                "batch",
                Node::dict([
                    (
                        "input_ids",
                        Node::from(Tensor::from_i64([2, 2], &[1, 2, 3, 4]).unwrap()),
                    ),
                    (
                        "mask",
                        Node::from(Tensor::from_bool([2, 2], &[true, false, true, true]).unwrap()),
                    ),
                ]),
            ),
            (
                "meta",
                Node::json(serde_json::json!({"temperature": 1.0, "n": 2})),
            ),
            (
                "loss",
                Node::scalar(Tensor::from_f32(vec![], &[0.5]).unwrap()),
            ),
        ])
    }

    #[test]
    fn round_trip_keeps_tree_and_borrows_data() {
        let root = sample();
        let bytes = Bytes::from(encode(&root).unwrap());
        let back = decode(bytes.clone()).unwrap();
        assert_eq!(back, root);
        let ids = back
            .get("batch")
            .and_then(|b| b.get("input_ids"))
            .and_then(Node::as_tensor);
        let ids = ids.unwrap();
        assert_eq!(ids.to_i64_vec().unwrap(), vec![1, 2, 3, 4]);
        // Zero copy: the tensor bytes live inside the input buffer.
        let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
        assert!(range.contains(&(ids.data.as_ptr() as usize)));
        assert_eq!(back.get_json("meta").unwrap()["n"], 2);
        assert_eq!(
            back.get("loss").unwrap().as_tensor().unwrap().shape,
            Vec::<usize>::new()
        );
    }

    #[test]
    fn header_is_padded_and_sorted_like_python() {
        let bytes = encode(&sample()).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        let keys: Vec<_> = header.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            ["__metadata__", "batch.input_ids", "loss", "batch.mask"]
        );
    }

    #[test]
    fn tensor_free_frame_carries_placeholder_which_decode_drops() {
        let root = Node::json(serde_json::json!({"prompts": ["a", "b"]}));
        let bytes = encode(&root).unwrap();
        assert!(String::from_utf8_lossy(&bytes)
            .contains("\"__dss_empty__\":{\"dtype\":\"U8\",\"shape\":[1]"));
        assert_eq!(decode(Bytes::from(bytes)).unwrap(), root);
    }

    #[test]
    fn dict_without_tensor_is_written_as_json() {
        let root = Node::dict([
            ("a", Node::json(1)),
            ("b", Node::List(vec![Node::json("x")])),
        ]);
        let back = decode(Bytes::from(encode(&root).unwrap())).unwrap();
        assert_eq!(back, Node::json(serde_json::json!({"a": 1, "b": ["x"]})));
    }

    #[test]
    fn tuple_stays_tuple_and_root_tensor_uses_root_key() {
        let t = Tensor::from_f32([2], &[1.0, 2.0]).unwrap();
        let root = Node::Tuple(vec![Node::json(1), Node::json("a")]);
        assert_eq!(decode(Bytes::from(encode(&root).unwrap())).unwrap(), root);
        let bytes = encode(&Node::from(t.clone())).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains("\"__root__\""));
        assert_eq!(decode(Bytes::from(bytes)).unwrap(), Node::from(t));
    }

    #[test]
    fn encode_rejects_bad_lengths_and_colliding_keys() {
        let bad = Tensor {
            dtype: DType::F32,
            shape: vec![3],
            data: Bytes::from_static(&[0; 8]),
        };
        let e = encode(&Node::from(bad)).unwrap_err().to_string();
        assert!(e.contains("needs 12 bytes"), "{e}");
        let t = || Node::from(Tensor::from_u8_for_test());
        let root = Node::dict([("a.b", t()), ("a", Node::dict([("b", t())]))]);
        let e = encode(&root).unwrap_err().to_string();
        assert!(e.contains("'a.b'"), "{e}");
        let e = Tensor::from_f32([2, 2], &[1.0]).unwrap_err().to_string();
        assert!(e.contains("needs 16 bytes"), "{e}");
    }

    impl Tensor {
        fn from_u8_for_test() -> Tensor {
            Tensor::new(DType::U8, vec![1], Bytes::from_static(&[7])).unwrap()
        }
    }

    #[test]
    fn non_finite_floats_from_python_stay_non_finite_both_ways() {
        let dss = r#"{"v": "DSSST1", "tree": ["j", {"a": NaN, "b": Infinity, "c": -Infinity, "d": 1.5, "e": null, "0": "int key"}]}"#;
        let header = serde_json::json!({
            "__metadata__": {"dss": dss},
            "__dss_empty__": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        })
        .to_string();
        let f = frame(&header, &[0]);
        let node = decode(f.clone()).unwrap();
        let v = node.to_json().unwrap();
        assert!(pyjson::as_f64(&v["a"]).unwrap().is_nan());
        assert_eq!(pyjson::as_f64(&v["b"]), Some(f64::INFINITY));
        assert_eq!(pyjson::as_f64(&v["c"]), Some(f64::NEG_INFINITY));
        assert_eq!(v["e"], Value::Null);
        assert_ne!(v["a"], Value::Null, "a NaN must not read as null");
        // Written back as the same literals, byte for byte.
        assert_eq!(encode(&node).unwrap(), f.to_vec());
        // A NaN loss built in Rust travels as the literal too.
        let out = encode(&Node::json(
            serde_json::json!({"avg_loss": pyjson::float(f64::NAN)}),
        ))
        .unwrap();
        assert!(String::from_utf8_lossy(&out).contains(r#"\"avg_loss\": NaN"#));
    }

    #[test]
    fn dss_is_written_as_python_json_dumps_writes_it() {
        let root = Node::dict([
            (
                "meta",
                Node::json(serde_json::json!({"lr": 1e-6, "t": 1.0, "name": "é"})),
            ),
            ("x", Node::from(Tensor::from_i64([1], &[3]).unwrap())),
        ]);
        let bytes = encode(&root).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains(r#""dss":"{\"v\": \"DSSST1\", \"tree\": [\"d\", [[\"meta\", [\"j\", {\"lr\": 1e-06, \"t\": 1.0, \"name\": \"\\u00e9\"}]], [\"x\", [\"t\", \"x\"]]]]}""#),
            "{text}"
        );
    }

    #[test]
    fn every_safetensors_dtype_decodes_and_reads_by_value() {
        for dt in DType::ALL {
            let numel = if dt.bits() < 8 { 8 } else { 2 };
            let t = Tensor::new(
                dt,
                vec![numel],
                Bytes::from(vec![0x38; dt.byte_len(numel).unwrap()]),
            )
            .unwrap();
            let back = decode(Bytes::from(encode(&Node::from(t.clone())).unwrap())).unwrap();
            assert_eq!(back, Node::from(t), "{dt}");
        }
        let i8t = Tensor::new(DType::I8, vec![2], Bytes::from_static(&[0xff, 0x05])).unwrap();
        assert_eq!(i8t.to_i64_vec().unwrap(), vec![-1, 5]);
        // 0x38 = 0 0111 000 in E4M3 (bias 7) is 1.0; 0x7f is NaN; 0xb8 is -1.0.
        let f8 = Tensor::new(
            DType::F8E4M3,
            vec![3],
            Bytes::from_static(&[0x38, 0x7f, 0xb8]),
        )
        .unwrap();
        let v = f8.to_f64_vec().unwrap();
        assert_eq!((v[0], v[2]), (1.0, -1.0));
        assert!(v[1].is_nan());
        // 0x3c = 0 01111 00 in E5M2 (bias 15) is 1.0; 0x7c is +inf.
        let e5 = Tensor::new(DType::F8E5M2, vec![2], Bytes::from_static(&[0x3c, 0x7c])).unwrap();
        assert_eq!(e5.to_f64_vec().unwrap(), vec![1.0, f64::INFINITY]);
        let c = Tensor::new(DType::C64, vec![1], Bytes::from(vec![0; 8])).unwrap();
        assert!(c
            .to_f64_vec()
            .unwrap_err()
            .to_string()
            .contains("not real numbers"));
    }

    #[test]
    fn a_zero_dim_tensor_reads_as_a_number() {
        let n = Node::scalar(Tensor::from_i64(vec![], &[37]).unwrap());
        assert_eq!(n.to_values(), serde_json::json!(37));
        let meta = Node::dict([
            ("batch_num_tokens", n),
            ("rollout_is_weights", Node::json(Value::Null)),
            (
                "w",
                Node::from(Tensor::from_f32([2], &[0.5, f32::NAN]).unwrap()),
            ),
        ]);
        assert_eq!(
            meta.to_values(),
            serde_json::json!({"batch_num_tokens": 37, "rollout_is_weights": null, "w": [0.5, {"$float": "NaN"}]})
        );
    }

    #[test]
    fn legacy_refusal_uses_the_real_wording_and_only_after_the_parse_failed() {
        let e = decode(Bytes::from_static(b"\x80\x02}q\x00.garbage")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "refusing to deserialize a legacy pickle/torch.save payload; the peer must use the DSSST1 safetensors wire protocol"
        );
        let e = decode(Bytes::from_static(b"garbage!garbage!")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not a valid DSSST1 safetensors payload: "),
            "{e}"
        );
        // A too-large length is a container error, wrapped in the same wording.
        let e = decode(Bytes::copy_from_slice(&u64::MAX.to_le_bytes())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not a valid DSSST1 safetensors payload: header of"),
            "{e}"
        );
    }

    #[test]
    fn refuses_legacy_payloads() {
        for bytes in [
            &b"\x80\x02}q\x00."[..],
            b"\x80\x05\x95",
            b"PK\x03\x04rest of a zip file",
            b"\x80\x04",
        ] {
            let e = decode(Bytes::copy_from_slice(bytes)).unwrap_err();
            assert!(matches!(e, WireError::LegacyPayload), "{bytes:?}");
            assert!(e.to_string().contains("legacy pickle"));
        }
    }

    #[test]
    fn frame_whose_length_looks_like_pickle_is_still_a_frame() {
        // Header length 0x0280 = 640 starts with the bytes of a protocol-2 pickle.
        let dss = serde_json::json!({"v": "DSSST1", "tree": ["j", "x".repeat(500)]}).to_string();
        let mut header = serde_json::json!({
            "__metadata__": {"dss": dss},
            "__dss_empty__": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        })
        .to_string();
        header.push_str(&" ".repeat(640 - header.len()));
        let f = frame(&header, &[0]);
        assert_eq!(&f[..2], &[0x80, 0x02]);
        assert_eq!(decode(f.clone()).unwrap(), Node::json("x".repeat(500)));
        assert_eq!(header_extent(&f[..8]).unwrap(), 648);
        assert_eq!(
            header_summary(&f[..648]).unwrap(),
            serde_json::json!("x".repeat(500))
        );
    }

    #[test]
    fn refuses_garbage_with_a_reason() {
        let ok_header = serde_json::json!({
            "__metadata__": {"dss": r#"{"v":"DSSST1","tree":["t","x"]}"#},
            "x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        })
        .to_string();
        let cases: Vec<(Bytes, &str)> = vec![
            (Bytes::from_static(b"abc"), "shorter than the 8-byte"),
            (Bytes::from_static(&[0; 16]), "header length is 0"),
            (
                Bytes::copy_from_slice(&u64::MAX.to_le_bytes()),
                "exceeds the 64 MiB",
            ),
            (
                Bytes::copy_from_slice(&[&64u64.to_le_bytes()[..], &b"{}"[..]].concat()),
                "runs past the end",
            ),
            (
                frame(&ok_header.replace("DSSST1", "DSSST2"), &[0]),
                "dss version is \"DSSST2\"",
            ),
            (
                frame(&ok_header.replace("\"dss\"", "\"other\""), &[0]),
                "no 'dss'",
            ),
            (
                frame(
                    &ok_header.replace("[\\\"t\\\",\\\"x\\\"]", "[\\\"t\\\",\\\"y\\\"]"),
                    &[0],
                ),
                "tensor 'y'",
            ),
            (frame(&ok_header, &[0, 0]), "safetensors container"),
            (
                frame("not json", b""),
                "not a valid DSSST1 safetensors payload",
            ),
            (
                frame(
                    &ok_header.replace("[\\\"t\\\",\\\"x\\\"]", "[\\\"q\\\",1]"),
                    &[0],
                ),
                "unknown tree tag",
            ),
            (
                frame(&ok_header.replace("\"U8\"", "\"Q8\""), &[0]),
                "safetensors container",
            ),
        ];
        for (bytes, want) in cases {
            let e = decode(bytes).unwrap_err().to_string();
            assert!(e.contains(want), "want {want:?} in {e:?}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = format!(
            "{{\"v\":\"DSSST1\",\"tree\":[\"j\",{}NaN{}]}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let header = serde_json::json!({
            "__metadata__": {"dss": deep},
            "__dss_empty__": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        })
        .to_string();
        let e = decode(frame(&header, &[0])).unwrap_err().to_string();
        assert!(e.contains("nests deeper"), "{e}");
    }

    #[test]
    fn header_summary_needs_only_the_header() {
        let bytes = encode(&sample()).unwrap();
        let extent = header_extent(&bytes).unwrap();
        let s = header_summary(&bytes[..extent]).unwrap();
        assert_eq!(s, sample().summary());
        assert_eq!(
            s["batch"]["input_ids"],
            serde_json::json!({"dtype": "I64", "shape": [2, 2]})
        );
        assert_eq!(s["meta"]["temperature"], 1.0);
        let e = header_summary(&bytes[..extent - 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut short"), "{e}");
    }

    #[test]
    fn conversions() {
        let t = Tensor::from_f32_as_bf16([3], &[1.0, -2.5, 0.1]).unwrap();
        let v = t.to_f32_vec();
        assert_eq!(&v[..2], &[1.0, -2.5]);
        assert!((v[2] - 0.1).abs() < 1e-3);
        assert!(t
            .to_i64_vec()
            .unwrap_err()
            .to_string()
            .contains("integer tensor"));
        let b = Tensor::from_bool([2], &[true, false]).unwrap();
        assert_eq!(b.to_i64_vec().unwrap(), vec![1, 0]);
        assert_eq!(b.to_f32_vec(), vec![1.0, 0.0]);
        assert_eq!(
            Tensor::from_i32([1], &[-3]).unwrap().to_f32_vec(),
            vec![-3.0]
        );
        assert_eq!(
            Tensor::from_f64([1], &[2.0]).unwrap().to_f32_vec(),
            vec![2.0]
        );
        let h = Tensor::new(
            DType::F16,
            vec![1],
            Bytes::copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes()),
        )
        .unwrap();
        assert_eq!(h.to_f32_vec(), vec![0.5]);
        assert_eq!(h.numel(), 1);
    }
}
