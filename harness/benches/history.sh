#!/usr/bin/env bash
# `rlharness history` over many run directories (docs/history.md, "Speed"): makes RUNS
# (default 100) runs of the shipped mock scenario (seeds 1..RUNS, the second half with slower
# generation planted, so the history has a change point to find), then times `rlharness
# history` over them REPEAT times (default 5) and prints each time, the median and its ratio
# to the 2 s target. Exits 1 when the median misses it.
#
# Usage: bash harness/benches/history.sh [RUNS] [REPEAT]
#   BIN: the folder holding rlharness (default target/release; `cargo build --release`).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-100}
repeat=${2:-5}
bin=${BIN:-target/release}/rlharness
[[ -x "$bin" ]] || { echo "history bench: no $bin; build it first (cargo build --release)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 "$runs"); do
    plant=()
    (( i > runs / 2 )) && plant=(--set backend.efficiency.decode=0.03)
    "$bin" run scenarios/smoke/mock-gsm8k-grpo.yaml --out "$work/runs" --seed "$i" \
        --label "build-$i" "${plant[@]}" --no-progress -q > /dev/null 2>&1 || true
done
echo "history bench: $(find "$work/runs" -name run.json | wc -l) run directories"
times=()
for r in $(seq 1 "$repeat"); do
    t0=$(date +%s.%N)
    "$bin" history "$work/runs" --out "$work/h" > "$work/out.txt"
    t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
done
printf '  %.3f s\n' "${times[@]}"
median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
printf 'median %.3f s; target 2 s; ratio %.3f\n' "$median" "$(awk -v m="$median" 'BEGIN {print m / 2}')"
head -3 "$work/out.txt"
awk -v m="$median" 'BEGIN {exit !(m <= 2)}'
