#!/usr/bin/env bash
# The torch engine's memory over a long run and over many seeds, side by side in one
# invocation (docs/performance.md, "Memory over a long run"):
#   1. one run of the CPU flagship for STEPS steps (default 100): the resident memory of the
#      harness and its torch engine together, sampled every 0.2 s, after step 10 against its
#      value at step 10 (target: the largest within 10 % of it);
#   2. `run --seeds 1..SEEDS` (default 10) in one harness process against `--seeds 1..1`: the
#      peak resident memory of the process tree (target: at most 1.5 times).
# Prints each figure and ratio, and exits 1 when a target is missed.
#
# Usage: bash harness/benches/soak.sh [STEPS] [SEEDS]
#   BIN: the folder holding rlharness and rlharness-torch (default target/release; build them
#   with `cargo build --release --workspace --features torch --bins`).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-100}
seeds=${2:-10}
bin=${BIN:-target/release}
scenario=scenarios/tiny-gsm8k-grpo.yaml
for b in rlharness rlharness-torch; do
    if [[ ! -x "$bin/$b" ]]; then
        echo "soak: no $bin/$b; build it first" \
            "(cargo build --release --workspace --features torch --bins)" >&2
        exit 2
    fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The resident memory (KiB) of a process and all its descendants.
tree_rss() {
    local pids=("$1") i=0
    while ((i < ${#pids[@]})); do
        local kids
        kids=$(pgrep -P "${pids[$i]}" || true)
        for k in $kids; do pids+=("$k"); done
        i=$((i + 1))
    done
    local total=0 r
    for p in "${pids[@]}"; do
        r=$(awk '/^VmRSS:/{print $2}' "/proc/$p/status" 2>/dev/null || true)
        total=$((total + ${r:-0}))
    done
    echo "$total"
}

# Run rlharness with ARGS; write "STEP RSS_KIB" samples to FILE (the step from the run's
# plain step lines, 0 before the first).
sample() {
    local file=$1
    shift
    "$bin/rlharness" run "$scenario" --no-progress --golden "$work/no-golden" \
        --out "$work/out" "$@" >"$work/stdout" 2>"$work/stderr" &
    local pid=$! step
    : >"$file"
    while kill -0 "$pid" 2>/dev/null; do
        step=$(grep -ao ': step [0-9]*/' "$work/stderr" | tail -1 | tr -dc '0-9' || true)
        echo "${step:-0} $(tree_rss "$pid")" >>"$file"
        sleep 0.2
    done
    # Exit 4 is "no golden yet" (this bench judges nothing else); anything else is a failure.
    local rc=0
    wait "$pid" || rc=$?
    if ((rc != 0 && rc != 4)); then
        echo "soak: rlharness run $* exited $rc:" >&2
        tail -20 "$work/stderr" >&2
        exit 3
    fi
}

status=0
echo "soak: $scenario for $steps steps ($bin)"
sample "$work/long" --steps "$steps"
read -r at10 after <<<"$(awk '$1 == 10 && !a {a = $2} $1 > 10 && $2 > m {m = $2} END {print a + 0, m + 0}' "$work/long")"
if ((at10 == 0 || after == 0)); then
    echo "soak: no sample at step 10 and after (steps: $steps)" >&2
    exit 3
fi
awk -v a="$at10" -v m="$after" -v s="$steps" 'BEGIN {
    printf "long run: %.0f MB at step 10, at most %.0f MB over steps 11..%d: ratio %.3f (target <= 1.10)\n",
        a / 1024, m / 1024, s, m / a }'
awk -v a="$at10" -v m="$after" 'BEGIN { exit !(m / a <= 1.10) }' || status=1

sample "$work/one" --seed 1 --steps 20
sample "$work/many" --seeds "1..$seeds" --steps 20
one=$(awk '$2 > m {m = $2} END {print m + 0}' "$work/one")
many=$(awk '$2 > m {m = $2} END {print m + 0}' "$work/many")
awk -v o="$one" -v n="$many" -v s="$seeds" 'BEGIN {
    printf "seeds: peak %.0f MB for one seed, %.0f MB for seeds 1..%d in one process: ratio %.3f (target <= 1.5)\n",
        o / 1024, n / 1024, s, n / o }'
awk -v o="$one" -v n="$many" 'BEGIN { exit !(n / o <= 1.5) }' || status=1
if ((status == 0)); then
    echo "soak: both targets met"
else
    echo "soak: a target was missed"
fi
exit "$status"
