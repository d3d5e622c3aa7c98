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
# Two lanes mostly wait rather than compute, and run beside other work (each one's output goes
# to target/ci-logs/NAME.log, printed when it ends):
# - the Ray executor against a real local Ray head (ci/ray-tests.sh starts and always stops its
#   own head; a Ray that cannot be installed or started fails the run), beside the main test
#   run: its tests mostly wait on Ray (job start-up, polling);
# - real verl and the real Arctic adapter driving the harness (ci/verl-tests.sh), after the
#   main test run. Where the host gives a process a network namespace of its own, its two lanes
#   run in namespaces (each its own localhost:7000 and Ray) beside the browser test and the fuzz
#   check; else after everything, alone (the adapter's fixed port is the host's then).
# Measured on 2 cores: the main run keeps both cores busy, and the real-verl lanes leave 44 % of
# them idle; the real-verl lanes beside the main run gained nothing (and made a test that waited
# on a clock time out), and the Ray lane beside the real-verl lanes instead of the main run took
# the same total time but pushed the real-verl lanes past their 10 minutes.
installed ray-install
installed python-deps
ns=(unshare --net)
[[ $(id -u) == 0 ]] || ns+=(--map-root-user)
netns=false
"${ns[@]}" "${CARGO_TARGET_DIR:-target}/debug/rlharness" netns-exec -- true >/dev/null 2>&1 &&
    netns=true
declare -A lanes=()
# beside bash ci/NAME.sh: starts that lane in the background.
beside() {
    local name
    name=$(basename "$2" .sh)
    "$@" >"target/ci-logs/$name.log" 2>&1 &
    lanes[$name]=$!
}
# Waits for every lane started (whatever each did, so that what it started is always stopped by
# its own trap), prints its log, adds the wait to the step table; fails the run if one failed.
wait_lanes() {
    local name t rc failed=()
    for name in "${!lanes[@]}"; do
        t=$SECONDS rc=0
        wait "${lanes[$name]}" || rc=$?
        cat "target/ci-logs/$name.log" >&2
        echo "ci/test.sh: waited $((SECONDS - t)) s for ci/$name.sh" >&2
        timings+=("$(printf '%6d s  %s%s' $((SECONDS - t)) "ci/$name.sh (beside: the wait after the step above)" \
            "$( ((rc == 0)) || echo "  (exit $rc)")")")
        ((rc == 0)) || failed+=("ci/$name.sh: exit $rc")
    done
    lanes=()
    if ((${#failed[@]})); then
        echo "ci/test.sh: failed (${failed[*]})" >&2
        exit 1
    fi
}
beside bash ci/ray-tests.sh
step cargo test --workspace --features torch --no-fail-fast --tests || {
    wait_lanes
    echo "ci/test.sh: failed (cargo test)" >&2
    exit 1
}
wait_lanes
installed verl-install
if $netns; then
    beside bash ci/verl-tests.sh
fi
# The HTML reports in headless Chromium (ci/browser-tests.sh, with the test build's binary;
# screenshots stay under target/browser-tests/).
installed browser-install
step bash ci/browser-tests.sh || {
    wait_lanes
    exit 1
}
# The fuzz targets (their own workspace) are checked, not run: ci/FUZZING.md says how to run
# them. In the main target directory, whose checked dependencies they share.
step cargo check --manifest-path harness/fuzz/Cargo.toml --bins --target-dir target || {
    wait_lanes
    exit 1
}
wait_lanes
if ! $netns; then
    echo "ci/test.sh: no network namespace for a process here (${ns[*]}): the real-verl tests" \
        "run after the others, alone" >&2
    step bash ci/verl-tests.sh
fi
echo "ci/test.sh: passed in $((SECONDS - started)) s" >&2
