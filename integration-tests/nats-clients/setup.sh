#!/usr/bin/env bash
# Installs NATS's own Python client (requirements.txt: nats-py and nkeys,
# pinned) into a virtual environment of its own, once per set of pins,
# under ~/.cache/quartermaster (QM_NATS_CLIENTS_VENV: elsewhere), and
# prints its directory. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../venv.sh" nats-clients "$here/requirements.txt" python ${QM_NATS_CLIENTS_VENV:+"$QM_NATS_CLIENTS_VENV"}
