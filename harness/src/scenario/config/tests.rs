use super::interpolate::resolve_interpolations;
use super::layering::Layering;
use super::*;

fn node(text: &str) -> SpannedNode {
    yaml::parse(text, Path::new("c.yaml")).unwrap()
}

fn resolve(text: &str) -> (SpannedNode, Vec<SpecError>) {
    let mut errors = Vec::new();
    let n = resolve_interpolations(&node(text), &mut errors);
    (n, errors)
}

#[test]
fn whole_string_reference_keeps_type_and_origin() {
    let (n, errs) = resolve("a: {n: 8}\nb: ${a.n}\nc: 'x-${a.n}-y'\nd: ${.b}\ne: ${a}\n");
    assert!(errs.is_empty(), "{errs:?}");
    let b = n.get("b").unwrap();
    assert_eq!(b.value, SpannedValue::Int(8));
    assert_eq!(b.origin.to_string(), "${a.n} <- c.yaml:1:8");
    assert_eq!(n.get("c").unwrap().value, SpannedValue::Str("x-8-y".into()));
    assert_eq!(n.get("d").unwrap().value, SpannedValue::Int(8));
    assert_eq!(n.get("e").unwrap().to_json(), serde_json::json!({"n": 8}));
}

#[test]
fn missing_target_and_cycles_are_errors_with_positions() {
    let (_, errs) = resolve("a: 1\nb: ${a.x}\n");
    assert_eq!(errs.len(), 1);
    assert_eq!(
        (errs[0].line, errs[0].col, errs[0].key_path.as_str()),
        (2, 4, "config.b")
    );
    assert!(
        errs[0].message.contains("`a.x`, which does not exist"),
        "{}",
        errs[0]
    );

    let (_, errs) = resolve("a: ${b}\nb: ${c}\nc: ${a}\n");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0]
            .message
            .contains("interpolation cycle: a -> b -> c -> a"),
        "{}",
        errs[0]
    );

    let (_, errs) = resolve("a: ${oc.env:HOME}\nb: ${x\nc: \\${not}\n");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].message.contains("resolver"));
    assert!(errs[1].message.contains("unterminated"));
}

#[test]
fn escaped_dollar_is_literal() {
    let (n, errs) = resolve("c: \\${not}\n");
    assert!(errs.is_empty());
    assert_eq!(
        n.get("c").unwrap().value,
        SpannedValue::Str("${not}".into())
    );
}

#[test]
fn override_values_parse_as_yaml_flow() {
    let o = Override::parse("config.a.b=[1, 2]").unwrap();
    assert_eq!(o.segments, vec!["config", "a", "b"]);
    assert_eq!(o.value.to_json(), serde_json::json!([1, 2]));
    assert_eq!(o.value.origin.to_string(), "--set config.a.b=[1, 2]");
    assert_eq!(Override::parse("+x=1").unwrap().plus, 1);
    assert_eq!(
        Override::parse("++x='1'").unwrap().value.to_json(),
        serde_json::json!("1")
    );
    assert_eq!(
        Override::parse("x=").unwrap().value.to_json(),
        serde_json::json!("")
    );
    assert!(Override::parse("noequals").is_err());
    assert!(Override::parse("a..b=1").is_err());
    assert!(Override::parse("a=[1").is_err());
}

#[test]
fn strict_layer_rejects_unknown_keys_with_hint() {
    let mut l = Layering::new(PathBuf::from("."));
    let mut base = node("a:\n  lr: 1\n  wd: 0\n");
    l.apply(&mut base, node("a:\n  lrr: 2\n"), "", true);
    assert_eq!(l.errors.len(), 1);
    let e = &l.errors[0];
    assert_eq!((e.line, e.col, e.key_path.as_str()), (2, 3, "config.a.lrr"));
    assert!(e.message.contains("did you mean `lr`"), "{e}");
    l.errors.clear();
    l.apply(&mut base, node("a: 3\n"), "", true);
    assert!(
        l.errors[0].message.contains("expected a mapping"),
        "{}",
        l.errors[0]
    );
}
