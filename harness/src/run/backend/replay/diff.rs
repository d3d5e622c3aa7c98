//! What a replay compares: a request reduced to the part that must not change between the
//! recorded run and the replayed one, and the first key where two such views differ.
//!
//! The view of a JSON body is the JSON itself; of a DSSST1 frame, its tree with every tensor
//! as `{"dtype", "shape"}` and every JSON value kept (the tensors' contents may differ: a
//! replay checks what the client sent, not the numbers a model produced). Paths are redacted
//! first (see [`redact`]), so a recording made in one checkout replays in another.

use serde_json::{Map, Value};

use rlharness_arctic::wire::dssst1;

/// What a redacted path becomes.
pub(crate) const REDACTED: &str = "<path>";

/// Does this string name a file on the recording machine? An absolute path (`/...`, `~/...`,
/// `C:\...`); `model_name` and `checkpoint_path` also count when relative (`./x`, `../x`).
fn looks_like_path(s: &str, key: Option<&str>) -> bool {
    let abs = (s.starts_with('/') && s.len() > 1)
        || s.starts_with("~/")
        || (s.len() > 2
            && s.as_bytes()[0].is_ascii_alphabetic()
            && s.as_bytes()[1] == b':'
            && matches!(s.as_bytes()[2], b'\\' | b'/'));
    let local = s.starts_with("./") || s.starts_with("../");
    match key {
        Some("checkpoint_path") => true,
        Some("model_name") => abs || local,
        _ => abs,
    }
}

/// Replace machine paths by [`REDACTED`]: every string under a `checkpoint_path` key,
/// `model_name` when it is a local path, and any string that is an absolute path.
pub(crate) fn redact(v: &mut Value) {
    redact_at(v, None);
}

fn redact_at(v: &mut Value, key: Option<&str>) {
    match v {
        Value::String(s) if looks_like_path(s, key) => *s = REDACTED.to_string(),
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                redact_at(child, Some(k.as_str()));
            }
        }
        Value::Array(a) => {
            for child in a {
                redact_at(child, key);
            }
        }
        _ => {}
    }
}

/// A binary request body that is no DSSST1 frame.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("not a readable DSSST1 frame: {0}")]
pub(crate) struct UnreadableFrame(String);

/// The comparable view of a request body: `Ok(Value::Null)` for none.
pub(crate) fn request_view(
    content_type: Option<&str>,
    bytes: &[u8],
) -> Result<Value, UnreadableFrame> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    let mut v = if content_type.is_some_and(|c| c.contains("application/octet-stream")) {
        dssst1::header_summary(bytes).map_err(|e| UnreadableFrame(e.to_string()))?
    } else {
        match rlharness_arctic::wire::api::parse_json_lenient(bytes) {
            Ok(v) => v,
            Err(_) => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        }
    };
    redact(&mut v);
    Ok(v)
}

/// One difference: where, and the two sides (`None`: the key is absent).
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    pub(crate) path: String,
    pub(crate) recorded: Option<Value>,
    pub(crate) got: Option<Value>,
}

fn show(v: &Option<Value>) -> String {
    match v {
        None => "<absent>".into(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 120 {
                let cut: String = s.chars().take(117).collect();
                format!("{cut}...")
            } else {
                s
            }
        }
    }
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "body"
        } else {
            &self.path
        };
        write!(
            f,
            "{path}: recorded {}, got {}",
            show(&self.recorded),
            show(&self.got)
        )
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A short array of scalars (a tensor shape, `betas`) is shown whole rather than by index.
fn small_scalar_array(a: &[Value]) -> bool {
    a.len() <= 8 && a.iter().all(|v| !v.is_object() && !v.is_array())
}

/// Every difference between `recorded` and `got` in document order (the recorded keys in
/// their order, then the keys only `got` has), at most `limit` of them.
pub(crate) fn differences(recorded: &Value, got: &Value, limit: usize) -> Vec<Difference> {
    let mut out = Vec::new();
    walk("", recorded, got, limit, &mut out);
    out
}

fn walk(path: &str, a: &Value, b: &Value, limit: usize, out: &mut Vec<Difference>) {
    if out.len() >= limit || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => walk_objects(path, x, y, limit, out),
        (Value::Array(x), Value::Array(y))
            if x.len() == y.len() && !(small_scalar_array(x) && small_scalar_array(y)) =>
        {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                walk(&format!("{path}[{i}]"), p, q, limit, out);
            }
        }
        _ => out.push(Difference {
            path: path.to_string(),
            recorded: Some(a.clone()),
            got: Some(b.clone()),
        }),
    }
}

fn walk_objects(
    path: &str,
    x: &Map<String, Value>,
    y: &Map<String, Value>,
    limit: usize,
    out: &mut Vec<Difference>,
) {
    for (k, p) in x {
        match y.get(k) {
            Some(q) => walk(&join(path, k), p, q, limit, out),
            None => out.push(Difference {
                path: join(path, k),
                recorded: Some(p.clone()),
                got: None,
            }),
        }
        if out.len() >= limit {
            return;
        }
    }
    for (k, q) in y {
        if !x.contains_key(k) {
            out.push(Difference {
                path: join(path, k),
                recorded: None,
                got: Some(q.clone()),
            });
            if out.len() >= limit {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlharness_arctic::wire::{encode, Node, Tensor};
    use serde_json::json;

    #[test]
    fn paths_are_redacted_by_rule() {
        let mut v = json!({
            "model_name": "./models/tiny", "checkpoint_path": "ckpt/step_3",
            "ds_config": {"out": "/home/me/run", "lr": 1e-6, "name": "rlharness/tiny-arith",
                          "dirs": ["~/x", "C:\\y", "relative/z", "/"]},
        });
        redact(&mut v);
        assert_eq!(
            v,
            json!({
                "model_name": "<path>", "checkpoint_path": "<path>",
                "ds_config": {"out": "<path>", "lr": 1e-6, "name": "rlharness/tiny-arith",
                              "dirs": ["<path>", "<path>", "relative/z", "/"]},
            })
        );
        let mut hub = json!({"model_name": "Qwen/Qwen3-0.6B"});
        redact(&mut hub);
        assert_eq!(
            hub["model_name"], "Qwen/Qwen3-0.6B",
            "a hub id is not a path"
        );
    }

    #[test]
    fn the_first_difference_names_the_key() {
        let a = json!({"meta": {"temperature": 1.0, "max_token_len_per_gpu": 4096}, "n": 1});
        let b = json!({"meta": {"temperature": 1.0}, "n": 1, "extra": true});
        let d = differences(&a, &b, 10);
        assert_eq!(
            d[0].to_string(),
            "meta.max_token_len_per_gpu: recorded 4096, got <absent>"
        );
        assert_eq!(d[1].to_string(), "extra: recorded <absent>, got true");
        assert_eq!(differences(&a, &b, 1).len(), 1);
        assert!(differences(&a, &a, 10).is_empty());
    }

    #[test]
    fn frames_compare_by_tree_dtype_and_shape() {
        let frame = |shape: [usize; 2], lr: f64| {
            let n = shape[0] * shape[1];
            encode(&Node::dict([
                (
                    "batch",
                    Node::dict([(
                        "input_ids",
                        Node::from(Tensor::from_i64(shape, &vec![7; n]).unwrap()),
                    )]),
                ),
                ("meta", Node::json(json!({"lr": lr}))),
            ]))
            .unwrap()
        };
        let ct = Some("application/octet-stream");
        let a = request_view(ct, &frame([2, 3], 1.0)).unwrap();
        let same = request_view(ct, &frame([2, 3], 1.0)).unwrap();
        assert!(differences(&a, &same, 5).is_empty());
        let b = request_view(ct, &frame([2, 4], 1.0)).unwrap();
        assert_eq!(
            differences(&a, &b, 5)[0].to_string(),
            "batch.input_ids.shape: recorded [2,3], got [2,4]"
        );
        let e = request_view(ct, b"\x08\0\0\0\0\0\0\0{}").unwrap_err();
        assert!(e.to_string().contains("DSSST1"), "{e}");
        assert_eq!(request_view(None, b"").unwrap(), Value::Null);
    }

    #[test]
    fn long_arrays_are_compared_by_index() {
        let a = json!({"prompts": ["1+1=", "2+2=", "3+3=", "4+4=", "5+5=", "6+6=", "7+7=", "8+8=", "9+9="]});
        let mut b = a.clone();
        b["prompts"][4] = json!("0+0=");
        assert_eq!(
            differences(&a, &b, 5)[0].to_string(),
            "prompts[4]: recorded \"5+5=\", got \"0+0=\""
        );
    }
}
