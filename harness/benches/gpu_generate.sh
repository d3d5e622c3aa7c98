#!/usr/bin/env bash
# GPU generation, side by side in one call on a CUDA host: CUDA-graph decoding checked against
# eager decoding (the ignored GPU test), `torch_perf`'s generate figure with and without graphs
# (alternated), Hugging Face transformers' warmed `generate` on the same work
# (harness/benches/hf_generate.py), and the H200 scenario with and without graphs.
#
#   BIN=DIR OUT=DIR bash harness/benches/gpu_generate.sh
#
# BIN holds rlharness, rlharness-torch, torch_perf and torch_backend (the test binary of
# `cargo test --release --features torch -p rlharness-torch --test torch_backend --no-run`),
# built with the `torch` feature; default target/release (with the test binary looked up in
# target/release/deps). Needs python3 with torch (CUDA) and transformers on the host; the
# binaries run on that torch's libraries. Writes every figure under OUT (default
# target/gpu-generate) and prints a summary.
set -u
cd "$(dirname "$0")/../.."
S=${BIN:-target/release}
OUT=${OUT:-target/gpu-generate}
mkdir -p "$OUT"
TORCH_PERF=$S/torch_perf; [ -x "$TORCH_PERF" ] || TORCH_PERF=$S/examples/torch_perf
TEST_BIN=$S/torch_backend
[ -x "$TEST_BIN" ] || TEST_BIN=$(ls -t $S/deps/torch_backend-* 2>/dev/null | grep -v '\.d$' | head -1)
export LD_LIBRARY_PATH=$(python3 -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
echo "== host"; lscpu | grep -E 'Model name|^Model:' ; nvidia-smi -L
python3 -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)' 2>&1 | tail -1
echo "== correctness (graph vs eager, same seed)"
T0=$SECONDS
timeout 150 "$TEST_BIN" --ignored cuda_graph --nocapture 2>&1 | tail -6
echo "took $((SECONDS-T0)) s"
echo "== generate: torch_perf graphs / eager alternated"
for i in 1 2; do
  for mode in graphs eager; do
    flag=""; [ $mode = graphs ] && flag="--graphs"
    T0=$SECONDS
    timeout 150 "$TORCH_PERF" --prompts 2 --n 2 --iters 1 --gen-repeats 3 $flag > $OUT/perf-$mode-$i.json 2> $OUT/perf-$mode-$i.err
    echo "$mode $i rc=$? $((SECONDS-T0))s: $(python3 -c "import json,sys;d=json.load(open('$OUT/perf-$mode-$i.json'));print(d.get('generate_tokens_per_s_each'), 'median', d.get('generate_tokens_per_s'), 'mfu', d.get('mfu'))" 2>&1)"
    tail -2 $OUT/perf-$mode-$i.err
  done
done
echo "== HF"
T0=$SECONDS
timeout 240 python3 harness/benches/hf_generate.py > $OUT/hf.json 2> $OUT/hf.err; echo "rc=$? $((SECONDS-T0))s"; cat $OUT/hf.json; tail -3 $OUT/hf.err
echo "== scenario"
for mode in graphs eager; do
  set_="--set backend.cuda_graphs=true"; [ $mode = eager ] && set_="--set backend.cuda_graphs=false"
  T0=$SECONDS
  timeout 200 $S/rlharness run scenarios/gpu/qwen3-0.6b-shape-grpo-h200.yaml --out $OUT/runs-$mode $set_ > $OUT/scen-$mode.log 2>&1
  echo "$mode rc=$? $((SECONDS-T0))s"; tail -4 $OUT/scen-$mode.log
  python3 - "$OUT/runs-$mode" <<'PY'
import csv,glob,sys
for f in glob.glob(sys.argv[1]+'/**/metrics.csv', recursive=True):
    rows=list(csv.DictReader(open(f)))
    for r in rows:
        print(r.get('step'), 'gen', r.get('timing_s/gen'), 'upd', r.get('timing_s/update_actor'), 'step', r.get('timing_s/step'), 'mfu', r.get('perf/mfu/actor'), 'thr', r.get('perf/throughput'))
PY
done
