#!/usr/bin/env bash
# Installs the slim libtorch (PyTorch 2.11.0's CUDA 13.0 Linux wheel, unpacked, without its
# Python dependencies) into the project-local `.libtorch/`, which `.cargo/config.toml` points
# `LIBTORCH` at. Idempotent: a version stamp skips the work when the right version is there.
#
# Why the wheel: tch 0.24 needs exactly PyTorch 2.11.0, its own download host is unreachable
# from our machines, and PyPI has no CPU-only wheel. `libtorch_cpu.so` needs libcudart and
# libcupti even on CPU; the wheel's RPATH finds them under `site/nvidia/cu13/lib`, and
# `harness/build.rs` adds both directories to the binary's rpath.
#
# Beside it, in `.libtorch/crt/`, the CUDA runtime's remaining headers (`nvidia-cuda-crt`, 134 kB),
# which the CUDA graph shim of the torch backend (harness/torch/csrc) is compiled against.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly TORCH_VERSION="2.11.0"
readonly CUDART_SPEC="nvidia-cuda-runtime==13.0.96.*"
readonly CUPTI_SPEC="nvidia-cuda-cupti==13.0.85.*"
readonly ROOT=".libtorch"
readonly STAMP="$ROOT/VERSION"
readonly CRT_SPEC="nvidia-cuda-crt==13.0.88"
readonly WANT="torch==$TORCH_VERSION $CUDART_SPEC $CUPTI_SPEC"
PYTHON="${PYTHON:-python3}"

# The headers the CUDA graph shim needs besides the runtime's (crt/host_config.h and friends).
install_crt() {
    local want_crt="$CRT_SPEC" stamp="$ROOT/crt/VERSION"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want_crt" && -f "$ROOT/crt/nvidia/cu13/include/crt/host_config.h" ]]; then
        return 0
    fi
    rm -rf "$ROOT/crt"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$ROOT/crt" "$want_crt"
    if [[ ! -f "$ROOT/crt/nvidia/cu13/include/crt/host_config.h" ]]; then
        echo "error: expected $ROOT/crt/nvidia/cu13/include/crt/host_config.h after the install" >&2
        exit 1
    fi
    echo "$want_crt" > "$stamp"
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -f "$ROOT/site/torch/lib/libtorch_cpu.so" ]]; then
    install_crt
    echo "libtorch $TORCH_VERSION already installed in $ROOT"
    exit 0
fi

if ! command -v "$PYTHON" >/dev/null; then
    echo "error: $PYTHON not found; it is needed to fetch the PyTorch wheel" >&2
    exit 1
fi

echo "installing libtorch $TORCH_VERSION into $ROOT (about 1.2 GB)"
rm -rf "$ROOT/site" "$STAMP"
mkdir -p "$ROOT"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --target "$ROOT/site" "torch==$TORCH_VERSION" "$CUDART_SPEC" "$CUPTI_SPEC"

for lib in "$ROOT/site/nvidia/cu13/lib/libcudart.so.13" "$ROOT/site/nvidia/cu13/lib/libcupti.so.13"; do
    if [[ ! -f "$lib" ]]; then
        echo "error: expected $lib after the install" >&2
        exit 1
    fi
done
echo "$WANT" > "$STAMP"
install_crt
echo "libtorch $TORCH_VERSION installed in $ROOT"
