#!/usr/bin/env bash
# The GPU learning scenario (scenarios/gpu/arith-grpo-zorro-h200.yaml) on a CUDA host, in one
# call: one run per variant (VARIANTS: `;`-separated lists of `--set` overrides; an empty
# variant is the scenario as written), each printed as its reward per step, first and last
# 10-step reward means, median step time and MFU. Runs share the warm-start cache (the first
# trains it).
#
#   BIN=DIR OUT=DIR VARIANTS='...;...' bash harness/benches/gpu_learning.sh [SEED]
#
# BIN holds rlharness and rlharness-torch built with the `torch` feature (default
# target/release); the binaries run on the host python3's CUDA torch libraries.
set -u
cd "$(dirname "$0")/../.."
S=${BIN:-target/release}
OUT=${OUT:-target/gpu-learning}
SEED=${1:-1}
SCENARIO=scenarios/gpu/arith-grpo-zorro-h200.yaml
mkdir -p "$OUT"
LD_LIBRARY_PATH=$(python3 -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
export LD_LIBRARY_PATH
echo "== host"; lscpu | grep -E 'Model name'; nvidia-smi -L
IFS=';' read -r -a variants <<< "${VARIANTS:-}"
[ ${#variants[@]} -eq 0 ] && variants=("")
i=0
for v in "${variants[@]}"; do
    i=$((i + 1))
    args=()
    for s in $v; do args+=(--set "$s"); done
    T0=$SECONDS
    timeout 540 "$S/rlharness" run "$SCENARIO" --seed "$SEED" --out "$OUT/v$i" --no-progress \
        --golden "$OUT/golden-v$i" "${args[@]}" > "$OUT/v$i.log" 2>&1
    echo "== variant $i [${v:-as written}]: rc=$? in $((SECONDS - T0)) s"
    grep -aE "warm start: step (600|300)/" "$OUT/v$i.log" | tail -1
    python3 - "$OUT/v$i" <<'PY'
import csv, glob, statistics, sys
files = glob.glob(sys.argv[1] + "/*/latest/metrics.csv")
if not files:
    print("  no metrics.csv"); sys.exit()
rows = list(csv.DictReader(open(files[0])))
def col(name):
    return [float(r[name]) for r in rows if r.get(name) not in (None, "")]
r = col("critic/rewards/mean")
e = col("actor/entropy")
print("  reward:", " ".join(f"{x:.2f}" for x in r))
print("  entropy:", " ".join(f"{x:.3f}" for x in e))
if len(r) >= 20:
    print(f"  first 10 {statistics.mean(r[:10]):.3f}, last 10 {statistics.mean(r[-10:]):.3f}")
for name in ("timing_s/step", "perf/mfu/actor", "actor/entropy", "actor/grad_norm"):
    c = col(name)
    if c:
        print(f"  {name}: median {statistics.median(c):.4g} (first {c[0]:.4g}, last {c[-1]:.4g})")
PY
    tail -2 "$OUT/v$i.log"
done
