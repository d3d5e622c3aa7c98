//! Only with the `torch` feature: bakes libtorch's library folder (and the CUDA runtime folder
//! the PyPI wheel keeps beside it) into the rpath of every binary and test binary, so they run
//! without LD_LIBRARY_PATH (torch-sys's own rpath does not reach them), and records the
//! PyTorch version for `run.json`. Every build records the commit it was built from (when
//! it is built from a git checkout), so a binary run from another tree (a copied working tree,
//! an H200 box) still names its code.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    build_commit();
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    // torch-sys (`links = "tch"`) exports `cargo:libtorch_lib=...`, which reaches a direct
    // dependent as DEP_TCH_LIBTORCH_LIB.
    let Some(lib) = std::env::var_os("DEP_TCH_LIBTORCH_LIB").map(PathBuf::from) else {
        println!("cargo:warning=torch-sys did not export DEP_TCH_LIBTORCH_LIB; set LD_LIBRARY_PATH to run");
        println!("cargo:rustc-env=RLHARNESS_TORCH_VERSION=unknown");
        return;
    };
    let mut dirs = vec![lib.clone()];
    // `<site>/torch/lib` -> `<site>/nvidia/cu13/lib` in the PyPI wheel layout.
    if let Some(site) = lib.parent().and_then(|torch| torch.parent()) {
        let cuda = site.join("nvidia").join("cu13").join("lib");
        if cuda.is_dir() {
            dirs.push(cuda);
        }
    }
    for dir in dirs {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    // The wheel's `torch/version.py` holds `__version__ = '2.11.0+cu130'`.
    let version_py = lib.parent().map(|t| t.join("version.py"));
    let version = version_py
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("__version__"))
                .and_then(|l| l.split(['\'', '"']).nth(1).map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into());
    if let Some(p) = version_py {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rustc-env=RLHARNESS_TORCH_VERSION={version}");
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
