use super::*;
use crate::knobs::ValueType;
use serde_json::json;

const GOOD: &str = r#"
backend: arctic
backend_yaml: backends/arctic.yaml
backend_prefix: remote_backend
volatile: [meta.batch_num_tokens]
knobs:
  - path: remote_backend.train.logits.compute_in_fp32
    default: false
    try: [true]
    sent_to: [meta.logits_compute_in_fp32, job.training.ds_worker_config.logits_compute_in_fp32]
    consumers:
      - at: job.training.ds_worker_config.logits_compute_in_fp32
        when: {remote_backend.train.zorro_train.enable: true}
        type: bool
    server_default: false
    conditions: {remote_backend.train.zorro_train.enable: [true, false]}
"#;

#[test]
fn parses_a_good_manifest() {
    let m = parse(GOOD, Path::new("k.yaml")).unwrap();
    assert!(validate(&m).is_empty(), "{:?}", validate(&m));
    let k = &m.knobs[0];
    assert_eq!(k.tries, vec![json!(true)]);
    assert_eq!(k.consumers[0].value_type, Some(ValueType::Bool));
    assert_eq!(
        k.conditions["remote_backend.train.zorro_train.enable"],
        vec![json!(true), json!(false)]
    );
}

#[test]
fn unknown_keys_are_errors() {
    let bad = GOOD.replace("server_default: false", "server_defualt: false");
    let e = parse(&bad, Path::new("k.yaml")).unwrap_err().to_string();
    assert!(e.contains("server_defualt") && e.contains("k.yaml"), "{e}");
    let bad = GOOD.replace("type: bool", "type: boolean");
    let e = parse(&bad, Path::new("k.yaml")).unwrap_err().to_string();
    assert!(e.contains("boolean"), "{e}");
}

#[test]
fn semantic_problems_name_the_knob() {
    let bad = GOOD
        .replace("try: [true]", "try: [false]")
        .replace("at: job.training", "at: jobs.training");
    let m = parse(&bad, Path::new("k.yaml")).unwrap();
    let p = validate(&m);
    assert!(p.iter().any(|s| s.contains("equals the default")), "{p:?}");
    assert!(
        p.iter()
            .any(|s| s.contains("`jobs.training") && s.contains("not a wire location")),
        "{p:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("k.yaml");
    std::fs::write(&f, bad).unwrap();
    let e = load(&f).unwrap_err().to_string();
    assert!(e.contains("compute_in_fp32") && e.contains("k.yaml"), "{e}");
    assert!(load(&dir.path().join("missing.yaml"))
        .unwrap_err()
        .to_string()
        .contains("missing.yaml"));
}

#[test]
fn coverage_finds_both_directions() {
    let m = parse(GOOD, Path::new("k.yaml")).unwrap();
    let leaves = vec![
        "train.logits.compute_in_fp32".to_string(),
        "colocate".to_string(),
    ];
    let p = coverage(&leaves, &m);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("remote_backend.colocate"), "{p:?}");
    let p = coverage(&["colocate".to_string()], &m);
    assert!(p.iter().any(|s| s.contains("is not a key of")), "{p:?}");
}

#[test]
fn known_gaps_name_a_problem_kind_checked_with_line_and_column() {
    let with_gap = |gap: &str| format!("{GOOD}known_gaps:\n{gap}");
    let ok = with_gap("  - {knob: remote_backend.train.logits.compute_in_fp32, verdict: consumed, problem: unchanged_consumer, at: job.training.ds_worker_config, reason: r}\n");
    let m = parse(&ok, Path::new("k.yaml")).unwrap();
    assert!(validate(&m).is_empty(), "{:?}", validate(&m));
    assert_eq!(m.known_gaps[0].problem, ProblemKind::UnchangedConsumer);
    let line = ok.lines().count();
    let bad = ok.replace("unchanged_consumer", "unchanged");
    let e = parse(&bad, Path::new("k.yaml")).unwrap_err().to_string();
    assert!(
        e.contains(&format!("k.yaml:{line}:")) && e.contains("unchanged"),
        "{e}"
    );
    let missing = ok.replace("problem: unchanged_consumer, ", "");
    let e = parse(&missing, Path::new("k.yaml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("problem") && e.contains("k.yaml:"), "{e}");
    // `unlisted` goes with a key the manifest lacks, and with verdict `unlisted`.
    let m = parse(
        &ok.replace("problem: unchanged_consumer", "problem: unlisted"),
        Path::new("k.yaml"),
    )
    .unwrap();
    let p = validate(&m);
    assert!(
        p.iter().any(|s| s.contains("the manifest lists the knob")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|s| s.contains("goes with problem `unlisted`")),
        "{p:?}"
    );
}

#[test]
fn numbers_compare_by_value() {
    assert!(json_equal(&json!(4), &json!(4.0)));
    assert!(!json_equal(&json!([1, 2]), &json!([1])));
}
