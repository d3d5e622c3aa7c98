//! The cassette's round trip: written, read back byte for byte, and refused when damaged.

use std::io::{Read, Write};
use std::path::Path;

use serde_json::json;

use super::*;
use crate::wire::{encode, Node, Tensor};

fn exchange(seq: u64, path: &str, req: (&str, Vec<u8>), resp: (&str, Vec<u8>)) -> RecordedExchange {
    RecordedExchange {
        seq,
        group: seq,
        method: "POST".into(),
        path: path.into(),
        query: Some("job_id=1".into()),
        job_id: Some(1),
        status: 200,
        request_content_type: Some(req.0.into()),
        request: req.1,
        response_headers: [("content-type".to_string(), resp.0.to_string())].into(),
        response: resp.1,
        error: None,
    }
}

fn frame() -> Vec<u8> {
    encode(&Node::dict([
        (
            "ids",
            Node::from(Tensor::from_i64([2, 3], &[1, 2, 3, 4, 5, 6]).unwrap()),
        ),
        ("meta", Node::json(json!({"temperature": 1.0}))),
    ]))
    .unwrap()
}

fn write(dir: &Path) {
    let w = CassetteWriter::create(dir).unwrap();
    assert_eq!(w.begin(1), 1);
    let group = w.begin(2);
    assert_eq!(group, 1, "in flight with 1: same group");
    w.push(RecordedExchange {
        group,
        ..exchange(
            2,
            "/forward",
            ("application/octet-stream", frame()),
            ("application/octet-stream", frame()),
        )
    });
    w.push(RecordedExchange {
        path: "/initialize".into(),
        query: None,
        job_id: None,
        ..exchange(
            1,
            "/initialize",
            (
                "application/json",
                br#"{"model_name":"m","job_type":"sampling"}"#.to_vec(),
            ),
            ("application/json", br#"{"job_id":1}"#.to_vec()),
        )
    });
    // Not canonical JSON: kept as text so it replays byte for byte.
    w.push(exchange(
        3,
        "/step",
        ("application/json", b"{\"learning_rate\": null}".to_vec()),
        ("application/json", b"{ \"x\": 1.0e-6 }".to_vec()),
    ));
    assert_eq!(w.finish().unwrap(), 3);
    assert!(w.finish().is_err());
}

#[test]
fn bodies_round_trip_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let c = Cassette::load(dir.path()).unwrap();
    let seqs: Vec<u64> = c.exchanges.iter().map(|x| x.entry.seq).collect();
    assert_eq!(seqs, [1, 2, 3], "the index is in arrival order");
    assert_eq!(c.job_types.get(&1).map(String::as_str), Some("sampling"));
    assert_eq!(c.exchanges[1].entry.job_type.as_deref(), Some("sampling"));
    assert_eq!(c.exchanges[1].entry.group, 1);
    assert_eq!(
        &c.exchanges[1].request.as_ref().unwrap().bytes[..],
        &frame()[..]
    );
    assert_eq!(&c.exchanges[1].response[..], &frame()[..]);
    let (req, resp) = (
        c.exchanges[1].entry.request.as_ref().unwrap(),
        c.exchanges[1].entry.response.as_ref().unwrap(),
    );
    assert_eq!(req.offset, Some(0));
    assert_eq!(resp.offset, Some(req.bytes));
    assert_eq!(&c.exchanges[2].response[..], b"{ \"x\": 1.0e-6 }");
    assert!(c.exchanges[2]
        .entry
        .response
        .as_ref()
        .unwrap()
        .text
        .is_some());
    assert_eq!(
        c.exchanges[0].entry.response.as_ref().unwrap().json,
        Some(json!({"job_id": 1}))
    );
    assert!(
        CassetteWriter::create(dir.path()).is_err(),
        "never overwrites"
    );
}

#[test]
fn a_corrupt_body_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let f = dir.path().join(PACK_FILE);
    let z = std::fs::read(&f).unwrap();
    std::fs::write(&f, &z[..z.len() / 2]).unwrap();
    let e = Cassette::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("bodies.gz") && e.contains("truncated"), "{e}");

    // A body that is not what the index says: named with its offset.
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&z[..])
        .read_to_end(&mut raw)
        .unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 1;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    std::fs::write(&f, gz.finish().unwrap()).unwrap();
    let e = Cassette::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("bodies.gz") && e.contains("sha256"), "{e}");

    std::fs::remove_file(&f).unwrap();
    let e = Cassette::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("bodies.gz: not found"), "{e}");
}

#[test]
fn a_bad_index_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let idx = dir.path().join(INDEX_FILE);
    let mut text = std::fs::read_to_string(&idx).unwrap();
    text.push_str("{\"seq\": 4, \"oops\": 1}\n");
    std::fs::write(&idx, text).unwrap();
    let e = Cassette::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("index.jsonl:4:"), "{e}");
    let e = Cassette::load(&dir.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no cassette at"), "{e}");
}
