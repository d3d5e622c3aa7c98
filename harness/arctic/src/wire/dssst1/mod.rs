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
//!
//! By part: `dtype.rs` the element types, `tensor.rs` a tensor, `node.rs` the tree,
//! `encode.rs` and `decode.rs` the two directions, `error.rs` the errors and refusals.

mod decode;
mod dtype;
mod encode;
mod error;
mod node;
mod tensor;
#[cfg(test)]
mod tests;

pub use decode::frame_len;
pub use decode::{decode, header_extent, header_summary, op_metadata};
pub use dtype::DType;
pub use encode::{encode, encode_with_op};
pub use error::WireError;
pub use node::Node;
pub use tensor::{le_bytes, Tensor};

/// Format tag inside the `dss` document.
const FORMAT_VERSION: &str = "DSSST1";
/// Tensor key of a tensor that is the whole tree.
const ROOT_KEY: &str = "__root__";
/// Placeholder tensor of a frame that carries no tensor (safetensors needs at least one).
const EMPTY_KEY: &str = "__dss_empty__";
/// Largest header a reader accepts.
const MAX_HEADER_BYTES: u64 = 64 * 1024 * 1024;
