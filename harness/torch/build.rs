//! Only with the `torch` feature: bakes libtorch's library folder (and the CUDA runtime folder
//! the PyPI wheel keeps beside it) into the rpath of the `rlharness-torch` executable and this
//! crate's test and example binaries, so they run without LD_LIBRARY_PATH (torch-sys's own
//! rpath does not reach them), records the PyTorch version for `run.json`, and builds the CUDA
//! graph shim (`csrc/cuda_graph.cpp`) into a shared object that the crate embeds and loads only
//! on CUDA (`src/cuda_graph.rs`).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(rlh_cuda_graph)");
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
    #[cfg(feature = "torch")]
    build_cuda_graph_shim(&lib);
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

/// Compiles `csrc/cuda_graph.cpp` against libtorch's headers into `$OUT_DIR/librlh_cuda_graph.so`
/// and sets `cfg(rlh_cuda_graph)`. The object links libtorch_cuda, which needs cuBLAS, cuDNN and
/// the rest at load time: the executable therefore embeds it and opens it only on CUDA, so a
/// CPU-only host never loads it. Needs the CUDA runtime's headers (the PyPI wheels
/// `nvidia-cuda-runtime` and `nvidia-cuda-crt`, which `ci/setup-libtorch.sh` installs); without
/// them the engine decodes without graphs, and the build says so.
#[cfg(feature = "torch")]
fn build_cuda_graph_shim(lib: &std::path::Path) {
    let src = PathBuf::from("csrc/cuda_graph.cpp");
    println!("cargo:rerun-if-changed={}", src.display());
    let torch = lib.parent().unwrap_or(lib);
    // `<root>/site/torch` -> `<root>/site/nvidia/cu13/include` and `<root>/crt/nvidia/cu13/include`.
    let site = torch.parent().unwrap_or(torch);
    let root = site.parent().unwrap_or(site);
    let cuda_includes = [
        site.join("nvidia/cu13/include"),
        root.join("crt/nvidia/cu13/include"),
    ];
    let have = |rel: &str| cuda_includes.iter().any(|d| d.join(rel).is_file());
    if !(have("cuda_runtime_api.h") && have("crt/host_config.h")) {
        println!(
            "cargo:warning=no CUDA runtime headers beside libtorch (looked in {} and {}): \
             CUDA decoding runs without graphs; ci/setup-libtorch.sh installs them",
            cuda_includes[0].display(),
            cuda_includes[1].display()
        );
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let so = out.join("librlh_cuda_graph.so");
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    let compiler = cc::Build::new().cpp(true).get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args(["-std=c++17", "-O2", "-fPIC", "-shared", "-w"])
        .arg(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .arg("-DGLOG_USE_GLOG_EXPORT")
        .arg("-I")
        .arg(torch.join("include"))
        .arg("-I")
        .arg(torch.join("include/torch/csrc/api/include"));
    for dir in &cuda_includes {
        cmd.arg("-I").arg(dir);
    }
    cmd.arg(&src)
        .arg("-L")
        .arg(lib)
        .args(["-ltorch_cuda", "-lc10_cuda", "-lc10", "-o"])
        .arg(&so);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler for {}: {e}", src.display()));
    if !status.success() {
        panic!("compiling {} failed ({status})", src.display());
    }
    println!("cargo:rustc-cfg=rlh_cuda_graph");
    println!("cargo:rustc-env=RLH_CUDA_GRAPH_SO={}", so.display());
}
