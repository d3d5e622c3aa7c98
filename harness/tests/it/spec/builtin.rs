//! The Arctic layer built into the binary: `include: arctic` (or its shipped path) from a
//! scenario that lives alone, misspelt `remote_backend` knobs refused at their line in any
//! repository, and a repository's own layer file overriding the built-in one.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{load, only_error, shipped, Root};
use rlharness::scenario::Origin;

/// A scenario alone in a fresh folder (no `scenarios/`, no defaults, no backend files).
fn alone(dir: &Path, remote_backend: &str) -> PathBuf {
    let p = dir.join("mine.yaml");
    let text = format!(
        "name: mine\ndescription: a scenario alone in a repository\nseed: 1\nsteps: 2\n\
         driver: {{kind: builtin}}\nbackend: {{kind: mock}}\nconfig:\n  remote_backend:\n{remote_backend}"
    );
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_scenario_alone_includes_the_built_in_arctic_layer_by_name_or_path() {
    for include in ["arctic", "backends/arctic.yaml"] {
        let tmp = tempfile::tempdir().unwrap();
        let p = alone(
            tmp.path(),
            &format!("    include: {include}\n    train:\n      zorro_train: {{enable: true}}\n"),
        );
        let s = load(&p, &[]).unwrap_or_else(|e| panic!("{include}: {e}"));
        let get = |k: &str| {
            s.config
                .get(k)
                .unwrap_or_else(|| panic!("{include}: no {k}"))
        };
        assert_eq!(get("remote_backend.train.zorro_train.enable").value, true);
        // The rest comes from the built-in layer, and says so.
        let seed = get("remote_backend.train.determinism.seed");
        assert_eq!(seed.value, 42);
        match &seed.origin {
            Origin::Default { path, .. } => {
                assert_eq!(path, Path::new("<built-in>/backends/arctic.yaml"))
            }
            other => panic!("{include}: {other:?}"),
        }
        assert!(
            s.sources
                .iter()
                .any(|p| p == Path::new("<built-in>/backends/arctic.yaml")),
            "{:?}",
            s.sources
        );
    }
}

#[test]
fn a_misspelt_arctic_knob_is_refused_at_its_line_in_any_repository() {
    // Included (by name) and not included at all: both are checked against the layer.
    for (body, line) in [
        (
            "    include: arctic\n    train:\n      zorro_train: {enabel: true}\n",
            11,
        ),
        ("    train:\n      zorro_train:\n        enabel: true\n", 11),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let p = alone(tmp.path(), body);
        let e = only_error(load(&p, &[]));
        assert_eq!(
            (e.line, e.key_path.as_str()),
            (line, "config.remote_backend.train.zorro_train.enabel"),
            "{e}"
        );
        assert!(e.message.contains("did you mean `enable`?"), "{e}");
    }
    // Not included: the message says what it was checked against and how to include it.
    let tmp = tempfile::tempdir().unwrap();
    let p = alone(tmp.path(), "    colocat: true\n");
    let e = only_error(load(&p, &[]));
    assert!(e.message.contains("did you mean `colocate`?"), "{e}");
    assert!(e.message.contains("<built-in>/backends/arctic.yaml"), "{e}");
    assert!(e.message.contains("`include: arctic`"), "{e}");
}

#[test]
fn a_remote_backend_written_without_include_keeps_only_its_own_values() {
    let tmp = tempfile::tempdir().unwrap();
    let p = alone(
        tmp.path(),
        "    train:\n      zorro_train: {enable: true}\n",
    );
    let s = load(&p, &[]).unwrap();
    assert_eq!(
        s.config
            .get("remote_backend.train.zorro_train.enable")
            .unwrap()
            .value,
        true
    );
    assert!(s.config.get("remote_backend.colocate").is_none());
}

#[test]
fn the_repositorys_own_layer_file_overrides_the_built_in_one() {
    let r = Root::new();
    let own = std::fs::read_to_string(shipped("backends/arctic.yaml")).unwrap()
        + "\n# A knob of this repository's adapter.\nhouse_knob: 1\n";
    r.write("backends/arctic.yaml", &own);
    for body in [
        "  remote_backend:\n    include: arctic\n    house_knob: 2\n",
        "  remote_backend:\n    house_knob: 2\n",
    ] {
        let p = r.scenario("own.yaml", body);
        let s = load(&p, &[]).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(s.config.get("remote_backend.house_knob").unwrap().value, 2);
    }
}

#[test]
fn an_include_that_exists_nowhere_names_the_built_in_layers() {
    let tmp = tempfile::tempdir().unwrap();
    let p = alone(tmp.path(), "    include: backends/nope.yaml\n");
    let e = only_error(load(&p, &[]));
    assert!(
        e.message
            .contains("included file `backends/nope.yaml` not found"),
        "{e}"
    );
    assert!(
        e.message
            .contains("built in: `backends/arctic.yaml` (or `arctic`)"),
        "{e}"
    );
}

/// The shipped real-verl scenario, copied alone into a fresh git repository with one knob
/// misspelt: `rlharness check` refuses it, exit 2, with the right spelling.
#[test]
fn check_refuses_a_misspelt_knob_in_a_fresh_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(repo)
        .status()
        .unwrap();
    assert!(git.success());
    let text = std::fs::read_to_string(shipped("verl/real-verl-arctic-grpo.yaml")).unwrap();
    let p = repo.join("real-verl-arctic-grpo.yaml");
    std::fs::write(&p, &text).unwrap();
    // Its trainer program beside it, as shipped (`check` resolves it).
    std::fs::copy(shipped("verl/verl-arctic.sh"), repo.join("verl-arctic.sh")).unwrap();
    let check = |p: &Path| {
        Command::new(env!("CARGO_BIN_EXE_rlharness"))
            .arg("check")
            .arg(p)
            .current_dir(repo)
            .output()
            .unwrap()
    };
    let ok = check(&p);
    let out =
        String::from_utf8_lossy(&ok.stdout).into_owned() + &String::from_utf8_lossy(&ok.stderr);
    assert_eq!(ok.status.code(), Some(0), "the copy as shipped: {out}");

    let typo = text.replace("        enable: true", "        enabel: true");
    assert_ne!(typo, text);
    std::fs::write(&p, typo).unwrap();
    let bad = check(&p);
    let out =
        String::from_utf8_lossy(&bad.stdout).into_owned() + &String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{out}");
    assert!(
        out.contains("remote_backend.train.zorro_train.enabel"),
        "{out}"
    );
    assert!(out.contains("did you mean `enable`?"), "{out}");
}
