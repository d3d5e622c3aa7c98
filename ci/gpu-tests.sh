#!/usr/bin/env bash
# The GPU lane: the tests ignored elsewhere because they need a CUDA device (the torch
# engine's CUDA-graph decoding, split layout and ZoRRo layout, the naming of a real GPU). Run it on a host
# with an NVIDIA GPU and the torch feature's libtorch (ci/setup-libtorch.sh); CI machines have
# no GPU, so CI does not run this lane (ci/README.md, "Test lanes"). On a host without a CUDA
# device it refuses with exit 2 rather than pass with nothing run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "ci/gpu-tests.sh: no NVIDIA GPU here (nvidia-smi -L failed); this lane needs one" >&2
    exit 2
fi
cargo test --release -p rlharness-torch --features torch --test torch_backend -- --ignored cuda_graph split_layout_on_cuda zorro_alignment_on_cuda
cargo test --release -p rlharness --features torch --lib -- --ignored host::tests::a_real_cuda_device
