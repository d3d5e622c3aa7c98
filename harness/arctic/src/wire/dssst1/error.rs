//! [`WireError`] and the refusals of a frame that does not parse (the legacy pickle/ZIP check).

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
    /// A byte-chunk envelope (`request_chunk` in the `op` metadata) that cannot be unwrapped.
    #[error("DSSST1 byte chunk envelope: {0}")]
    Chunk(String),
}

pub(super) fn invalid(msg: impl Into<String>) -> WireError {
    WireError::Tree(msg.into())
}

/// The error for a container that failed to parse: the legacy refusal when the bytes carry a
/// pickle or ZIP signature, else the wrapped inner error.
pub(super) fn refuse(buf: &[u8], inner: impl Into<String>) -> WireError {
    if is_legacy_payload(buf) {
        WireError::LegacyPayload
    } else {
        WireError::Invalid(inner.into())
    }
}

/// Whether `buf` starts like a pickle (protocol 2..5) or a ZIP (`torch.save`) file. Only
/// consulted once the container has failed to parse: a frame whose header length happens to
/// begin with the same bytes (0x0280 = 640 does) is a frame.
fn is_legacy_payload(buf: &[u8]) -> bool {
    matches!(buf, [0x80, 2..=5, ..]) || buf.starts_with(b"PK\x03\x04")
}
