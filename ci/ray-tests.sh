#!/usr/bin/env bash
# The Ray executor against a real Ray: installs Ray (ci/ray-install.sh, pinned, project-local,
# idempotent), starts a local head bound to 127.0.0.1 with its own temp dir and free ports
# (ci/ray-head.sh) with token authentication on and a token of its own (generated per run, never
# the user's, never printed), runs the Ray tests (harness/tests/it/ray.rs, ignored in a plain
# `cargo test`) with RLHARNESS_RAY_ADDRESS pointing at it and RLHARNESS_RAY_TOKEN_FILE naming its
# token, measures the executor's overhead (submit -> first step) on it, and always stops that head
# (its own processes only), whatever happened. The user's Ray settings (~/.ray/auth_token,
# RAY_AUTH_*, RAY_ADDRESS) reach neither the head nor the runs the tests start.
# A Ray that cannot be installed or started is an error, never a skip.
# FEATURES (default `--features torch`) is passed to cargo: the torch build also runs the CPU
# flagship through Ray (rlharness-torch shipped with the job).
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES=${FEATURES---features torch}
started=$(date +%s)
bash ci/ray-install.sh
# A short path: Ray's session sockets live under the temp dir (a Unix socket path is limited).
HEAD_DIR=$(mktemp -d /tmp/rlh-ray.XXXXXX)
trap 'bash ci/ray-head.sh stop "$HEAD_DIR"' EXIT
# Build before the head starts (the build is the slow part on a 2-core machine), with the
# command ci/test.sh builds the tests with: under ci/test.sh it finds everything built. It also
# builds and places the `rlharness` and `rlharness-torch` executables the Ray jobs ship. A
# `cargo build` instead compiled the harness and both executables a second time beside the test
# run (without the dev-dependencies, regex-syntax and getrandom get other features).
# shellcheck disable=SC2086
cargo test --workspace $FEATURES --tests --no-run --quiet
RLHARNESS_RAY_ADDRESS=$(bash ci/ray-head.sh start "$HEAD_DIR")
RLHARNESS_RAY_TOKEN_FILE="$HEAD_DIR/token"
export RLHARNESS_RAY_ADDRESS RLHARNESS_RAY_TOKEN_FILE
echo "ray-tests: a local Ray head at $RLHARNESS_RAY_ADDRESS (temp dir $HEAD_DIR)"
# shellcheck disable=SC2086
cargo test --workspace $FEATURES --test it -- --ignored --test-threads 1 ray::
# The overhead per scenario on an idle head: submission to the first step in the job's log.
out=$(mktemp -d)
env -u RAY_AUTH_TOKEN -u RAY_AUTH_TOKEN_PATH -u RAY_AUTH_MODE CI=true RUST_LOG=error \
    "${CARGO_TARGET_DIR:-target}/debug/rlharness" run scenarios/smoke --out "$out" --no-progress \
    --executor ray --address "$RLHARNESS_RAY_ADDRESS" --ray-token-file "$RLHARNESS_RAY_TOKEN_FILE" \
    >/dev/null
grep -o 'first step [0-9.]* s after submission' "$out/index.md" | sed 's/^/ray-tests: overhead: /'
rm -rf "$out"
echo "ray-tests: done in $(( $(date +%s) - started )) s"
