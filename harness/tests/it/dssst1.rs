//! DSSST1 codec against Python's bytes and random trees.

use bytes::Bytes;
use proptest::prelude::*;
use rlharness_arctic::wire::dssst1::{self, header_extent, header_summary, DType, Node, Tensor};
use serde_json::{json, Value};

fn vector(name: &str) -> Bytes {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    Bytes::from(std::fs::read(&path).expect("test vector present"))
}

fn tensor<'a>(root: &'a Node, path: &[&str]) -> &'a Tensor {
    let mut n = root;
    for p in path {
        n = n.get(p).unwrap_or_else(|| panic!("no {p} in {n:?}"));
    }
    n.as_tensor().expect("a tensor")
}

#[test]
fn python_frame_decodes_and_reencodes_byte_identically() {
    let bytes = vector("dssst1_python.safetensors");
    let root = dssst1::decode(bytes.clone()).unwrap();

    let ids = tensor(&root, &["batch", "input_ids"]);
    assert_eq!(ids.shape, vec![2, 3]);
    assert_eq!(ids.to_i64_vec().unwrap(), vec![0, 1, 2, 3, 4, 5]);
    let lp = tensor(&root, &["batch", "old_log_probs"]);
    assert_eq!(lp.dtype, DType::BF16);
    let lpv = lp.to_f32_vec();
    assert_eq!(&lpv[..4], &[1.0, -0.5, 0.0, 2.0]);
    assert!(lpv[4].is_nan() && lpv[5] == f32::NEG_INFINITY);
    assert_eq!(
        tensor(&root, &["batch", "flags"]).to_i64_vec().unwrap(),
        vec![1, 0]
    );
    assert_eq!(
        tensor(&root, &["batch", "bytes"]).to_i64_vec().unwrap(),
        vec![0, 7, 255]
    );
    assert_eq!(
        tensor(&root, &["batch", "half"]).to_f32_vec(),
        vec![0.5, -2.0]
    );
    assert_eq!(
        tensor(&root, &["batch", "f32"]).to_f32_vec(),
        vec![1.5, -0.25]
    );
    assert_eq!(tensor(&root, &["batch", "f64"]).to_f32_vec(), vec![3.0]);
    assert_eq!(
        tensor(&root, &["batch", "i32"]).to_i64_vec().unwrap(),
        vec![-1, 2, 3]
    );
    assert_eq!(tensor(&root, &["empty"]).shape, vec![0, 4]);
    assert_eq!(root.get_json("meta").unwrap()["name"], "grpo été \"q\"");
    assert_eq!(root.get_json("processing").unwrap()["loss_fn"], Value::Null);

    match root.get("results") {
        Some(Node::List(items)) => {
            assert_eq!(
                items[0]
                    .get("x")
                    .unwrap()
                    .as_tensor()
                    .unwrap()
                    .to_i64_vec()
                    .unwrap(),
                vec![9]
            );
            assert_eq!(items[1], Node::json("plain"));
        }
        other => panic!("results: {other:?}"),
    }
    match root.get("pair") {
        Some(Node::Tuple(items)) => {
            let Node::Tensor { tensor, scalar } = &items[0] else {
                panic!("{items:?}")
            };
            assert!(*scalar);
            assert!(tensor.shape.is_empty());
            assert_eq!(tensor.to_f32_vec(), vec![0.5]);
            assert_eq!(items[1], Node::json(3));
        }
        other => panic!("pair: {other:?}"),
    }

    let ours = dssst1::encode(&root).unwrap();
    assert!(
        ours == bytes[..],
        "re-encoded frame differs from Python's bytes"
    );
}

#[test]
fn python_default_json_with_nan_and_int_keys() {
    let bytes = vector("dssst1_python_nan.safetensors");
    let root = dssst1::decode(bytes.clone()).unwrap();
    assert_eq!(
        root.get_json("metrics").unwrap(),
        &json!({"loss": {"$float": "NaN"}, "up": {"$float": "Infinity"}, "down": {"$float": "-Infinity"}, "ok": 0.25})
    );
    assert_eq!(
        root.get_json("by_rank").unwrap(),
        &json!({"0": "first", "1": "second"})
    );
    assert_eq!(tensor(&root, &["logprobs"]).to_f32_vec(), vec![0.0, -1.0]);
    let s = header_summary(&bytes[..header_extent(&bytes).unwrap()]).unwrap();
    assert_eq!(s["logprobs"], json!({"dtype": "F32", "shape": [1, 2]}));
    assert_eq!(s["metrics"]["ok"], 0.25);
    // NaN stays distinguishable from null in what a recording shows.
    assert_eq!(s["metrics"]["loss"], json!({"$float": "NaN"}));
    // And the frame re-encodes to Python's bytes, literals included.
    assert!(dssst1::encode(&root).unwrap() == bytes[..]);
}

// ---------------------------------------------------------------------------------------------
// Random trees

/// Dtypes whose elements fill whole bytes (a packed 4- or 6-bit tensor needs an even count).
fn whole_byte_dtypes() -> Vec<DType> {
    DType::ALL
        .into_iter()
        .filter(|d| d.bits() % 8 == 0)
        .collect()
}

fn arb_tensor() -> impl Strategy<Value = Tensor> {
    (
        proptest::sample::select(whole_byte_dtypes()),
        proptest::collection::vec(0usize..4, 0..4),
    )
        .prop_flat_map(|(dtype, shape)| {
            let n = shape.iter().product::<usize>() * dtype.size();
            proptest::collection::vec(any::<u8>(), n).prop_map(move |data| Tensor {
                dtype,
                shape: shape.clone(),
                data: Bytes::from(data),
            })
        })
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z0-9 .é\"\\\\]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec(("[a-z]{1,4}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn arb_node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        arb_tensor().prop_map(Node::from),
        proptest::sample::select(whole_byte_dtypes()).prop_flat_map(|dtype| {
            proptest::collection::vec(any::<u8>(), dtype.size()).prop_map(move |d| {
                Node::scalar(Tensor {
                    dtype,
                    shape: vec![],
                    data: Bytes::from(d),
                })
            })
        }),
        arb_json().prop_map(Node::Json),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            // Distinct keys without dots, so dotted tensor paths cannot collide.
            proptest::collection::btree_map("[a-z_]{1,6}", inner.clone(), 0..5)
                .prop_map(|m| Node::Dict(m.into_iter().collect())),
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Node::List),
            proptest::collection::vec(inner, 0..4).prop_map(Node::Tuple),
        ]
    })
}

/// What a round trip can preserve: tensor-free dicts and lists travel as `j`.
fn canonical(n: &Node) -> Node {
    match n {
        Node::Tensor { .. } | Node::Json(_) => n.clone(),
        Node::Tuple(v) => Node::Tuple(v.iter().map(canonical).collect()),
        _ if !n.has_tensor() => Node::Json(n.to_json().unwrap()),
        Node::Dict(e) => Node::Dict(e.iter().map(|(k, v)| (k.clone(), canonical(v))).collect()),
        Node::List(v) => Node::List(v.iter().map(canonical).collect()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_trees_round_trip(root in arb_node()) {
        let bytes = dssst1::encode(&root).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        prop_assert_eq!(n % 8, 0);
        let back = dssst1::decode(Bytes::from(bytes.clone())).unwrap();
        prop_assert_eq!(&back, &canonical(&root));
        prop_assert_eq!(header_summary(&bytes[..8 + n]).unwrap(), canonical(&root).summary());
        // Encoding is a function of the tree: the decoded tree writes the same bytes.
        prop_assert_eq!(dssst1::encode(&back).unwrap(), bytes);
    }

    #[test]
    fn decode_never_panics_on_mutated_frames(root in arb_node(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let mut bytes = dssst1::encode(&root).unwrap();
        for (at, x) in flips {
            let i = at % bytes.len();
            bytes[i] ^= x;
        }
        let _ = dssst1::decode(Bytes::from(bytes.clone()));
        let _ = header_summary(&bytes);
        bytes.truncate(cut % (bytes.len() + 1));
        let _ = dssst1::decode(Bytes::from(bytes));
    }

    #[test]
    fn decode_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = dssst1::decode(Bytes::from(bytes));
    }
}
