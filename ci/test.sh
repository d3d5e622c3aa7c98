#!/usr/bin/env bash
# The README's test command: formatting, lints, and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
