#!/usr/bin/env bash
# `run --jobs 1` against `run --jobs 2` on the mock smoke scenario and the fault scenarios
# (release build), side by side in one invocation: ROUNDS rounds (default 3), alternating, the
# median of each, and the ratio. The target (issue 19) is a ratio of at least 1.6 on a 2-core
# machine; the script exits 1 when the ratio is below MIN_RATIO (default 1.6).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
MIN_RATIO=${MIN_RATIO:-1.6}
cargo build --release -p rlharness --quiet
BIN=target/release/rlharness
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
one() { # jobs round -> seconds
    local t0 t1
    t0=$(date +%s.%N)
    if ! CI=true RUST_LOG=off "$BIN" run scenarios/smoke scenarios/faults --jobs "$1" \
        --out "$tmp/j$1-r$2" --no-progress >"$tmp/j$1-r$2.log" 2>&1; then
        echo "error: --jobs $1 failed:" >&2
        tail -20 "$tmp/j$1-r$2.log" >&2
        exit 1
    fi
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.3f}')"
}
j1=() j2=()
for r in $(seq 1 "$ROUNDS"); do
    j1+=("$(one 1 "$r")")
    j2+=("$(one 2 "$r")")
    echo "round $r: --jobs 1 ${j1[-1]} s, --jobs 2 ${j2[-1]} s"
done
python3 - "$MIN_RATIO" "${j1[*]}" "${j2[*]}" <<'PY'
import statistics, sys
target = float(sys.argv[1])
j1 = [float(x) for x in sys.argv[2].split()]
j2 = [float(x) for x in sys.argv[3].split()]
m1, m2 = statistics.median(j1), statistics.median(j2)
ratio = m1 / m2
print(f"cores: {__import__('os').cpu_count()}; 12 scenarios (mock smoke + 11 fault scenarios)")
print(f"--jobs 1: median {m1:.2f} s; --jobs 2: median {m2:.2f} s; ratio {ratio:.2f}x (target >= {target})")
sys.exit(0 if ratio >= target else 1)
PY
