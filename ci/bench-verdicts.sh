#!/usr/bin/env bash
# The exit code's false-alarm rate and power, measured with the real binary (issue: "the exit
# code you can bet on"). On a copy of the mock smoke with calibrated rules (reward, response
# length and entropy as `calibrated: {}` windows of 5 steps, the default stability rules on),
# blessed at seed 1 and calibrated by `golden calibrate` with no count:
#   - SINGLE unplanted single runs (seeds 1001..), and MULTI unplanted 5-seed runs: the share
#     that exit other than 0, with its 95 % Clopper-Pearson interval;
#   - POWER_SINGLE single runs with the reward 0.1 lower, and POWER_MULTI 5-seed runs with it
#     0.05 lower (`driver.plant=[{reward_offset: ...}]`): the share caught (exit 1);
#   - `golden audit` of the same copy, single, `--seeds 5` and `--seeds 10`, for comparison,
#     with the smallest reward drop each catches 80 % of the time.
# `--calibration-seeds N` calibrates over seeds 1..N instead (the rate must hold there too).
# Usage: bash ci/bench-verdicts.sh [--quick] [--calibration-seeds N] [--jobs J]
# Prints one table at the end; the runs go to a temporary folder, removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SINGLE=300 MULTI=90 POWER_SINGLE=100 POWER_MULTI=30 JOBS=2 CAL_SEEDS=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) SINGLE=40 MULTI=10 POWER_SINGLE=20 POWER_MULTI=6; shift ;;
        --calibration-seeds) CAL_SEEDS=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        *) echo "usage: $0 [--quick] [--calibration-seeds N] [--jobs J]" >&2; exit 2 ;;
    esac
done
BIN=${RLHARNESS_BIN:-}
if [[ -z "$BIN" ]]; then
    cargo build --release -p rlharness >&2
    BIN=$PWD/target/release/rlharness
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/scenarios/smoke" "$WORK/golden"
cp -r scenarios/backends scenarios/defaults "$WORK/scenarios/"
SCEN=scenarios/smoke/mock-calibrated.yaml
# The copy: the smoke's reward and length bands calibrated, the entropy added, stability on.
python3 - "$WORK/$SCEN" <<'EOF'
import sys
s = open("scenarios/smoke/mock-gsm8k-grpo.yaml").read()
for old, new in [
    ("name: mock-gsm8k-grpo", "name: mock-gsm8k-grpo-calibrated"),
    ("    critic/rewards/mean: {window: 5, abs: 0.05}",
     "    critic/rewards/mean: {window: 5, calibrated: {}}\n"
     "    actor/entropy: {window: 5, calibrated: {}}"),
    ("    response_length/mean: {window: 5, rel: 0.1}",
     "    response_length/mean: {window: 5, calibrated: {}}"),
    ("checks:\n", "checks:\n  stability: true\n"),
]:
    assert old in s, old
    s = s.replace(old, new, 1)
open(sys.argv[1], "w").write(s)
EOF
cd "$WORK"
export CI=  # the copy is blessed and calibrated here
"$BIN" run "$SCEN" --update-golden -q --out reports >/dev/null || true
"$BIN" golden accept >/dev/null
if [[ -n "$CAL_SEEDS" ]]; then
    "$BIN" golden calibrate "$SCEN" --seeds "1..$CAL_SEEDS" --jobs "$JOBS" --out cal 2>/dev/null | head -1
else
    "$BIN" golden calibrate "$SCEN" --jobs "$JOBS" --out cal 2>/dev/null | head -1
fi
audit() {
    "$BIN" golden audit "$SCEN" --format json "$@" 2>/dev/null || true
}
audit --power-draws 100 >audit-1.json
audit --power-draws 100 --seeds 5 --draws 500 >audit-5.json
audit --power-draws 100 --seeds 10 --draws 300 >audit-10.json
# One run per line of the argument file: exit status 0 or not.
runs() {
    local what=$1 n=$2 first=$3 width=$4; shift 4
    seq 0 $((n - 1)) | xargs -P "$JOBS" -I{} bash -c '
        i=$1; shift; first=$1; width=$2; bin=$3; scen=$4; shift 4
        s=$((first + i * width))
        if [[ $width -eq 1 ]]; then sel=(--seed "$s"); else sel=(--seeds "$s..$((s + width - 1))"); fi
        if "$bin" run "$scen" "${sel[@]}" -q --no-progress --out "out/$s" "$@" >/dev/null 2>&1; then
            echo 0; else echo $?; fi; rm -rf "out/$s"' _ {} "$first" "$width" "$BIN" "$SCEN" "$@" >"$what.codes"
}
runs single "$SINGLE" 1001 1
runs multi "$MULTI" 5001 5
runs power-single "$POWER_SINGLE" 20001 1 --set "driver.plant=[{reward_offset: -0.1}]"
runs power-multi "$POWER_MULTI" 30001 5 --set "driver.plant=[{reward_offset: -0.05}]"
python3 - <<'EOF'
import json, math

def binom_cdf(k, n, p):
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

def cp(k, n):
    """Clopper-Pearson 95 % interval, by bisection on the binomial CDF."""
    def solve(f):
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) else (lo, mid)
        return (lo + hi) / 2
    low = 0.0 if k == 0 else solve(lambda p: 1 - binom_cdf(k - 1, n, p) < 0.025)
    high = 1.0 if k == n else solve(lambda p: binom_cdf(k, n, p) > 0.025)
    return low, high

def line(name, codes, want):
    n = len(codes)
    k = sum(1 for c in codes if c != 0)
    lo, hi = cp(k, n)
    other = sorted({c for c in codes if c not in (0, 1)})
    note = f"  (exit codes other than 0/1: {other})" if other else ""
    print(f"| {name} | {n} | {k} | {100*k/n:.1f} % | {100*lo:.1f}-{100*hi:.1f} % | {want} |{note}")

print("| measured (real binary) | runs | exit != 0 | rate | 95 % interval | want |")
print("|---|---:|---:|---:|---:|---|")
for name, f, want in [
    ("single run, unplanted", "single", "<= 1 %"),
    ("5 seeds, unplanted", "multi", "<= 1 %"),
    ("single run, reward -0.1", "power-single", ">= 80 %"),
    ("5 seeds, reward -0.05", "power-multi", ">= 80 %"),
]:
    codes = [int(x) for x in open(f + ".codes").read().split()]
    line(name, codes, want)
drops = []
for seeds in (1, 5, 10):
    a = json.load(open(f"audit-{seeds}.json"))
    lo, hi = a["false_alarm_ci"]
    flag = f" --seeds {seeds}" if seeds > 1 else ""
    print(f"| `golden audit`{flag} (simulated) | {a['draws']} | "
          f"{a['false_alarms']} | {100*a['false_alarm_rate']:.2f} % | {100*lo:.2f}-{100*hi:.2f} % | "
          f"<= {100*a['alpha_run']:.0f} % ({a['calibration_runs']} calibration runs) |")
    rule = "seeds:critic/rewards/mean" if seeds > 1 else "golden:critic/rewards/mean"
    shift = next((r["smallest_shift"] for r in a["rules"] if r["rule"] == rule), None)
    drops.append(f"{seeds} seed(s): {shift or '-'}")
print()
print("smallest reward drop caught 80 % of the time (audit): " + "; ".join(drops))
EOF
