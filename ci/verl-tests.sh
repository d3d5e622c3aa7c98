#!/usr/bin/env bash
# The real-verl tests: real verl 0.7.1 and the real Arctic adapter, unmodified, drive rlharness
# (harness/tests/it/real_verl.rs, the real-verl cases of propagate and the wire conformance, and
# `bisect --propagate` on the adapter, harness/tests/it/bisect/real_verl.rs; all ignored in a plain
# `cargo test`, all matched by the `real_verl::` filter). Installs verl's environment (ci/verl-install.sh, pinned,
# project-local, idempotent), extracts the two source trees after checking their sha256
# (ci/upstream.sh) and points VERL_SRC and ARCTIC_SRC at them, then runs the tests.
#
# The adapter always dials localhost:7000, so one test process runs its tests one at a time.
# Where the host gives a process a network namespace of its own (root, or unprivileged user
# namespaces), the tests run in two lanes side by side, each a test process in its own
# namespace (its own localhost:7000, its own Ray temp dir), through `rlharness netns-exec`;
# else in one lane, saying why. Every real-verl test is in exactly one lane (checked against
# the test list: a new test not placed fails the run). An install or extraction that fails
# fails the run, with its log: never a skip.
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
export VERL_SRC ARCTIC_SRC RLHARNESS_DESCRIBED_VERL_SRC RLHARNESS_DESCRIBED_ARCTIC_SRC
# The released adapter (arctic-platform from PyPI, ci/arctic-released.lock), installed by
# ci/verl-install.sh into a folder of its own.
ARCTIC_RELEASED_SRC=$(realpath .venv-verl/arctic-released)
export ARCTIC_RELEASED_SRC
echo "verl-tests: VERL_SRC=$VERL_SRC ARCTIC_SRC=$ARCTIC_SRC ARCTIC_RELEASED_SRC=$ARCTIC_RELEASED_SRC"
# The test binary, built once; the lanes run it directly (two cargo processes would wait on
# each other's locks). It runs from the package's folder, as cargo runs it.
# shellcheck disable=SC2086
it=$(cargo test --workspace $FEATURES --test it --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*/it-[^"]*"' | tail -1 | cut -d'"' -f4)
if [[ ! -x "$it" ]]; then
    echo "verl-tests: no test binary (cargo test --test it --no-run): build it and see why" >&2
    exit 1
fi
bin=$(realpath "${CARGO_TARGET_DIR:-target}/debug/rlharness")
# Two lanes of the extracted adapter (5864380) and a third of the released adapter
# (ARCTIC_SRC=$ARCTIC_RELEASED_SRC): its learning run, its wire conformance (which reads the
# learning run of its own test process) and the CI propagate subset with Arctic's cases. The learning
# run and the conformance test share one run, so they share a lane. Each filter names one test;
# lanes a and b run each test of the binary at most once, and every test runs in some lane.
lane_a=(
    real_verl::propagate::propagate_on_the_unmodified_adapter_finds_known_gaps_only
    real_verl::a_taken_port_7000_is_named_before_verl_starts
    real_verl::the_defaults_file_holds_verls_own_defaults
    real_verl::a_failing_trainer_leaves_nothing_behind
    real_verl::a_timed_out_run_leaves_nothing_behind
    real_verl::ctrl_c_keeps_the_finished_steps_and_leaves_nothing_behind
    real_verl::client_014::the_released_client_runs_a_session_against_mock_torch_and_the_proxy
)
lane_b=(
    bisect::real_verl::bisect_with_propagate_finds_the_commit_that_drops_the_logits_knobs
    real_verl::propagate::propagate_on_the_real_adapter_flags_exactly_the_seed_bug
    real_verl::real_verl_learns_over_http_and_leaves_nothing_behind
    real_verl::the_builtin_driver_speaks_like_real_verl
)
lane_r=(
    real_verl::real_verl_learns_over_http_and_leaves_nothing_behind
    real_verl::the_builtin_driver_speaks_like_real_verl
    real_verl::propagate::propagate_on_the_unmodified_adapter_finds_known_gaps_only
)
listed=$("$it" --ignored --list real_verl:: | sed -n 's/: test$//p' | sort)
placed=$(printf '%s\n' "${lane_a[@]}" "${lane_b[@]}" "${lane_r[@]}" | sort -u)
twice=$(printf '%s\n' "${lane_a[@]}" "${lane_b[@]}" | sort | uniq -d)
if [[ "$listed" != "$placed" || -n "$twice" ]]; then
    echo "verl-tests: the lanes do not hold exactly the real-verl tests (or a and b share one):" >&2
    diff <(echo "$listed") <(echo "$placed") >&2 || true
    echo "$twice" >&2
    exit 1
fi
mkdir -p target/ci-logs
tmps=()
# Stopped early (ci/test.sh stops what runs beside its tests when it ends), the lanes stop too.
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "${tmps[@]}"' EXIT
trap 'exit 143' TERM INT
# lane NAME PREFIX... -- TESTS...: one test process (in the namespace PREFIX makes, if any),
# with a short Ray temp dir of its own (Ray's Unix sockets live there); its log in
# target/ci-logs/verl-lane-NAME.log. PREFIX may start with `env ARCTIC_SRC=...`.
lane() {
    local name=$1 ray_tmp
    shift
    local prefix=()
    while [[ $1 != -- ]]; do prefix+=("$1"); shift; done
    shift
    ray_tmp=$(mktemp -d /tmp/rlh-verl.XXXXXX)
    tmps+=("$ray_tmp")
    (cd harness && RAY_TMPDIR=$ray_tmp "${prefix[@]}" "$it" --ignored --exact --test-threads 1 \
        --nocapture "$@") >"target/ci-logs/verl-lane-$name.log" 2>&1
}
ns=(unshare --net)
[[ $(id -u) == 0 ]] || ns+=(--map-root-user)
if why=$("${ns[@]}" "$bin" netns-exec -- true 2>&1); then
    echo "verl-tests: three lanes side by side, each in a network namespace of its own (${ns[*]})"
    status=0
    lane a "${ns[@]}" "$bin" netns-exec -- "${lane_a[@]}" &
    pid_a=$!
    lane b "${ns[@]}" "$bin" netns-exec -- "${lane_b[@]}" &
    pid_b=$!
    lane r env ARCTIC_SRC="$ARCTIC_RELEASED_SRC" "${ns[@]}" "$bin" netns-exec -- "${lane_r[@]}" &
    pid_r=$!
    for l in a b r; do
        pid=pid_$l
        wait "${!pid}" || status=$?
        cat "target/ci-logs/verl-lane-$l.log"
    done
else
    echo "verl-tests: this host gives a process no network namespace of its own" \
        "(${ns[*]}: ${why:-failed}): one lane"
    status=0
    lane all -- "${lane_a[@]}" "${lane_b[@]}" || status=$?
    cat target/ci-logs/verl-lane-all.log
    lane released env ARCTIC_SRC="$ARCTIC_RELEASED_SRC" -- "${lane_r[@]}" || status=$?
    cat target/ci-logs/verl-lane-released.log
fi
if ((status != 0)); then
    echo "verl-tests: failed (exit $status) after $((SECONDS - started)) s" >&2
    exit "$status"
fi
echo "verl-tests: done in $((SECONDS - started)) s"
