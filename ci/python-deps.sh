#!/usr/bin/env bash
# Test dependencies of the conformance suite (harness/tests/conformance/) and of the verl + Arctic
# stand-in (harness/tests/fixtures/verl/fake_arctic_verl.py): Python's `safetensors`, `numpy`
# and `pyyaml` from PyPI; and `tensorboard`, whose own reader (EventAccumulator) reads back the
# event files `run --tensorboard` writes (harness/tests/it/tensorboard.rs). Installed into the
# project-local, git-ignored .pydeps/.
# Idempotent: a version stamp skips the install when the wanted versions are already there.
# The harness itself stays Rust; the Rust tests put .pydeps on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/pip-target.sh .pydeps \
    "import safetensors, numpy, yaml; from tensorboard.backend.event_processing import event_accumulator" \
    safetensors==0.8.0 numpy==2.4.6 pyyaml==6.0.3 tensorboard==2.20.0
