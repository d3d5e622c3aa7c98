#!/usr/bin/env bash
# Extracts the two upstream source trees the real-verl tests run (verl release/v0.7.1 @
# 9dfab8e5d, Arctic-Platform @ 5864380, unmodified, packed with `git archive`) into the
# git-ignored cache .cache/upstream/, after checking their sha256, and prints the settings that
# point the harness at them, each with the commit its archive was made from (`git archive`
# writes it into the archive; an extracted tree has no repository to ask), which the harness
# records in run.json as the sources' `git describe`:
#   VERL_SRC=<abs path>
#   RLHARNESS_DESCRIBED_VERL_SRC=<commit>
#   ARCTIC_SRC=<abs path>
#   RLHARNESS_DESCRIBED_ARCTIC_SRC=<commit>
# The archives are read from RLHARNESS_UPSTREAM_DIR; CI keeps them in ../shared/upstream beside
# the checkout, the default. A user runs the scenarios against their own checkouts instead (set
# VERL_SRC and ARCTIC_SRC). Idempotent: an extracted tree whose stamp names the archive's
# sha256 is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC_DIR=${RLHARNESS_UPSTREAM_DIR:-../shared/upstream}
CACHE=.cache/upstream
extract() {
    local var=$1 archive=$2 sha=$3 top=$4
    local path="$SRC_DIR/$archive" dest="$CACHE/${archive%.tar.gz}"
    if [[ -f "$dest/.rlharness-commit" && -f "$dest/.rlharness-sha256" &&
        "$(cat "$dest/.rlharness-sha256")" == "$sha" ]]; then
        echo "$var=$(cd "$dest/$top" && pwd)"
        echo "RLHARNESS_DESCRIBED_$var=$(cat "$dest/.rlharness-commit")"
        return 0
    fi
    [[ -f "$path" ]] || { echo "error: $path not found (set RLHARNESS_UPSTREAM_DIR to the folder of the archives)" >&2; exit 1; }
    local got
    got=$(sha256sum "$path" | cut -d' ' -f1)
    if [[ "$got" != "$sha" ]]; then
        echo "error: $path has sha256 $got, expected $sha: refusing to extract it" >&2
        exit 1
    fi
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$dest.tmp"
    tar -xzf "$path" -C "$dest.tmp"
    [[ -d "$dest.tmp/$top" ]] || { echo "error: $archive has no top folder $top/" >&2; exit 1; }
    # (git reads the archive's first header only: the rest of zcat's output is cut off.)
    local commit
    commit=$(zcat "$path" 2>/dev/null | git get-tar-commit-id || true)
    [[ -n "$commit" ]] || { echo "error: $archive names no commit (not made by git archive)" >&2; exit 1; }
    echo "${commit:0:9}" > "$dest.tmp/.rlharness-commit"
    echo "$sha" > "$dest.tmp/.rlharness-sha256"
    mv "$dest.tmp" "$dest"
    echo "$var=$(cd "$dest/$top" && pwd)"
    echo "RLHARNESS_DESCRIBED_$var=$(cat "$dest/.rlharness-commit")"
}
mkdir -p "$CACHE"
extract VERL_SRC verl-release-v0.7.1-9dfab8e5d.tar.gz \
    6dda03dbfdfcda1740f79edd3e51bff74d24ab236c45cefb5d5296b27dbecfca verl
extract ARCTIC_SRC arctic-platform-5864380.tar.gz \
    d4e92874392a513b2181b6501e17f82a22930fd6986f150561a7f5be0f8d2eff arctic-platform
