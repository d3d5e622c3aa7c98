//! The scenario's `backend: {kind: torch, ...}` block. Defined without the `torch` feature so
//! every scenario validates on any build.

#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TorchSpec {}
