#!/usr/bin/env bash
# Installs the pinned AWS clients (requirements.txt: boto3, botocore, the
# AWS CLI) into a virtual environment of their own, once per set of pins,
# under ~/.cache/quartermaster, and prints its directory. Idempotent: the
# gateway tests run it before they start.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pins="$here/requirements.txt"
hash=$(sha256sum "$pins" | cut -c1-12)
venv="${QM_AWS_CLIENTS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quartermaster/aws-clients-$hash}"
if [ ! -x "$venv/bin/aws" ] || [ ! -f "$venv/.complete" ]; then
    python3 -c 'import venv' 2>/dev/null || {
        echo "aws-clients: needs python3 with its venv module (Debian: python3-venv)" >&2
        exit 2
    }
    echo "aws-clients: installing the pinned boto3 and AWS CLI into $venv (first time only)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$pins" >&2
    touch "$venv/.complete"
fi
echo "$venv"
