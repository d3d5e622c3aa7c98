#!/usr/bin/env bash
# Load test of the standalone mock server and the recording proxy (loopback only, bounded):
# three rounds of 1,000 concurrent requests, 100 of them malformed, against each; prints the
# latency percentiles (p50/p90/p99/max) per round and the resident memory of each process.
# Ignored by `cargo test` (tens of seconds); run it here or in a nightly job.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p rlharness --test it -- --ignored load:: --nocapture "$@"
