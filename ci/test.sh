#!/usr/bin/env bash
# The README's test command: formatting, lints (with and without the `torch` feature, since the
# core harness must build without libtorch), and the whole test suite with the torch backend.
# Sets up the project-local libtorch first (ci/setup-libtorch.sh; idempotent), and the Python
# test dependencies of the conformance suite (ci/python-deps.sh; idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-libtorch.sh
# The conformance suite's Python test dependencies (project-local .pydeps/, idempotent).
bash ci/python-deps.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --features torch -- -D warnings
cargo test --workspace --features torch --no-fail-fast
# Its own step: the Ray executor against a real local Ray head (installs Ray into .venv-ray/,
# starts and always stops its own head). A Ray that cannot be installed or started fails here.
bash ci/ray-tests.sh
# The fuzz targets (their own workspace) are built, not run: ci/FUZZING.md says how to run them.
cargo check --manifest-path harness/fuzz/Cargo.toml --bins
