//! Every knob accounted for: with one row of the knob manifest deleted, `rlharness check`
//! refuses the key that row covered (exit 2, at the line that defines it) and `propagate` lists
//! it first, as unaccounted (exit 1). The shipped manifest accounts for every key of the shipped
//! scenarios (the `check` of `scenarios/` elsewhere passes).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn shipped(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(rel)
}

const KNOB: &str = "actor_rollout_ref.actor.optim.weight_decay";

/// A scenarios root with the shipped defaults and Arctic layer, the manifest without `KNOB`'s
/// row, and one small mock scenario (the builtin driver, three steps).
fn root_without_row(dir: &Path) -> PathBuf {
    let root = dir.join("scenarios");
    std::fs::create_dir_all(root.join("defaults")).unwrap();
    std::fs::create_dir_all(root.join("backends")).unwrap();
    for rel in ["defaults/verl.yaml", "backends/arctic.yaml"] {
        std::fs::copy(shipped(rel), root.join(rel)).unwrap();
    }
    let manifest = std::fs::read_to_string(shipped("backends/arctic.knobs.yaml")).unwrap();
    let row = format!("  - path: {KNOB}\n");
    let start = manifest
        .find(&row)
        .expect("the shipped manifest has the row");
    let end = start + row.len() + manifest[start + row.len()..].find("\n  - path:").unwrap() + 1;
    let without = format!("{}{}", &manifest[..start], &manifest[end..]);
    assert!(!without.contains(&row));
    std::fs::write(root.join("backends/arctic.knobs.yaml"), without).unwrap();
    let scenario = root.join("small.yaml");
    std::fs::write(
        &scenario,
        "name: small\ndescription: one small mock run\nseed: 1\nsteps: 3\n\
         driver: {kind: builtin}\nbackend: {kind: mock}\nconfig:\n  trainer:\n    \
         remote_backend: arctic\n  remote_backend:\n    include: backends/arctic.yaml\n",
    )
    .unwrap();
    scenario
}

fn rlharness(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlharness"))
        .args(args)
        .current_dir(cwd)
        .env("CI", "true")
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn check_refuses_a_knob_whose_manifest_row_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = root_without_row(tmp.path());
    let o = rlharness(&["check", scenario.to_str().unwrap()], tmp.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    // At the defaults file's line that defines it, once, naming the manifest and both ways out.
    let line = out
        .lines()
        .find(|l| l.contains(&format!("config.{KNOB}")))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("defaults/verl.yaml:"), "{line}");
    assert!(line.contains("unaccounted knob"), "{line}");
    assert!(line.contains("backends/arctic.knobs.yaml"), "{line}");
    assert!(line.contains("`not_sent`"), "{line}");
    assert_eq!(out.matches(&format!("config.{KNOB}:")).count(), 1, "{out}");
    // Nothing else is unaccounted.
    assert_eq!(out.matches("unaccounted knob").count(), 1, "{out}");
}

#[test]
fn the_shipped_manifest_accounts_for_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = root_without_row(tmp.path());
    std::fs::copy(
        shipped("backends/arctic.knobs.yaml"),
        scenario
            .parent()
            .unwrap()
            .join("backends/arctic.knobs.yaml"),
    )
    .unwrap();
    let o = rlharness(&["check", scenario.to_str().unwrap()], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A key the scenario adds itself is unaccounted too, at its own line.
    let added = rlharness(
        &[
            "propagate",
            scenario.to_str().unwrap(),
            "--no-progress",
            "--knobs",
            "remote_backend.train.logits.compute_in_fp32",
            "--set",
            "+config.remote_backend.train.new_knob=1",
            "--out",
            tmp.path().join("out").to_str().unwrap(),
        ],
        tmp.path(),
    );
    let out = text(&added);
    assert_eq!(added.status.code(), Some(1), "{out}");
    assert!(
        out.contains("UNACCOUNTED remote_backend.train.new_knob (--set"),
        "{out}"
    );
}

#[test]
fn propagate_lists_a_knob_whose_manifest_row_is_gone_first() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = root_without_row(tmp.path());
    let out_dir = tmp.path().join("out");
    let o = rlharness(
        &[
            "propagate",
            scenario.to_str().unwrap(),
            "--no-progress",
            "--knobs",
            "remote_backend.train.logits.compute_in_fp32",
            "--out",
            out_dir.to_str().unwrap(),
        ],
        tmp.path(),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let summary = out
        .lines()
        .find(|l| l.starts_with("small: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(summary.starts_with("small: 1 unaccounted; "), "{summary}");
    let first = out
        .lines()
        .skip_while(|l| !l.starts_with("small: "))
        .nth(1)
        .unwrap_or_default();
    assert!(
        first.contains(&format!("UNACCOUNTED {KNOB} (default (")),
        "{out}"
    );
    // The report's first section after the header, and propagation.json.
    let dir = std::fs::read_dir(out_dir.join("small"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("propagate-"))
        })
        .unwrap();
    let md = std::fs::read_to_string(dir.join("propagation.md")).unwrap();
    let section = md
        .find("## Knobs the manifest does not account for")
        .unwrap();
    assert!(section < md.find("| knob | verdict").unwrap(), "{md}");
    assert!(md.contains(&format!("- `{KNOB}` (default (")), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("propagation.json")).unwrap())
            .unwrap();
    assert_eq!(json["unaccounted"][0]["path"], KNOB, "{json}");
}
