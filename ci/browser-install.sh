#!/usr/bin/env bash
# Test dependencies of the browser test (harness/tests/browser/, run by ci/browser-tests.sh): a
# Chromium (Debian's `chromium` package, /usr/bin/chromium) and Playwright for Python, installed
# from PyPI into the project-local, git-ignored .browserdeps/. Playwright's own browser download
# is not used (`playwright install` is never run): the test launches the system Chromium.
# Idempotent: a version stamp skips the pip install when the wanted versions are already there,
# and apt runs only when /usr/bin/chromium is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
CHROMIUM=/usr/bin/chromium
# A font for the pages' text (no emoji font: the reports must not need one).
FONT=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
if [[ ! -x "$CHROMIUM" || ! -f "$FONT" ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "ci/browser-install.sh: $CHROMIUM or $FONT is missing: install Debian's" \
            "chromium and fonts-dejavu-core packages as root" >&2
        exit 1
    fi
    # The package lists of a fresh machine are empty: update them first.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium fonts-dejavu-core >/dev/null
fi
# (Debian's wrapper script prints a shell warning on stderr.)
"$CHROMIUM" --version 2>/dev/null
bash ci/pip-target.sh .browserdeps "import playwright.sync_api" \
    playwright==1.65.3 greenlet==3.5.6
