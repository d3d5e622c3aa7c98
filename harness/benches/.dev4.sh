set -u
export LD_LIBRARY_PATH=$(python3 -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
S=scenarios/gpu/arith-grpo-zorro-h200.yaml; R=target/release/rlharness; G=/tmp/g2; W=/tmp/w2; rm -rf $G $W; mkdir -p $W
r() { local name=$1; shift; local t=$SECONDS; "$@" > $W-$name.log 2>&1; local rc=$?; echo "== $name: rc=$rc in $((SECONDS-t)) s"; grep -aE "^  [✗✓]|regressed|passed|calibrated from|^critic|^actor|^perf|^timing|^rule|seeds a multi|written to|^error" $W-$name.log | grep -v "missing: " | head -16; }
r calibrate $R golden --golden $G calibrate $S --seeds 1..5 --out $W/cal
r first $R run $S --golden $G --out $W/first --no-progress
r accept $R golden --golden $G accept arith-grpo-zorro-h200
r rerun $R run $S --golden $G --out $W/rerun --no-progress
r lr-plant $R run $S --golden $G --out $W/lr --no-progress --set config.actor_rollout_ref.actor.optim.lr=2e-3
r entropy-off $R run $S --golden $G --out $W/ent --no-progress --set config.actor_rollout_ref.actor.entropy_coeff=0
r detect $R golden --golden $G calibrate $S --detect 10%
cp $G/arith-grpo-zorro-h200/h200/calibration.json $G/arith-grpo-zorro-h200/h200/golden.yaml $G/arith-grpo-zorro-h200/h200/metrics.csv $OUT/
ls -la $OUT
