//! The Arctic RL wire: the DSSST1 binary frame and the HTTP API types.

pub mod api;
pub mod chunk;
pub mod digest;
pub mod dssst1;
pub mod pyjson;
pub mod runtime;
pub mod sp;

pub use dssst1::{decode, encode, DType, Node, Tensor, WireError};
