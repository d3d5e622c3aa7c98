//! The README's tour runs as written: each line of its marked block, in order, in a copy of
//! the project's scenarios, goldens and test fixtures (what a fresh clone has), with the
//! binary under test first on PATH, exits with the code its comment gives.

use std::path::Path;
use std::process::Command;

use crate::common::{repo, text};

/// The tour's lines and the exit code each declares (`# exit N: ...`).
fn tour() -> Vec<(String, i32)> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find("<!-- tour:")
        .expect("README.md has the tour block");
    let block = &readme[start..];
    let body = block
        .split_once("```sh\n")
        .and_then(|(_, b)| b.split_once("\n```"))
        .expect("the tour is a ```sh block")
        .0;
    body.lines()
        .map(|l| {
            let (cmd, comment) = l
                .split_once("# exit ")
                .unwrap_or_else(|| panic!("README tour line without `# exit N`: {l}"));
            let code: i32 = comment
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("README tour line with no exit code: {l}"));
            (cmd.trim().to_string(), code)
        })
        .collect()
}

/// `cp -a`: links kept as links (the fixtures' layer folders are links).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success(), "cp -a {} {}", from.display(), to.display());
}

#[test]
fn readme_tour() {
    let lines = tour();
    assert!(lines.len() >= 8, "{lines:?}");
    let tmp = tempfile::tempdir().unwrap();
    for rel in ["scenarios", "golden", "harness/tests/fixtures"] {
        copy_tree(&repo().join(rel), &tmp.path().join(rel));
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_rlharness")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (cmd, want) in lines {
        let o = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(tmp.path())
            .env("PATH", &path)
            .env_remove("CI")
            .env_remove("GITHUB_ACTIONS")
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(want), "`{cmd}`:\n{}", text(&o));
    }
}
