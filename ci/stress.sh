#!/usr/bin/env bash
# The test command under load: runs it PASSES times in a row (default 3) beside HOGS CPU-bound
# processes (default 2, one per core of a 2-core CI machine), and prints one line per pass (exit
# status, seconds) and a summary. A suite that is red under load is a suite people re-run until
# green; this is the check that it is not.
#
#   bash ci/stress.sh                 # `bash ci/test.sh` three times beside two hogs
#   bash ci/stress.sh --quick         # only the cargo test step (the suite proper), three times
#   PASSES=1 HOGS=4 bash ci/stress.sh -- cargo test --workspace --features torch --tests run::
#
# The hogs are this script's own children (`yes > /dev/null`), stopped whatever happens. Each
# pass's output goes to target/stress/pass-<N>.log. Exit 0 only when every pass passed.
set -euo pipefail
cd "$(dirname "$0")/.."
PASSES=${PASSES:-3}
HOGS=${HOGS:-2}
cmd=(bash ci/test.sh)
case "${1:-}" in
    --quick) cmd=(cargo test --workspace --features torch --no-fail-fast --tests) ;;
    --) shift; cmd=("$@") ;;
    "") ;;
    *) echo "usage: bash ci/stress.sh [--quick | -- COMMAND...]" >&2; exit 2 ;;
esac
mkdir -p target/stress
hogs=()
stop_hogs() {
    ((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap stop_hogs EXIT
for _ in $(seq "$HOGS"); do
    yes >/dev/null &
    hogs+=($!)
done
echo "stress: ${cmd[*]}, $PASSES pass(es) beside $HOGS CPU hog(s) on $(nproc) core(s)" >&2
failed=0
for pass in $(seq "$PASSES"); do
    t=$SECONDS rc=0
    "${cmd[@]}" >"target/stress/pass-$pass.log" 2>&1 || rc=$?
    dt=$((SECONDS - t))
    if ((rc == 0)); then
        echo "stress: pass $pass: passed in $dt s" >&2
    else
        failed=$((failed + 1))
        echo "stress: pass $pass: FAILED (exit $rc) after $dt s; the failing tests:" >&2
        grep -E '^test .* FAILED$|^    [a-z_:]+$|ci/test.sh: failed' "target/stress/pass-$pass.log" >&2 || true
        echo "stress: the whole output: target/stress/pass-$pass.log" >&2
    fi
done
if ((failed)); then
    echo "stress: $failed of $PASSES pass(es) failed" >&2
    exit 1
fi
echo "stress: $PASSES of $PASSES pass(es) passed beside $HOGS CPU hog(s)" >&2
