//! Only with the `torch` feature: bakes libtorch's library folder (and the CUDA runtime folder
//! the PyPI wheel keeps beside it) into the rpath of the `rlharness-torch` executable and this
//! crate's test and example binaries, so they run without LD_LIBRARY_PATH (torch-sys's own
//! rpath does not reach them), and records the PyTorch version for `run.json`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
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
