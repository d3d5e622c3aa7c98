//! The codec's unit tests: round trips, Python's byte layout, every dtype, refusals.

use bytes::Bytes;
use serde_json::Value;

use super::*;
use crate::wire::pyjson;

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
