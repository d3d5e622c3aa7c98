#!/usr/bin/env bash
# The README's main job: set up libtorch (project-local, idempotent), build with the torch
# backend, and run the flagship scenario to its verdict, report and plots.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-libtorch.sh
cargo build --release --features torch
exec ./target/release/rlharness run scenarios/tiny-gsm8k-grpo.yaml "$@"
