#!/usr/bin/env bash
# Run the cargo-fuzz targets of harness/fuzz one after the other (see ci/FUZZING.md).
#   ci/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Works on a stable toolchain: `--sanitizer none` needs no nightly flag. Each target starts
# from its committed seeds (harness/fuzz/seeds/<target>) plus the corpus grown by earlier
# runs (harness/fuzz/corpus/<target>, git-ignored). Crashes land in harness/fuzz/artifacts/.
# Logs go to harness/fuzz/logs/<target>.log; the summary line of each target is printed.
set -euo pipefail
cd "$(dirname "$0")/../harness/fuzz"
secs="${1:-600}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p logs
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  seeds=()
  [ -d "seeds/$t" ] && seeds=("seeds/$t")
  # -a: debug assertions on, so an arithmetic overflow is a crash rather than a wrap.
  nice -n 10 cargo fuzz run --sanitizer none -a "$t" "corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$secs" -print_final_stats=1 -timeout=20 -rss_limit_mb=4096 \
    >"logs/$t.log" 2>&1 || echo "$t: libFuzzer exited $? (see logs/$t.log)"
  runs=$(grep -Eo 'Done [0-9]+ runs' "logs/$t.log" | tail -1 || true)
  execs=$(grep -E 'stat::number_of_executed_units' "logs/$t.log" | tail -1 || true)
  crashes=$(ls "artifacts/$t" 2>/dev/null | grep -c -E '^(crash|timeout|oom|leak)-' || true)
  echo "$t: ${secs}s; ${runs:-no Done line}; ${execs}; artifacts: ${crashes}"
done
