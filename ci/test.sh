#!/usr/bin/env bash
# The README's test command: formatting, lints (with and without the `torch` feature, since the
# core harness must build without libtorch), and the whole test suite with the torch backend.
# Sets up the project-local libtorch (ci/setup-libtorch.sh), the Python test dependencies of the
# conformance suite (ci/python-deps.sh), Ray for the Ray executor's tests (ci/ray-install.sh)
# and real verl's environment for the real-verl tests (ci/verl-install.sh), all idempotent. The
# installs download and unpack while the first builds compile: each runs in the background, its
# output in target/ci-logs/, and is waited for before the first step that needs it; a failed
# install fails the run with its log.
# Each step prints how long it took, and the total at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
# A suite run compiles each workspace crate once per configuration: incremental compilation's
# caches only cost time here (a later plain `cargo` command rebuilds the two workspace crates
# once, with its own setting).
export CARGO_INCREMENTAL=0
started=$SECONDS
# Every step's time, printed again as one table at the end (the turnaround budget's evidence).
timings=()
step() {
    local t=$SECONDS rc=0
    "$@" || rc=$?
    echo "ci/test.sh: \`$*\` took $((SECONDS - t)) s" >&2
    timings+=("$(printf '%6d s  %s%s' $((SECONDS - t)) "$*" "$( ((rc == 0)) || echo "  (exit $rc)")")")
    return "$rc"
}
print_timings() {
    echo "ci/test.sh: step times" >&2
    printf '  %s\n' "${timings[@]}" >&2
    echo "ci/test.sh: total $((SECONDS - started)) s" >&2
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
# The step table is printed however the run ends.
trap 'kill $(jobs -p) 2>/dev/null || true; print_timings' EXIT
install_in_background setup-libtorch
install_in_background python-deps
install_in_background ray-install
install_in_background verl-install
install_in_background browser-install
# The suite starts a few hundred Python processes (the stand-in trainer, the conformance
# clients). Through a version manager's shim (pyenv's: a bash script) each start cost about
# 0.1 CPU-seconds more; they start from the interpreter the shim resolves to instead. (After
# the installs have started: a virtual environment made from this link would depend on it.)
if py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [[ -x "$py" ]]; then
    mkdir -p target/ci-bin
    ln -sfn "$py" target/ci-bin/python3
    export PATH="$PWD/target/ci-bin:$PATH"
fi
step cargo fmt --all --check
step cargo clippy --workspace --all-targets -- -D warnings
installed setup-libtorch
step cargo clippy --workspace --all-targets --features torch -- -D warnings
# `--tests`: the library's and binaries' unit tests and the integration tests. The examples are
# compiled by the clippy step above (`--all-targets`), and there are no doctests (every block in
# the docs is text, YAML or a shell line), so `cargo test`'s default would only link the
# examples again and run rustdoc over both crates for nothing.
step cargo test --workspace --features torch --tests --no-run
# The Ray executor against a real local Ray head (ci/ray-tests.sh starts and always stops its
# own head; a Ray that cannot be installed or started fails the run). It runs beside the main
# test run: its tests mostly wait on Ray (job start-up, polling), which leaves a core idle.
# Its output goes to target/ci-logs/ray-tests.log, printed when it ends.
installed ray-install
bash ci/ray-tests.sh >target/ci-logs/ray-tests.log 2>&1 &
ray_tests=$!
# Real verl and the real Arctic adapter driving the harness (ci/verl-tests.sh). Its two lanes run
# in network namespaces of their own (each its own localhost:7000 and Ray), so where the host
# gives a process one they run beside the main test run too: a real-verl run leaves a core idle
# almost half the time (Ray and verl start-up, request round trips), which the main run fills.
# Where it does not, they run after the other tests, alone (the adapter's fixed port is the
# host's then). Output in target/ci-logs/verl-tests.log, printed when it ends.
installed verl-install
ns=(unshare --net)
[[ $(id -u) == 0 ]] || ns+=(--map-root-user)
verl_tests=
if "${ns[@]}" "${CARGO_TARGET_DIR:-target}/debug/rlharness" netns-exec -- true >/dev/null 2>&1; then
    bash ci/verl-tests.sh >target/ci-logs/verl-tests.log 2>&1 &
    verl_tests=$!
fi
installed python-deps
test_status=0
step cargo test --workspace --features torch --no-fail-fast --tests || test_status=$?
# Waits for a lane that ran beside cargo test (whatever the tests did, so that what it started
# is always stopped by its own trap), prints its log and adds the wait to the step table.
# beside NAME PID: sets beside_status.
beside() {
    local t=$SECONDS
    beside_status=0
    wait "$2" || beside_status=$?
    cat "target/ci-logs/$1.log" >&2
    echo "ci/test.sh: waited $((SECONDS - t)) s for ci/$1.sh" >&2
    timings+=("$(printf '%6d s  %s%s' $((SECONDS - t)) "ci/$1.sh (beside cargo test: the wait after it)" \
        "$( ((beside_status == 0)) || echo "  (exit $beside_status)")")")
}
beside ray-tests "$ray_tests"
ray_status=$beside_status
verl_status=0
if [[ -n $verl_tests ]]; then
    beside verl-tests "$verl_tests"
    verl_status=$beside_status
fi
if ((test_status != 0 || ray_status != 0 || verl_status != 0)); then
    echo "ci/test.sh: failed (cargo test: exit $test_status, ci/ray-tests.sh: exit $ray_status," \
        "ci/verl-tests.sh: exit $verl_status)" >&2
    exit 1
fi
# The HTML reports in headless Chromium (ci/browser-tests.sh, with the test build's binary;
# screenshots stay under target/browser-tests/).
installed browser-install
step bash ci/browser-tests.sh
# Without network namespaces, real verl after the other tests, alone (see above).
if [[ -z $verl_tests ]]; then
    echo "ci/test.sh: no network namespace for a process here (${ns[*]}): the real-verl tests" \
        "run after the others" >&2
    step bash ci/verl-tests.sh
fi
# The fuzz targets (their own workspace) are checked, not run: ci/FUZZING.md says how to run
# them. In the main target directory, whose checked dependencies they share.
step cargo check --manifest-path harness/fuzz/Cargo.toml --bins --target-dir target
echo "ci/test.sh: passed in $((SECONDS - started)) s" >&2
