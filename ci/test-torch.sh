#!/usr/bin/env bash
# The libtorch backend's checks: installs the slim libtorch into .libtorch/ if needed, then
# lints and tests the crate with the `torch` feature (the default build never needs libtorch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-libtorch.sh
cargo clippy --workspace --all-targets --features torch -- -D warnings
cargo test --workspace --features torch
