#!/usr/bin/env bash
# The README's test command: formatting, lints (with and without the `torch` feature, since the
# core harness must build without libtorch), and the whole test suite with the torch backend.
# Sets up the project-local libtorch (ci/setup-libtorch.sh), the Python test dependencies of the
# conformance suite (ci/python-deps.sh) and Ray for the Ray executor's tests (ci/ray-install.sh),
# all idempotent. The installs download and unpack while the first builds compile: each runs in
# the background, its output in target/ci-logs/, and is waited for before the first step that
# needs it; a failed install fails the run with its log.
# Each step prints how long it took, and the total at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() {
    local t=$SECONDS
    "$@"
    echo "ci/test.sh: \`$*\` took $((SECONDS - t)) s" >&2
}
mkdir -p target/ci-logs
declare -A installs=()
install_in_background() {
    local script=$1
    bash "ci/$script.sh" >"target/ci-logs/$script.log" 2>&1 &
    installs[$script]=$!
}
# Waits for a background install; on failure prints its log and stops the run.
installed() {
    local script=$1 t=$SECONDS
    if ! wait "${installs[$script]}"; then
        cat "target/ci-logs/$script.log" >&2
        echo "ci/test.sh: ci/$script.sh failed" >&2
        exit 1
    fi
    cat "target/ci-logs/$script.log" >&2
    echo "ci/test.sh: waited $((SECONDS - t)) s for ci/$script.sh" >&2
}
# A run that stops early stops its installs too (each is idempotent: a half-done one is redone).
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
install_in_background setup-libtorch
install_in_background python-deps
install_in_background ray-install
step cargo fmt --all --check
step cargo clippy --workspace --all-targets -- -D warnings
installed setup-libtorch
step cargo clippy --workspace --all-targets --features torch -- -D warnings
installed python-deps
step cargo test --workspace --features torch --no-fail-fast
# Its own step: the Ray executor against a real local Ray head (starts and always stops its own
# head). A Ray that cannot be installed or started fails here.
installed ray-install
step bash ci/ray-tests.sh
# The fuzz targets (their own workspace) are checked, not run: ci/FUZZING.md says how to run
# them. In the main target directory, whose checked dependencies they share.
step cargo check --manifest-path harness/fuzz/Cargo.toml --bins --target-dir target
echo "ci/test.sh: passed in $((SECONDS - started)) s" >&2
