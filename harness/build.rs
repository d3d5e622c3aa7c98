//! Every build records the commit it was built from (when it is built from a git checkout), so
//! a binary run from another tree (a copied working tree, an H200 box) still names its code.
//! libtorch is linked only by the `rlharness-torch` crate (`torch/build.rs`).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    build_commit();
}

/// `RLHARNESS_BUILD_COMMIT`: `git rev-parse --short=12 HEAD` of the checkout, with `-dirty` when
/// the crate's tracked files differ from it; rebuilt when HEAD moves (its reflog changes on
/// every commit, checkout and reset) or a source changes. Nothing outside a checkout.
fn build_commit() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    // Only paths that exist: cargo reruns a build script whose watched file is missing on
    // every build.
    for f in ["HEAD", "logs/HEAD"] {
        let p = Path::new(&git_dir).join(f);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    // The crate's own sources (and the index) decide whether the build is of a dirty tree.
    for f in ["src", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let index = Path::new(&git_dir).join("index");
    if index.exists() {
        println!("cargo:rerun-if-changed={}", index.display());
    }
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        // `-dirty`: the binary holds changes to tracked files that no commit names.
        let dirty = git(&["status", "--porcelain", "--untracked-files=no", "--", "."]).is_some();
        let suffix = if dirty { "-dirty" } else { "" };
        println!("cargo:rustc-env=RLHARNESS_BUILD_COMMIT={commit}{suffix}");
    }
}
