#!/usr/bin/env bash
# Installs Ray (`ray[default]`, pinned: the dashboard with the jobs API comes with `default`) from
# PyPI into the project-local, git-ignored virtual environment .venv-ray/, for the Ray executor's
# tests (ci/ray-tests.sh). Idempotent: a version stamp skips the install when it is there.
# The harness itself stays Rust; only the test's local Ray head runs from this environment.
set -euo pipefail
cd "$(dirname "$0")/.."
WANT="ray[default]==2.60.0"
VENV=.venv-ray
STAMP="$VENV/.rlharness-stamp"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && "$VENV/bin/ray" --version >/dev/null 2>&1; then
    exit 0
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$WANT"
echo "$WANT" > "$STAMP"
