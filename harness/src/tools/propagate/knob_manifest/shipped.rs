//! The shipped knob manifests: the Arctic manifest against its backend YAML and the built-in
//! knob table, and what `check` reports of a key the manifest lacks.

use super::*;

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// The Arctic manifest loads, validates, covers every key of the backend YAML both ways,
/// and states the same defaults as the YAML.
#[test]
fn arctic_manifest_covers_the_backend_yaml() {
    let m = load(&scenarios().join("backends/arctic.knobs.yaml")).unwrap();
    let yaml_path = scenarios().join(&m.backend_yaml);
    let text = std::fs::read_to_string(&yaml_path).unwrap();
    let leaves = yaml_leaves(&text, &yaml_path).unwrap();
    let paths: Vec<String> = leaves.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(coverage(&paths, &m), Vec::<String>::new());
    assert_eq!(default_drift(&leaves, &m), Vec::<String>::new());
    assert_eq!(
        check_file(&scenarios().join("backends/arctic.knobs.yaml")),
        Vec::<String>::new()
    );
}

/// The translation's built-in rows are this file's, read the same (numbers included).
#[test]
fn the_built_in_knob_table_is_the_shipped_manifest() {
    let m = load(&scenarios().join("backends/arctic.knobs.yaml")).unwrap();
    assert_eq!(crate::run::knobs::arctic().unwrap().knobs, m.knobs);
}

#[test]
fn check_file_reports_a_key_missing_from_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("backends")).unwrap();
    std::fs::write(dir.path().join("backends/x.yaml"), "a: 1\nb:\n  c: true\n").unwrap();
    let manifest = dir.path().join("backends/x.knobs.yaml");
    std::fs::write(
        &manifest,
        "backend: x\nbackend_yaml: backends/x.yaml\nbackend_prefix: rb\nknobs:\n  - {path: rb.a, default: 2, try: [3], consumers: [{at: meta.a}]}\n",
    )
    .unwrap();
    let p = check_file(&manifest);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].contains("`rb.b.c` has no entry"), "{p:?}");
    assert!(p[1].contains("default 2 differs from 1"), "{p:?}");
}

#[test]
fn parse_errors_carry_line_and_column() {
    let text = "backend: arctic\nbackend_yaml: b.yaml\nbackend_prefix: rb\nknobs:\n  - path: a\n    default: 1\n    try: [2]\n    consumer: []\n";
    let e = parse(text, Path::new("k.yaml")).unwrap_err().to_string();
    assert!(e.contains("k.yaml:8") && e.contains("consumer"), "{e}");
}
