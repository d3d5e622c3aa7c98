#!/usr/bin/env bash
# Installs pinned PyPI packages into a project-local, git-ignored folder (put on PYTHONPATH by
# whoever uses them), idempotently: a stamp naming the wanted versions skips the install when
# they are there and import.
#   usage: ci/pip-target.sh DIR PYTHON_IMPORT_CHECK PACKAGE==VERSION...
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1 check=$2
shift 2
want="$*"
stamp=$dir/.rlharness-stamp
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
    && PYTHONPATH=$dir python3 -c "$check" 2>/dev/null; then
    exit 0
fi
rm -rf "$dir"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$dir" "$@"
echo "$want" > "$stamp"
