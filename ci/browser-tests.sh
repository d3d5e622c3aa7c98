#!/usr/bin/env bash
# The HTML reports in a real browser (harness/tests/browser/check_reports.py): the debug binary
# makes a passing run, a failing run, a multi-seed run, a combined index and a propagation matrix
# from mock scenarios into target/browser-tests/, and headless Chromium checks each report.html
# (the verdict on top, failing rules before the plots, plots drawn and readable, no console
# error, no number wrapped inside a table cell, no emoji). Screenshots stay beside each report
# (screenshots/), under target/browser-tests/, for CI to keep as artifacts.
# Needs ci/browser-install.sh (run here too: a no-op once installed) and a built binary:
# `cargo build -p rlharness`, or the test build's (`cargo test --no-run`); RLHARNESS_BIN picks
# another one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/browser-install.sh >/dev/null
bin=${RLHARNESS_BIN:-target/debug/rlharness}
if [[ ! -x "$bin" ]]; then
    echo "ci/browser-tests.sh: no rlharness binary at $bin: build it first" \
        "(cargo build -p rlharness)" >&2
    exit 1
fi
PYTHONPATH=.browserdeps exec python3 harness/tests/browser/check_reports.py --bin "$bin" \
    --out target/browser-tests
