#!/usr/bin/env bash
# Start-up and run-time bench of two `rlharness` binaries side by side (issue #20): `check` of
# one scenario, `list`, the 20-step mock smoke scenario and the CPU flagship, start to verdict.
# The binaries run alternately (A, B, A, B, ...) so load drift hits both alike; the script
# prints each one's median wall time and the ratio new/old.
#
#   bash ci/bench-startup.sh OLD_RLHARNESS NEW_RLHARNESS [FAST_RUNS] [FLAGSHIP_RUNS]
#
# e.g. with the old binary built from main into a copy of the tree:
#   cargo build --release --features torch
#   bash ci/bench-startup.sh OLD_TREE/target/release/rlharness target/release/rlharness 15 3
# FLAGSHIP_RUNS=0 skips the flagship. Runs write into a temporary directory, never goldens
# (CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 2 ]]; then
    sed -n 2,13p "$0" >&2
    exit 2
fi
OLD="$1" NEW="$2" FAST_RUNS="${3:-15}" FLAGSHIP_RUNS="${4:-3}" exec python3 - <<'EOF'
import os, statistics, subprocess, sys, tempfile, time

old, new = os.environ["OLD"], os.environ["NEW"]
fast, flagship = int(os.environ["FAST_RUNS"]), int(os.environ["FLAGSHIP_RUNS"])
env = dict(os.environ, CI="true")
tmp = tempfile.mkdtemp(prefix="rlharness-bench-")

cases = [
    ("check one scenario", ["check", "scenarios/smoke/mock-gsm8k-grpo.yaml"], fast),
    ("list", ["list"], fast),
    ("mock smoke, start to verdict", ["run", "scenarios/smoke/mock-gsm8k-grpo.yaml", "--no-progress", "--out", tmp], fast),
    ("CPU flagship, start to verdict", ["run", "scenarios/tiny-gsm8k-grpo.yaml", "--no-progress", "--out", tmp], flagship),
]

def once(binary, args):
    t = time.perf_counter()
    p = subprocess.run([binary, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} exited {p.returncode}:\n{p.stderr.decode()[-2000:]}")
    return dt

def fmt(s):
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"

print(f"old: {old}\nnew: {new}\n")
print(f"| case | runs | old median | new median | new/old |")
print(f"|---|---:|---:|---:|---:|")
for name, args, runs in cases:
    if runs == 0:
        continue
    a, b = [], []
    for _ in range(runs):
        a.append(once(old, args))
        b.append(once(new, args))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| {name} | {runs} | {fmt(ma)} | {fmt(mb)} | {mb / ma:.3f} |", flush=True)
EOF
