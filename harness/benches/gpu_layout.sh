#!/usr/bin/env bash
# The trainer/sampler layouts on a CUDA host, in one call: the ignored GPU test of the split
# layout (sampler on cuda:1 with two GPUs, on cuda:0 with one), the CUDA-graph test (decoding
# unchanged), the colocated Qwen3-0.6B-shape scenario against its H200 golden, and, where the
# host has two GPUs, the split-layout scenario; then each run's step time, MFU and weight syncs
# (from `backend_layout.json`) side by side.
#
#   BIN=DIR OUT=DIR bash harness/benches/gpu_layout.sh
#
# BIN holds rlharness, rlharness-torch and torch_backend (the test binary of `cargo test
# --release --features torch -p rlharness-torch --test torch_backend --no-run`), built with
# the `torch` feature; default target/release. Needs python3 with a CUDA torch on the host: the
# binaries run on that torch's libraries. Writes every run under OUT (default
# target/gpu-layout).
set -u
cd "$(dirname "$0")/../.."
S=${BIN:-target/release}
OUT=${OUT:-target/gpu-layout}
mkdir -p "$OUT"
TEST_BIN=$S/torch_backend
[ -x "$TEST_BIN" ] || TEST_BIN=$(ls -t "$S"/deps/torch_backend-* 2>/dev/null | grep -v '\.d$' | head -1)
LD_LIBRARY_PATH=$(python3 -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
export LD_LIBRARY_PATH
GPUS=$(nvidia-smi -L | wc -l)
echo "== host"; lscpu | grep -E 'Model name'; nvidia-smi -L
echo "== GPU tests"
for t in split_layout_on_cuda cuda_graph; do
    T0=$SECONDS
    timeout 200 "$TEST_BIN" --ignored "$t" --nocapture > "$OUT/test-$t.log" 2>&1
    echo "$t: rc=$? in $((SECONDS - T0)) s"; grep -E 'test result|sync|panicked' "$OUT/test-$t.log" | tail -5
done
scenarios=(qwen3-0.6b-shape-grpo-h200)
[ "$GPUS" -ge 2 ] && scenarios+=(qwen3-0.6b-shape-grpo-2xh200)
for name in "${scenarios[@]}"; do
    T0=$SECONDS
    timeout 300 "$S/rlharness" run "scenarios/gpu/$name.yaml" --out "$OUT/$name" --no-progress \
        > "$OUT/$name.log" 2>&1
    echo "== $name: rc=$? in $((SECONDS - T0)) s"; tail -4 "$OUT/$name.log"
done
python3 - "$OUT" <<'PY'
import csv, glob, json, os, sys
for run in sorted(glob.glob(sys.argv[1] + '/*/*/*/metrics.csv')):
    if '/latest/' in run:
        continue
    d = os.path.dirname(run)
    print('==', os.path.relpath(d, sys.argv[1]))
    for r in csv.DictReader(open(run)):
        print('step', r['step'], 'time', r.get('timing_s/step'), 'gen', r.get('timing_s/gen'),
              'update', r.get('timing_s/update_actor'), 'sync', r.get('timing_s/update_weights'),
              'mfu', r.get('perf/mfu/actor'))
    layout = os.path.join(d, 'backend_layout.json')
    if os.path.exists(layout):
        j = json.load(open(layout))
        print('devices', j.get('devices'), 'sync path', j.get('rules', {}).get('sync'), 'syncs', len(j.get('weight_syncs', [])))
        for s in j.get('weight_syncs', [])[:6]:
            print('sync', s)
PY
