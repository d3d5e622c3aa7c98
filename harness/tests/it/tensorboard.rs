//! The TensorBoard export, read back with the `tensorboard` Python package's own reader
//! (`EventAccumulator`, installed into `.pydeps/` by `bash ci/python-deps.sh`): every metric of
//! the run's `metrics.csv` at its steps (as float32), the golden's series as `golden/<metric>`
//! and the judge's bands as `band/<rule>/lo|hi`, from `run --tensorboard DIR` and from the
//! scenario's `metrics.tensorboard: true`; a folder that cannot be written is a note, never
//! the run's failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{manifest, repo, rlharness_run, scenarios_root_in, text};

/// Every scalar tag of the event files in `dir`, as TensorBoard's reader sees them.
pub(crate) fn read_scalars(dir: &Path) -> BTreeMap<String, Vec<(u64, f64)>> {
    let mut path = vec![repo().join(".pydeps")];
    if let Some(p) = std::env::var_os("PYTHONPATH") {
        path.extend(std::env::split_paths(&p));
    }
    let out = Command::new("python3")
        .env("PYTHONPATH", std::env::join_paths(path).unwrap())
        .arg(repo().join("harness/tests/fixtures/tensorboard/read_events.py"))
        .arg(dir)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the tensorboard package's reader failed on {} (`bash ci/python-deps.sh` installs it \
         into .pydeps/):\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: BTreeMap<String, Vec<(u64, String)>> = serde_json::from_slice(&out.stdout).unwrap();
    doc.into_iter()
        .map(|(tag, points)| {
            let points = points
                .into_iter()
                .map(|(s, v)| (s, v.parse::<f64>().unwrap()))
                .collect();
            (tag, points)
        })
        .collect()
}

/// A `metrics.csv` as `metric -> [(step, value)]` (empty cells left out).
fn csv_series(path: &Path) -> BTreeMap<String, Vec<(u64, f64)>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut out: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        let step: u64 = cells[0].parse().unwrap();
        for (name, cell) in header.iter().zip(&cells).skip(1) {
            if !cell.is_empty() {
                let v = match *cell {
                    "NaN" => f64::NAN,
                    c => c.parse().unwrap(),
                };
                out.entry(name.to_string()).or_default().push((step, v));
            }
        }
    }
    out
}

/// `got` holds exactly `want`'s points, each value as the float32 TensorBoard stores.
#[track_caller]
fn same_points(tag: &str, got: Option<&Vec<(u64, f64)>>, want: &[(u64, f64)]) {
    let got = got.unwrap_or_else(|| panic!("no scalar tag {tag}"));
    let steps: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
    let want_steps: Vec<u64> = want.iter().map(|(s, _)| *s).collect();
    assert_eq!(steps, want_steps, "{tag}: steps");
    for ((s, g), (_, w)) in got.iter().zip(want) {
        let w32 = *w as f32;
        assert!(
            (w32.is_nan() && g.is_nan()) || *g as f32 == w32,
            "{tag} at step {s}: {g} read back, {w} written"
        );
    }
}

/// Every metric of the run's `metrics.csv` is a scalar tag of `tb`, at the same steps with the
/// same values.
#[track_caller]
pub(crate) fn assert_every_metric(tb: &BTreeMap<String, Vec<(u64, f64)>>, run_dir: &Path) {
    let series = csv_series(&run_dir.join("metrics.csv"));
    assert!(
        !series.is_empty(),
        "an empty metrics.csv in {}",
        run_dir.display()
    );
    for (metric, points) in &series {
        same_points(metric, tb.get(metric), points);
    }
}

/// The golden's series as `golden/<metric>` and every compared point's band of the verdict as
/// `band/<rule>/lo|hi` at each step of its window.
#[track_caller]
fn assert_golden_and_bands(tb: &BTreeMap<String, Vec<(u64, f64)>>, run_dir: &Path) {
    let m = manifest(run_dir);
    let golden = repo()
        .join("golden")
        .join(m["scenario"].as_str().unwrap())
        .join(m["hardware"].as_str().unwrap())
        .join("metrics.csv");
    for (metric, points) in csv_series(&golden) {
        same_points(
            &format!("golden/{metric}"),
            tb.get(&format!("golden/{metric}")),
            &points,
        );
    }
    let verdict: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("verdict.json")).unwrap()).unwrap();
    let mut bands = 0;
    for rule in verdict["rules"].as_array().unwrap() {
        let id = rule["rule"].as_str().unwrap();
        for side in ["lo", "hi"] {
            let want: Vec<(u64, f64)> = rule["points"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["band"][side].is_f64())
                .flat_map(|p| {
                    let v = p["band"][side].as_f64().unwrap();
                    (p["first"].as_u64().unwrap()..=p["last"].as_u64().unwrap())
                        .map(move |s| (s, v))
                })
                .collect();
            if !want.is_empty() {
                bands += 1;
                let tag = format!("band/{id}/{side}");
                same_points(&tag, tb.get(&tag), &want);
            }
        }
    }
    assert!(bands >= 4, "the golden rules' bands: {bands}");
}

/// The one run directory under `out/<scenario>/` (not `latest`).
fn only_run(out: &Path, scenario: &str) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(out.join(scenario))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "latest")
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.into_iter().next().unwrap()
}

#[test]
fn run_tensorboard_writes_every_metric_the_golden_and_the_bands_under_scenario_and_run_id() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, tb_root) = (tmp.path().join("out"), tmp.path().join("tb"));
    let o = rlharness_run(
        &[
            "scenarios/smoke/mock-gsm8k-grpo.yaml",
            "--tensorboard",
            tb_root.to_str().unwrap(),
        ],
        &out,
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let run_dir = only_run(&out, "mock-gsm8k-grpo");
    let tb_dir = tb_root
        .join("mock-gsm8k-grpo")
        .join(run_dir.file_name().unwrap());
    let files: Vec<String> = std::fs::read_dir(&tb_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.len() == 1 && files[0].starts_with("events.out.tfevents."),
        "{files:?}"
    );
    let tb = read_scalars(&tb_dir);
    assert_every_metric(&tb, &run_dir);
    assert_golden_and_bands(&tb, &run_dir);
    // Without the scenario's key, nothing inside the run directory.
    assert!(!run_dir.join("tensorboard").exists());
}

#[test]
fn the_scenario_key_writes_into_the_run_directory_and_a_failed_folder_is_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let root = scenarios_root_in(tmp.path());
    let scenario = root.join("mock-gsm8k-grpo.yaml");
    let base =
        std::fs::read_to_string(repo().join("scenarios/smoke/mock-gsm8k-grpo.yaml")).unwrap();
    let with_key = base.replace("metrics:\n", "metrics:\n  tensorboard: true\n");
    assert_ne!(with_key, base);
    std::fs::write(&scenario, with_key).unwrap();
    // `--tensorboard` at a file: that folder cannot be made; the run goes on.
    let blocker = tmp.path().join("not-a-folder");
    std::fs::write(&blocker, "x").unwrap();
    let out = tmp.path().join("out");
    let golden = repo().join("golden");
    let o = rlharness_run(
        &[
            scenario.to_str().unwrap(),
            "--golden",
            golden.to_str().unwrap(),
            "--tensorboard",
            blocker.to_str().unwrap(),
        ],
        &out,
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let run_dir = only_run(&out, "mock-gsm8k-grpo");
    let tb = read_scalars(&run_dir.join("tensorboard"));
    assert_every_metric(&tb, &run_dir);
    assert_golden_and_bands(&tb, &run_dir);
    let notes = manifest(&run_dir)["notes"].to_string();
    assert!(
        notes.contains("TensorBoard export stopped") && notes.contains("not-a-folder"),
        "{notes}"
    );
    let report = std::fs::read_to_string(run_dir.join("report.md")).unwrap();
    assert!(report.contains("TensorBoard export stopped"), "{report}");
}
