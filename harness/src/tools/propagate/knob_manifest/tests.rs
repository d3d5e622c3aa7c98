use super::*;
use crate::run::knobs::ValueType;
use serde_json::json;

/// A valid manifest of knobs of every kind the verdicts meet (forwarded, consumed under a
/// condition, parsed but unused, not forwarded, reserved), for the manifest's and the
/// verdicts' tests.
pub(crate) const MANIFEST: &str = r#"
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
      - at: meta.logits_compute_in_fp32
        when: {remote_backend.train.zorro_train.enable: false}
    server_default: false
    conditions: {remote_backend.train.zorro_train.enable: [true, false]}
  - path: remote_backend.train.logits.optimization_peak_mem_size_in_gib
    default: 4
    try: [8, 2.5]
    sent_to: [meta.logits_optimization_peak_mem_size_in_gib]
    consumers:
      - at: job.training.ds_worker_config.logits_optimization_peak_mem_size_in_gib
        type: int
    server_default: 4
  - path: actor_rollout_ref.actor.clip_ratio
    default: 0.2
    try: [0.3]
    sent_to: [meta.actor_config.clip_ratio]
    note: parsed, but the loss uses a fixed 0.2
  - path: actor_rollout_ref.rollout.max_num_batched_tokens
    default: 8192
    try: [4096]
    note: the adapter does not forward it
  - path: remote_backend.train.determinism.seed
    default: 42
    try: [7]
    sent_to: [job.*.seed]
    consumers:
      - at: job.training.seed
        when: {job.training.full_determinism: true}
        type: int
    conditions: {remote_backend.train.determinism.full: [true, false]}
  - path: remote_backend.train.load_balancer
    default: true
    try: [false]
    sent_to: [meta.load_balancer]
    consumers: [{at: meta.load_balancer, type: bool}]
    server_default: false
  - path: remote_backend.rollout.speculative_decoding.model
    default: ""
    try: [draft]
    allowed_noop: reserved for a later server
  - path: actor_rollout_ref.rollout.temperature
    default: 1.0
    try: [0.7]
    sent_to: [meta.temperature]
    consumers:
      - at: generate.sampling_params.temperature
        type: number
      - at: job.training.ds_worker_config.temperature
        when: {remote_backend.train.zorro_train.enable: true}
        type: number
"#;

#[test]
fn parses_a_good_manifest() {
    let m = parse(MANIFEST, Path::new("k.yaml")).unwrap();
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
    let bad = MANIFEST.replace("server_default: false", "server_defualt: false");
    let e = parse(&bad, Path::new("k.yaml")).unwrap_err().to_string();
    assert!(e.contains("server_defualt") && e.contains("k.yaml"), "{e}");
    let bad = MANIFEST.replace("type: bool", "type: boolean");
    let e = parse(&bad, Path::new("k.yaml")).unwrap_err().to_string();
    assert!(e.contains("boolean"), "{e}");
}

#[test]
fn semantic_problems_name_the_knob() {
    let bad = MANIFEST
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
    let m = parse(MANIFEST, Path::new("k.yaml")).unwrap();
    // Every knob of the manifest under the backend's prefix is a leaf of its file, and one
    // leaf (`colocate`) has no knob.
    let mut leaves: Vec<String> = m
        .knobs
        .iter()
        .filter_map(|k| k.path.strip_prefix("remote_backend."))
        .map(str::to_string)
        .collect();
    leaves.push("colocate".to_string());
    let p = coverage(&leaves, &m);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("remote_backend.colocate"), "{p:?}");
    let p = coverage(&["colocate".to_string()], &m);
    assert!(p.iter().any(|s| s.contains("is not a key of")), "{p:?}");
}

#[test]
fn known_gaps_name_a_problem_kind_checked_with_line_and_column() {
    let with_gap = |gap: &str| format!("{MANIFEST}known_gaps:\n{gap}");
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

/// A key no layer defines (`added`) must default to null and escapes the layer's coverage; an
/// environment knob defaults to null and is not `added`.
#[test]
fn added_and_environment_knobs_are_checked() {
    let knob = |extra: &str| {
        format!(
            "backend: arctic\nbackend_yaml: backends/arctic.yaml\nbackend_prefix: remote_backend\nknobs:\n{extra}"
        )
    };
    let ok = knob(
        "  - {path: remote_backend.backend, added: true, default: null, try: [cortex], note: ignored}\n  - {path: env.X, default: null, try: ['1'], consumers: [{at: env.X}]}\n",
    );
    let m = parse(&ok, Path::new("k.yaml")).unwrap();
    assert!(validate(&m).is_empty(), "{:?}", validate(&m));
    // The added key is no leaf of the layer, and that is not a coverage problem.
    assert!(coverage(&[], &m).is_empty(), "{:?}", coverage(&[], &m));
    let bad = knob(
        "  - {path: remote_backend.backend, added: true, default: onprem, try: [cortex], note: x}\n  - {path: env.X, default: '0', try: ['1'], consumers: [{at: env.X}]}\n",
    );
    let p = validate(&parse(&bad, Path::new("k.yaml")).unwrap());
    assert!(
        p.iter()
            .any(|s| s.contains("remote_backend.backend") && s.contains("needs `default: null`")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("env.X") && s.contains("an environment knob")),
        "{p:?}"
    );
}
