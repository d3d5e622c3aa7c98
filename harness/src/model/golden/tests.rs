use std::path::Path;

use super::header::render_header;
use super::*;

impl Golden {
    /// A golden of the series `table` only (no rules, bands, calibration or audit), as the
    /// unit tests judge against.
    pub(crate) fn of_table(table: MetricTable) -> Golden {
        Golden {
            scenario: "s".into(),
            hardware: "cpu".into(),
            table,
            provenance: Provenance::default(),
            rules: None,
            bands: None,
            dir: "golden/s/cpu".into(),
            calibration: None,
            digest: Default::default(),
            audit: None,
        }
    }
}

fn table(values: &[f64]) -> MetricTable {
    let mfu = vec![0.25; values.len()];
    MetricTable::from_columns(&[("critic/rewards/mean", values), ("perf/mfu/actor", &mfu)])
}

fn prov() -> Provenance {
    Provenance {
        date: "2026-01-02T03:04:05Z".into(),
        harness_version: "0.1.0".into(),
        git_commit: Some("abc123".into()),
        device: "NVIDIA H200".into(),
        seed: Some(7),
        threads: Some(2),
        torch_version: None,
        source: None,
        ..Provenance::default()
    }
}

fn rules() -> ChecksSpec {
    serde_json::from_str(
        r#"{"golden": {"critic/rewards/mean": {"window": 5, "abs": 0.05, "direction": "higher_is_better"}}, "expect": ["max(perf/mfu/actor) <= 1"]}"#,
    )
    .unwrap()
}

#[test]
fn missing_golden_then_pending_then_accept() {
    let dir = tempfile::tempdir().unwrap();
    let store = GoldenStore::with_ci(dir.path(), false);
    assert!(store.load("smoke/mock", "cpu").unwrap().is_none());
    let path = store
        .write_pending(
            "smoke/mock",
            "cpu",
            &table(&[0.1, 0.2]),
            &prov(),
            Some(&rules()),
            None,
        )
        .unwrap();
    assert!(path.ends_with("smoke/mock/cpu/metrics.csv.new"));
    // Pending is not accepted: a run still sees no golden.
    assert!(store.load("smoke/mock", "cpu").unwrap().is_none());
    let pending = store.pending().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].scenario, "smoke/mock");
    assert_eq!(pending[0].hardware, "cpu");
    assert_eq!(pending[0].diff_summary, "new golden: 2 steps, 2 metrics");

    let accepted = store.accept(&[]).unwrap();
    assert_eq!(accepted.len(), 1);
    let g = store.load("smoke/mock", "cpu").unwrap().unwrap();
    assert_eq!(g.table, table(&[0.1, 0.2]));
    assert_eq!(g.provenance, prov());
    assert_eq!(g.rules, Some(rules()));
    assert!(store.pending().unwrap().is_empty());
    let header = fsx::read_to_string(&g.dir.join(HEADER_FILE)).unwrap();
    assert!(header.starts_with("# rlharness golden"), "{header}");
    assert!(header.contains("device: \"NVIDIA H200\""), "{header}");

    // A second run writes a pending change beside the accepted golden; reject drops it.
    store
        .write_pending(
            "smoke/mock",
            "cpu",
            &table(&[0.1, 0.5, 0.6]),
            &prov(),
            None,
            None,
        )
        .unwrap();
    let p = store.pending().unwrap();
    assert!(
        p[0].diff_summary.contains("2 -> 3 steps")
            && p[0]
                .diff_summary
                .contains("largest: critic/rewards/mean |Δ| 0.3 at step 2"),
        "{}",
        p[0].diff_summary
    );
    assert!(matches!(
        store.reject(&["other".to_string()]),
        Err(GoldenError::NoPending(_))
    ));
    let rejected = store.reject(&["smoke/mock/cpu".to_string()]).unwrap();
    assert_eq!(rejected.len(), 1);
    assert!(store.pending().unwrap().is_empty());
    let g = store.load("smoke/mock", "cpu").unwrap().unwrap();
    assert_eq!(g.table.len(), 2, "reject keeps the accepted golden");
}

#[test]
fn ci_never_writes_a_golden() {
    let dir = tempfile::tempdir().unwrap();
    let ci = GoldenStore::with_ci(dir.path(), true);
    let e = ci
        .write_pending("s", "cpu", &table(&[0.1]), &prov(), None, None)
        .unwrap_err();
    assert!(matches!(e, GoldenError::CiRefused { .. }));
    assert!(e.to_string().contains("CI=true"), "{e}");
    assert!(!dir.path().join("s").exists());
    // Accepting under CI is refused too.
    GoldenStore::with_ci(dir.path(), false)
        .write_pending("s", "cpu", &table(&[0.1]), &prov(), None, None)
        .unwrap();
    assert!(matches!(ci.accept(&[]), Err(GoldenError::CiRefused { .. })));
    assert!(!dir.path().join("s/cpu/metrics.csv").exists());
}

#[test]
fn bad_names_and_bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = GoldenStore::with_ci(dir.path(), false);
    for (s, h) in [
        ("../x", "cpu"),
        ("a", "c/d"),
        ("", "cpu"),
        ("_snapshots", "cpu"),
    ] {
        assert!(
            matches!(store.load(s, h), Err(GoldenError::BadName { .. })),
            "{s} {h}"
        );
    }
    let gdir = dir.path().join("s/cpu");
    fsx::write_atomic(&gdir.join(METRICS_FILE), b"step,x\n1,abc\n").unwrap();
    let e = store.load("s", "cpu").unwrap_err().to_string();
    assert!(e.contains("metrics.csv") && e.contains("line 2"), "{e}");
    fsx::write_atomic(&gdir.join(METRICS_FILE), b"step,x\n1,2\n").unwrap();
    let e = store.load("s", "cpu").unwrap_err().to_string();
    assert!(e.contains("golden.yaml") && e.contains("missing"), "{e}");
    fsx::write_atomic(&gdir.join(HEADER_FILE), b"provenance: [1, 2\n").unwrap();
    let e = store.load("s", "cpu").unwrap_err();
    assert!(matches!(e, GoldenError::Header { .. }), "{e:?}");
    assert!(e.to_string().contains("golden.yaml"), "{e}");
    fsx::write_atomic(
        &gdir.join(HEADER_FILE),
        b"provenance: {date: x, harness_version: y, device: z}\nrules: {expect: [\"max(x) <\"]}\n",
    )
    .unwrap();
    let e = store.load("s", "cpu").unwrap_err().to_string();
    assert!(e.contains("rules") && e.contains("column"), "{e}");
    // A torn pending (series without header) is refused on accept, not half-applied.
    fsx::write_atomic(&gdir.join("metrics.csv.new"), b"step,x\n1,3\n").unwrap();
    assert!(matches!(
        store.accept(&[]),
        Err(GoldenError::TornPending { .. })
    ));
}

#[test]
fn an_accept_cut_between_its_two_renames_is_refused_on_load_and_finished_by_accept() {
    let dir = tempfile::tempdir().unwrap();
    let store = GoldenStore::with_ci(dir.path(), false);
    store
        .write_pending("s", "cpu", &table(&[0.1, 0.2]), &prov(), None, None)
        .unwrap();
    store.accept(&[]).unwrap();
    store
        .write_pending("s", "cpu", &table(&[0.5, 0.6]), &prov(), None, None)
        .unwrap();
    // The crash: the series was renamed, the header was not.
    let gdir = dir.path().join("s/cpu");
    fsx::rename(&gdir.join("metrics.csv.new"), &gdir.join(METRICS_FILE)).unwrap();
    let e = store.load("s", "cpu").unwrap_err();
    assert!(matches!(e, GoldenError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains("run it again"), "{e}");
    let pending = store.pending().unwrap();
    assert_eq!(pending.len(), 1);
    assert!(pending[0].diff_summary.contains("cut short"), "{pending:?}");
    store.accept(&["s".into()]).unwrap();
    let g = store.load("s", "cpu").unwrap().unwrap();
    assert_eq!(g.table, table(&[0.5, 0.6]));
    assert!(store.pending().unwrap().is_empty());
    // A series edited by hand no longer matches its header.
    fsx::write_atomic(
        &gdir.join(METRICS_FILE),
        table(&[0.5, 0.7]).to_csv().as_bytes(),
    )
    .unwrap();
    let e = store.load("s", "cpu").unwrap_err().to_string();
    assert!(e.contains("by hand") && e.contains("metrics_sha256"), "{e}");
    // Carriage returns (a checkout with autocrlf) do not break the pair.
    let crlf = table(&[0.5, 0.6]).to_csv().replace('\n', "\r\n");
    fsx::write_atomic(&gdir.join(METRICS_FILE), crlf.as_bytes()).unwrap();
    store.load("s", "cpu").unwrap().unwrap();
}

#[test]
fn a_header_left_without_its_series_is_listed_torn_and_never_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let store = GoldenStore::with_ci(dir.path(), false);
    store
        .write_pending("s", "cpu", &table(&[0.1]), &prov(), None, None)
        .unwrap();
    store.accept(&[]).unwrap();
    store
        .write_pending("s", "cpu", &table(&[0.9]), &prov(), None, None)
        .unwrap();
    // The run died between the header and the series.
    let gdir = dir.path().join("s/cpu");
    fsx::remove_file(&gdir.join("metrics.csv.new")).unwrap();
    let pending = store.pending().unwrap();
    assert!(pending[0].diff_summary.starts_with("torn"), "{pending:?}");
    assert!(matches!(
        store.accept(&[]),
        Err(GoldenError::TornPending {
            missing: "metrics.csv.new",
            ..
        })
    ));
    assert_eq!(
        store.load("s", "cpu").unwrap().unwrap().table,
        table(&[0.1])
    );
    store.reject(&[]).unwrap();
    assert!(store.pending().unwrap().is_empty());
}

#[test]
fn header_round_trips_odd_strings() {
    let mut p = prov();
    p.device = "weird: \"quoted\" # not a comment\n".into();
    p.git_commit = None;
    let text = render_header("s", "cpu", &table(&[1.0]), &p, None, None);
    let (back, rules, bands) = parse_header(&text, Path::new("golden.yaml")).unwrap();
    assert_eq!(back, p);
    assert_eq!(rules, None);
    assert_eq!(bands, None);
    // The blessed bands round-trip too.
    let b: BlessedBands = [("m".to_string(), vec![(1, 10, 0.125), (11, 20, 0.5)])].into();
    let text = render_header("s", "cpu", &table(&[1.0]), &p, None, Some(&b));
    let (_, _, back) = parse_header(&text, Path::new("golden.yaml")).unwrap();
    assert_eq!(back, Some(b));
}
