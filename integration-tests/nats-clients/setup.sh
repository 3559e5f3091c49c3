#!/usr/bin/env bash
# Installs NATS's own Python client (requirements.txt: nats-py and nkeys,
# pinned) into a virtual environment of its own, once per set of pins,
# under ~/.cache/quartermaster, and prints its directory. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pins="$here/requirements.txt"
hash=$(sha256sum "$pins" | cut -c1-12)
venv="${QM_NATS_CLIENTS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quartermaster/nats-clients-$hash}"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
    python3 -c 'import venv' 2>/dev/null || {
        echo "nats-clients: needs python3 with its venv module (Debian: python3-venv)" >&2
        exit 2
    }
    echo "nats-clients: installing the pinned nats-py into $venv (first time only)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$pins" >&2
    touch "$venv/.complete"
fi
echo "$venv"
