#!/usr/bin/env bash
# The README's test command: formatting, lints (with and without the `torch` feature, since the
# core harness must build without libtorch), and the whole test suite with the torch backend.
# Sets up the project-local libtorch first (ci/setup-libtorch.sh; idempotent), and the Python
# test dependencies of the conformance suite (ci/python-deps.sh; idempotent).
# Each step prints how long it took, and the total at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() {
    local t=$SECONDS
    "$@"
    echo "ci/test.sh: \`$*\` took $((SECONDS - t)) s" >&2
}
step bash ci/setup-libtorch.sh
# The conformance suite's Python test dependencies (project-local .pydeps/, idempotent).
step bash ci/python-deps.sh
step cargo fmt --all --check
step cargo clippy --workspace --all-targets -- -D warnings
step cargo clippy --workspace --all-targets --features torch -- -D warnings
step cargo test --workspace --features torch --no-fail-fast
# Its own step: the Ray executor against a real local Ray head (installs Ray into .venv-ray/,
# starts and always stops its own head). A Ray that cannot be installed or started fails here.
step bash ci/ray-tests.sh
# The fuzz targets (their own workspace) are built, not run: ci/FUZZING.md says how to run them.
step cargo check --manifest-path harness/fuzz/Cargo.toml --bins
echo "ci/test.sh: passed in $((SECONDS - started)) s" >&2
