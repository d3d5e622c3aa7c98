#!/usr/bin/env bash
# Installs real verl's Python environment (verl 0.7.1 + the Arctic adapter, on CPU) into the
# project-local, git-ignored virtual environment .venv-verl/, for the real-verl tests and the
# scenarios of scenarios/verl/. verl and Arctic-Platform themselves are NOT installed: the
# launcher (scenarios/verl/verl-arctic.sh) puts the checkouts VERL_SRC and ARCTIC_SRC on
# PYTHONPATH, so a user points it at their own trees without reinstalling.
#
# Every package is pinned in ci/verl-requirements.lock (a `pip freeze` of a resolved install:
# torch 2.9.0 and vllm 0.12.0, which verl imports without running, ray 2.60.0, deepspeed
# 0.19.8, transformers 4.57.6, numpy < 2, ...) and installed with --no-deps. flash-attn has no
# wheel: its sdist is built without its CUDA extension (verl imports only its pure-PyTorch
# pad/unpad helpers).
#
# The released adapter (arctic-platform 0.1.4 from PyPI, with the two packages of its [verl]
# extra that the environment lacks) goes into a folder of its own, $VENV/arctic-released/
# (ci/arctic-released.lock, by hash, --no-deps --target), which the real-verl tests point
# ARCTIC_SRC at for their released-adapter lane; the extracted 5864380 tree stays the default. Needs Python 3.12 (Arctic-Platform's floor; numpy 1.26.4 has no 3.13
# wheel): VERL_INSTALL_PYTHON, else the first of python3.12, python3 and a version manager's 3.12. Idempotent: a stamp (the lock's hash, the interpreter's version) skips the work.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-verl
LOCK=ci/verl-requirements.lock
FLASH_ATTN="flash-attn==2.8.3.post2"
STAMP="$VENV/.rlharness-stamp"
find_python() {
    local c
    for c in "${VERL_INSTALL_PYTHON:-}" python3.12 python3 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
        [[ -n "$c" ]] || continue
        command -v "$c" >/dev/null 2>&1 || continue
        if "$c" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' 2>/dev/null; then
            # The interpreter itself, not a version manager's shim (the venv links to it).
            "$c" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    return 1
}
PY=$(find_python) || {
    echo "error: ci/verl-install.sh needs Python 3.12 (Arctic-Platform requires >= 3.12; the lock's" \
        "numpy 1.26.4 has no wheel for 3.13, and 3.12 is what was proven); none found on PATH or in" \
        "~/.pyenv/versions. Set VERL_INSTALL_PYTHON to one." >&2
    exit 1
}
want="$(sha256sum "$LOCK" | cut -c1-16) $FLASH_ATTN $("$PY" -c 'import sys; print(sys.version.split()[0])')"
# flash-attn's __init__ skips its missing CUDA extension only with this set (as verl runs it).
export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE
install_venv() {
    local started=$SECONDS
    echo "ci/verl-install.sh: installing verl's environment into $VENV with $PY (about 10 GB)"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    # deepspeed's sdist compiles no ops at install; the wheel cache keeps the built sdists.
    DS_BUILD_OPS=0 pipi --no-deps -r "$LOCK"
    FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE pipi --no-deps --no-build-isolation "$FLASH_ATTN"
    if ! out=$("$P" -c "import torch, vllm, ray, deepspeed, flash_attn, transformers, hydra, tensordict" 2>&1); then
        echo "$out" | tail -20 >&2
        echo "error: verl's environment in $VENV does not import" >&2
        exit 1
    fi
    echo "$want" > "$STAMP"
    echo "ci/verl-install.sh: installed in $((SECONDS - started)) s"
}
P="$VENV/bin/python"
pipi() { "$P" -m pip install --disable-pip-version-check --no-input --progress-bar off "$@"; }
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]] ||
    ! "$P" -c "import torch, vllm, ray, deepspeed, flash_attn" >/dev/null 2>&1; then
    install_venv
fi
RELEASED_LOCK=ci/arctic-released.lock
RELEASED="$VENV/arctic-released"
want_released=$(sha256sum "$RELEASED_LOCK" | cut -c1-16)
if [[ ! -f "$RELEASED/.rlharness-stamp" || "$(cat "$RELEASED/.rlharness-stamp")" != "$want_released" ]]; then
    rm -rf "$RELEASED"
    pipi --no-deps --require-hashes --target "$RELEASED" -r "$RELEASED_LOCK"
    if ! out=$(PYTHONPATH=$RELEASED "$P" -c "from arctic_platform._dependency_groups import require_any_dep_group as r; r(\"verl\"); import arctic_platform.client" 2>&1); then
        echo "$out" | tail -20 >&2
        echo "error: the released adapter in $RELEASED does not import" >&2
        exit 1
    fi
    echo "$want_released" > "$RELEASED/.rlharness-stamp"
    echo "ci/verl-install.sh: the released adapter installed into $RELEASED"
fi
