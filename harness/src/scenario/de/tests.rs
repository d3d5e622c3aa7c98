use std::path::Path;

use serde::Deserialize;

use super::*;
use crate::scenario::yaml::parse;

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Optim {
    lr: f64,
    #[serde(default)]
    betas: Vec<f64>,
    steps: Option<u64>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Backend {
    Mock(Inner),
    Remote { url: String },
    None,
}

#[derive(Debug, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
struct Inner {
    #[serde(default)]
    offset: f64,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Top {
    optim: Optim,
    backend: Backend,
    #[serde(default)]
    mode: Option<Mode>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Fast,
    Slow { factor: u32 },
}

fn de(text: &str) -> Result<Top, SpecError> {
    let node = parse(text, Path::new("s.yaml")).unwrap();
    from_node(&node, "")
}

#[test]
fn reads_structs_enums_and_int_as_float() {
    let top = de("optim: {lr: 1, betas: [0.9, 1]}\nbackend: {kind: mock, offset: -0.5}\nmode: {slow: {factor: 2}}\n").unwrap();
    assert_eq!(top.optim.lr, 1.0);
    assert_eq!(top.optim.betas, vec![0.9, 1.0]);
    assert_eq!(top.optim.steps, None);
    assert_eq!(
        top.backend,
        Backend::Mock(Inner {
            offset: -0.5,
            name: String::new()
        })
    );
    assert_eq!(top.mode, Some(Mode::Slow { factor: 2 }));
    let top = de("optim: {lr: 1}\nbackend: {kind: none}\nmode: fast\n").unwrap();
    assert_eq!(top.backend, Backend::None);
    assert_eq!(top.mode, Some(Mode::Fast));
}

#[test]
fn unknown_field_points_at_the_key() {
    let e = de("optim:\n  lr: 1\n  lrr: 2\nbackend: {kind: none}\n").unwrap_err();
    assert_eq!((e.line, e.col, e.key_path.as_str()), (3, 3, "optim.lrr"));
    assert!(
        e.message
            .starts_with("unknown field `lrr`, expected one of"),
        "{e}"
    );
}

#[test]
fn wrong_type_points_at_the_value() {
    let e = de("optim:\n  lr: 1\n  steps: many\nbackend: {kind: none}\n").unwrap_err();
    assert_eq!((e.line, e.col, e.key_path.as_str()), (3, 10, "optim.steps"));
    assert_eq!(e.message, "invalid type: string \"many\", expected u64");
    let e = de("optim:\n  lr: 1\n  betas: [0.9, x]\nbackend: {kind: none}\n").unwrap_err();
    assert_eq!(
        (e.line, e.col, e.key_path.as_str()),
        (3, 16, "optim.betas[1]")
    );
}

#[test]
fn internally_tagged_enum_errors_point_inside_the_mapping() {
    let text = "optim: {lr: 1}\nbackend:\n  kind: mock\n  ofset: 1\n";
    let e = de(text).unwrap_err();
    assert_eq!(
        (e.line, e.col, e.key_path.as_str()),
        (4, 3, "backend.ofset")
    );
    assert!(e.message.contains("unknown field `ofset`"), "{e}");

    let text = "optim: {lr: 1}\nbackend:\n  kind: mock\n  offset: lots\n";
    let e = de(text).unwrap_err();
    assert_eq!(
        (e.line, e.col, e.key_path.as_str()),
        (4, 11, "backend.offset")
    );
    assert!(e.message.contains("invalid type: string \"lots\""), "{e}");

    let text = "optim: {lr: 1}\nbackend:\n  kind: mok\n";
    let e = de(text).unwrap_err();
    assert_eq!((e.line, e.col, e.key_path.as_str()), (3, 9, "backend.kind"));
    assert!(e.message.contains("unknown variant `mok`"), "{e}");

    let text = "optim: {lr: 1}\nbackend:\n  url: x\n";
    let e = de(text).unwrap_err();
    assert_eq!((e.line, e.col, e.key_path.as_str()), (3, 3, "backend"));
    assert!(e.message.contains("missing field `kind`"), "{e}");
}

#[test]
fn missing_field_points_at_the_mapping() {
    let e = de("optim:\n  betas: []\nbackend: {kind: none}\n").unwrap_err();
    assert_eq!((e.line, e.key_path.as_str()), (2, "optim"));
    assert!(e.message.contains("missing field `lr`"), "{e}");
}
