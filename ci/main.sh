#!/usr/bin/env bash
# The README's main job: build and run the flagship scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
exec ./target/release/rlharness run scenarios/smoke/mock-gsm8k-grpo.yaml "$@"
