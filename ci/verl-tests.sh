#!/usr/bin/env bash
# The real-verl tests: real verl 0.7.1 and the real Arctic adapter, unmodified, drive rlharness
# (harness/tests/it/real_verl.rs, the real-verl cases of propagate and the wire conformance, and
# `bisect --propagate` on the adapter, harness/tests/it/bisect/real_verl.rs; all ignored in a plain
# `cargo test`, all matched by the `real_verl::` filter). Installs verl's environment (ci/verl-install.sh, pinned,
# project-local, idempotent), extracts the two source trees after checking their sha256
# (ci/upstream.sh) and points VERL_SRC and ARCTIC_SRC at them, then runs the tests one at a time
# (the adapter's port 7000 is fixed). An install or extraction that fails fails the run, with
# its log: never a skip.
#
# What verl starts is kept apart from the user's own settings: its Ray cluster gets a temp dir
# of its own and the dashboard is off (scenarios/verl/verl-arctic.sh), and everything a run
# starts is stopped by the harness when the run ends (run token, driver/strays.rs).
# FEATURES (default `--features torch`) is passed to cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES=${FEATURES---features torch}
started=$SECONDS
bash ci/verl-install.sh
eval "$(bash ci/upstream.sh)"
export VERL_SRC ARCTIC_SRC
echo "verl-tests: VERL_SRC=$VERL_SRC ARCTIC_SRC=$ARCTIC_SRC"
# A short path of its own for verl's Ray session (its Unix sockets live there).
RAY_TMPDIR=$(mktemp -d /tmp/rlh-verl.XXXXXX)
export RAY_TMPDIR
trap 'rm -rf "$RAY_TMPDIR"' EXIT
# shellcheck disable=SC2086
cargo test --workspace $FEATURES --test it -- --ignored --test-threads 1 --nocapture real_verl::
echo "verl-tests: done in $((SECONDS - started)) s"
