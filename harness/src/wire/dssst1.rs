//! DSSST1: a safetensors container whose `__metadata__.dss` holds a JSON tree that places the
//! tensors inside arbitrary JSON (see the project's reference on the frame).
//!
//! Decoding borrows tensor bytes from the input `Bytes` (no copy); encoding writes the header
//! once and copies each tensor once.

use bytes::Bytes;

/// Tensor element types the frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DType {
    F32,
    BF16,
    F16,
    F64,
    I64,
    I32,
    U8,
    #[serde(rename = "BOOL")]
    Bool,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::BF16 | DType::F16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// The safetensors name (`F32`, `BF16`, ..., `BOOL`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::BF16 => "BF16",
            DType::F16 => "F16",
            DType::F64 => "F64",
            DType::I64 => "I64",
            DType::I32 => "I32",
            DType::U8 => "U8",
            DType::Bool => "BOOL",
        }
    }
}

/// A dense tensor: little-endian element bytes in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

/// A node of the `dss` tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `["t", key]`; `scalar` is `["t", key, {"scalar": true}]` (a 0-dim tensor stored as `[1]`).
    Tensor { tensor: Tensor, scalar: bool },
    /// `["j", value]`: JSON with no tensor inside. Non-finite floats written by Python
    /// (`NaN`, `Infinity`) decode as JSON `null`.
    Json(serde_json::Value),
    /// `["d", [[k, node], ...]]`: an object holding at least one tensor; key order kept.
    Dict(Vec<(String, Node)>),
    /// `["l", [node, ...]]`: an array holding at least one tensor.
    List(Vec<Node>),
    /// `["u", [node, ...]]`: a tuple (always tagged `u`).
    Tuple(Vec<Node>),
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("legacy pickle/torch.save payload refused: only DSSST1 frames are accepted")]
    LegacyPayload,
    #[error("not a valid DSSST1 payload: {0}")]
    Invalid(String),
    #[error("DSSST1 header of {0} bytes exceeds the 64 MiB limit")]
    HeaderTooLarge(u64),
    #[error("cannot encode DSSST1 frame: {0}")]
    Encode(String),
}

/// Encode a tree as one DSSST1 frame.
pub fn encode(_root: &Node) -> Result<Vec<u8>, WireError> {
    unimplemented!("DSSST1 encode")
}

/// Decode one DSSST1 frame; tensor data borrows from `buf`.
pub fn decode(_buf: Bytes) -> Result<Node, WireError> {
    unimplemented!("DSSST1 decode")
}
