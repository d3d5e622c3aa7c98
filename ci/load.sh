#!/usr/bin/env bash
# Load test of the standalone mock server and the recording proxy (loopback only, bounded):
# three rounds of 1,000 concurrent requests, 100 of them malformed, against each; prints the
# latency percentiles (p50/p90/p99/max) per round and the resident memory of each process.
# Part of the test command (a few seconds); this script runs it alone and prints its figures.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p rlharness --test it -- load:: --nocapture "$@"
