#!/usr/bin/env bash
# Installs a pinned requirements file into a virtual environment of its
# own, once per set of pins, under ~/.cache/quartermaster, and prints its
# directory. Idempotent. Used by aws/setup.sh and nats-clients/setup.sh.
#
#   venv.sh NAME REQUIREMENTS PROGRAM [DIRECTORY]
#     NAME: the cache folder's prefix and the name in messages;
#     PROGRAM: a program of the venv's bin/ whose presence says it is there;
#     DIRECTORY: where to put it instead (default: the cache, by pins).
set -euo pipefail
name=$1 pins=$2 program=$3
hash=$(sha256sum "$pins" | cut -c1-12)
venv="${4:-${XDG_CACHE_HOME:-$HOME/.cache}/quartermaster/$name-$hash}"
if [ ! -x "$venv/bin/$program" ] || [ ! -f "$venv/.complete" ]; then
    python3 -c 'import venv' 2>/dev/null || {
        echo "$name: needs python3 with its venv module (Debian: python3-venv)" >&2
        exit 2
    }
    echo "$name: installing $(basename "$(dirname "$pins")")/$(basename "$pins") into $venv (first time only)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$pins" >&2
    touch "$venv/.complete"
fi
echo "$venv"
