#!/usr/bin/env bash
# Installs the slim libtorch (PyTorch 2.11.0's CUDA 13.0 Linux wheel, unpacked, without its
# Python dependencies) into the project-local `.libtorch/`, which `.cargo/config.toml` points
# `LIBTORCH` at. Idempotent: a version stamp skips the work when the right version is there.
#
# Why the wheel: tch 0.24 needs exactly PyTorch 2.11.0, its own download host is unreachable
# from our machines, and PyPI has no CPU-only wheel. `libtorch_cpu.so` needs libcudart and
# libcupti even on CPU; the wheel's RPATH finds them under `site/nvidia/cu13/lib`, and
# `harness/build.rs` adds both directories to the binary's rpath.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly TORCH_VERSION="2.11.0"
readonly CUDART_SPEC="nvidia-cuda-runtime==13.0.96.*"
readonly CUPTI_SPEC="nvidia-cuda-cupti==13.0.85.*"
readonly ROOT=".libtorch"
readonly STAMP="$ROOT/VERSION"
readonly WANT="torch==$TORCH_VERSION $CUDART_SPEC $CUPTI_SPEC"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -f "$ROOT/site/torch/lib/libtorch_cpu.so" ]]; then
    echo "libtorch $TORCH_VERSION already installed in $ROOT"
    exit 0
fi

PYTHON="${PYTHON:-python3}"
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
echo "libtorch $TORCH_VERSION installed in $ROOT"
