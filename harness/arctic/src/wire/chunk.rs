//! The byte-chunk envelope of `arctic_platform.wire` (`encode_byte_chunks`): a DSSST1 frame
//! whose tree is `{"payload": <1-D U8 tensor>}` and whose `op` metadata holds a
//! `request_chunk` (or `result_chunk`) descriptor `{chunk_idx, total_chunks, frame_sha256,
//! frame_size_bytes, chunk_group_id?, operation?}`; the payloads of a group, joined in
//! `chunk_idx` order, are the original frame.
//!
//! Release 0.1.4 added `force_chunk`: the envelope is written even around a frame that fits in
//! one request (its hosted transport always wraps `/forward-backward`, whose group id is the
//! idempotency key). The on-prem routes take a whole frame in one request, so what they can be
//! sent is a group of ONE chunk: [`unwrap_request`] opens it (checking size and sha256 as the
//! real `decode_byte_chunks` does) and refuses a group of several, which only the hosted
//! protocol reassembles across requests.

use bytes::Bytes;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::dssst1::{decode, encode_with_op, op_metadata, DType, Node, Tensor, WireError};
use super::pyjson;
use crate::util::hex;

pub const REQUEST_CHUNK_KEY: &str = "request_chunk";
pub const RESULT_CHUNK_KEY: &str = "result_chunk";
const PAYLOAD_KEY: &str = "payload";

fn chunk_err(msg: impl Into<String>) -> WireError {
    WireError::Chunk(msg.into())
}

/// `frame` in a single-chunk request envelope, as 0.1.4's `encode_byte_chunks(frame,
/// kind="request", operation=..., chunk_group_id=..., force_chunk=True)` writes a frame that
/// fits: the descriptor's keys in its order, the `op` string in `json.dumps` form.
pub fn request_envelope(
    frame: &[u8],
    operation: Option<&str>,
    group_id: &str,
) -> Result<Vec<u8>, WireError> {
    let mut desc = Map::new();
    desc.insert("chunk_idx".into(), json!(0));
    desc.insert("total_chunks".into(), json!(1));
    desc.insert(
        "frame_sha256".into(),
        json!(hex(&Sha256::digest(frame)[..])),
    );
    desc.insert("frame_size_bytes".into(), json!(frame.len()));
    desc.insert("chunk_group_id".into(), json!(group_id));
    if let Some(op) = operation {
        desc.insert("operation".into(), json!(op));
    }
    let op = pyjson::to_python(&json!({ REQUEST_CHUNK_KEY: Value::Object(desc) }));
    let payload = Node::Dict(vec![(
        PAYLOAD_KEY.to_string(),
        Node::Tensor {
            tensor: Tensor {
                dtype: DType::U8,
                shape: vec![frame.len()],
                data: Bytes::copy_from_slice(frame),
            },
            scalar: false,
        },
    )]);
    encode_with_op(&payload, Some(&op))
}

fn desc_u64(desc: &Map<String, Value>, key: &str) -> Result<u64, WireError> {
    desc.get(key).and_then(Value::as_u64).ok_or_else(|| {
        chunk_err(format!(
            "request_chunk.{key} must be a non-negative integer, got {}",
            desc.get(key)
                .map_or("nothing".to_string(), Value::to_string)
        ))
    })
}

/// The frame a request body carries: the body itself, or, when its `op` metadata holds a
/// `request_chunk` descriptor, the frame inside that single-chunk envelope (its size and sha256
/// checked). A group of several chunks, a result chunk, or a payload that is not a 1-D U8
/// tensor is refused, naming what was wrong.
pub fn unwrap_request(buf: Bytes) -> Result<Bytes, WireError> {
    let Some(op) = op_metadata(&buf)? else {
        return Ok(buf);
    };
    if op.get(RESULT_CHUNK_KEY).is_some() {
        return Err(chunk_err(
            "the request carries a result_chunk descriptor: a request's envelope is a request_chunk",
        ));
    }
    let Some(desc) = op.get(REQUEST_CHUNK_KEY) else {
        return Ok(buf);
    };
    let desc = desc.as_object().ok_or_else(|| {
        chunk_err(format!(
            "the request_chunk descriptor must be an object, got {desc}"
        ))
    })?;
    let total = desc_u64(desc, "total_chunks")?;
    let idx = desc_u64(desc, "chunk_idx")?;
    if total != 1 {
        return Err(chunk_err(format!(
            "chunk {idx} of a group of {total}: an on-prem route takes the whole frame in one request, so only a single-chunk envelope (force_chunk) is unwrapped"
        )));
    }
    if idx != 0 {
        return Err(chunk_err(format!(
            "chunk_idx {idx} is out of range for a group of 1"
        )));
    }
    let size = desc_u64(desc, "frame_size_bytes")?;
    let want_sha = desc
        .get("frame_sha256")
        .and_then(Value::as_str)
        .ok_or_else(|| chunk_err("request_chunk.frame_sha256 must be a hex string"))?;
    let payload = match decode(buf)? {
        Node::Dict(entries) => entries.into_iter().find(|(k, _)| k == PAYLOAD_KEY),
        _ => None,
    };
    let data = match payload {
        Some((_, Node::Tensor { tensor, .. }))
            if tensor.dtype == DType::U8 && tensor.shape.len() == 1 =>
        {
            tensor.data
        }
        Some((_, Node::Tensor { tensor, .. })) => {
            return Err(chunk_err(format!(
                "the payload must be a 1-D U8 tensor, got {} of shape {:?}",
                tensor.dtype.name(),
                tensor.shape
            )))
        }
        _ => return Err(chunk_err("the envelope holds no `payload` tensor")),
    };
    if data.len() as u64 != size {
        return Err(chunk_err(format!(
            "reassembled frame size mismatch: frame_size_bytes says {size}, the payload holds {}",
            data.len()
        )));
    }
    let got_sha = hex(&Sha256::digest(&data)[..]);
    if !got_sha.eq_ignore_ascii_case(want_sha) {
        return Err(chunk_err(format!(
            "reassembled frame sha256 mismatch: frame_sha256 says {want_sha}, the payload's is {got_sha}"
        )));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::dssst1::encode;

    fn inner() -> Vec<u8> {
        encode(&Node::Json(json!({"batch": {}, "meta": {"x": 1}}))).unwrap()
    }

    fn with_desc(desc: Value) -> Bytes {
        let frame = inner();
        let payload = Node::Dict(vec![(
            "payload".into(),
            Node::Tensor {
                tensor: Tensor {
                    dtype: DType::U8,
                    shape: vec![frame.len()],
                    data: Bytes::from(frame),
                },
                scalar: false,
            },
        )]);
        let op = pyjson::to_python(&json!({ "request_chunk": desc }));
        Bytes::from(encode_with_op(&payload, Some(&op)).unwrap())
    }

    #[test]
    fn a_forced_single_chunk_envelope_unwraps_to_its_frame() {
        let frame = inner();
        let env = request_envelope(&frame, Some("fwd-bwd"), "g-1").unwrap();
        assert_ne!(env, frame);
        let op = op_metadata(&env).unwrap().unwrap();
        assert_eq!(op["request_chunk"]["total_chunks"], json!(1));
        assert_eq!(op["request_chunk"]["operation"], json!("fwd-bwd"));
        let out = unwrap_request(Bytes::from(env)).unwrap();
        assert_eq!(&out[..], &frame[..]);
        // A bare frame passes unchanged.
        assert_eq!(
            &unwrap_request(Bytes::from(frame.clone())).unwrap()[..],
            &frame[..]
        );
    }

    #[test]
    fn a_broken_envelope_is_refused_naming_what_is_wrong() {
        let frame = inner();
        let sha = hex(&Sha256::digest(&frame)[..]);
        let len = frame.len();
        let cases = [
            (
                json!({"chunk_idx": 0, "total_chunks": 2, "frame_sha256": sha, "frame_size_bytes": len}),
                "group of 2",
            ),
            (
                json!({"chunk_idx": 1, "total_chunks": 1, "frame_sha256": sha, "frame_size_bytes": len}),
                "chunk_idx 1",
            ),
            (
                json!({"chunk_idx": 0, "total_chunks": 1, "frame_sha256": "00", "frame_size_bytes": len}),
                "sha256 mismatch",
            ),
            (
                json!({"chunk_idx": 0, "total_chunks": 1, "frame_sha256": sha, "frame_size_bytes": len + 1}),
                "size mismatch",
            ),
            (
                json!({"chunk_idx": 0, "frame_sha256": sha, "frame_size_bytes": len}),
                "total_chunks",
            ),
        ];
        for (desc, needle) in cases {
            let e = unwrap_request(with_desc(desc.clone())).unwrap_err();
            assert!(
                matches!(e, WireError::Chunk(_)) && e.to_string().contains(needle),
                "{desc}: {e}"
            );
        }
        let result = pyjson::to_python(&json!({"result_chunk": {"chunk_idx": 0}}));
        let env = encode_with_op(&Node::Json(json!({})), Some(&result)).unwrap();
        let e = unwrap_request(Bytes::from(env)).unwrap_err();
        assert!(e.to_string().contains("result_chunk"), "{e}");
        let desc = json!({"chunk_idx": 0, "total_chunks": 1, "frame_sha256": sha, "frame_size_bytes": len});
        let op = pyjson::to_python(&json!({ "request_chunk": desc }));
        let no_payload = encode_with_op(&Node::Json(json!({"x": 1})), Some(&op)).unwrap();
        let e = unwrap_request(Bytes::from(no_payload)).unwrap_err();
        assert!(e.to_string().contains("payload"), "{e}");
    }
}
