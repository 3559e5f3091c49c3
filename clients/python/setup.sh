#!/usr/bin/env bash
# The Python client installed from this checkout (pip install, as a user
# would) into a virtual environment with its pinned test and check tools
# (requirements-dev.txt), under ~/.cache/quartermaster; prints its
# directory. The environment is made once per set of pins; the client is
# reinstalled each time, so it is always this checkout's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv=$("$here/../../integration-tests/venv.sh" python-client "$here/requirements-dev.txt" python)
# Built from a copy, so the checkout gets no build/ or egg-info.
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "$here/pyproject.toml" "$here/README.md" "$here/src" "$copy/"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-input --no-deps \
    --no-build-isolation --force-reinstall "$copy" >&2
echo "$venv"
