#!/usr/bin/env bash
# Installs the pinned AWS clients (requirements.txt: boto3, botocore, the
# AWS CLI) into a virtual environment of their own, once per set of pins,
# under ~/.cache/quartermaster (QM_AWS_CLIENTS_VENV: elsewhere), and prints
# its directory. Idempotent: the gateway tests run it before they start.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../venv.sh" aws-clients "$here/requirements.txt" aws ${QM_AWS_CLIENTS_VENV:+"$QM_AWS_CLIENTS_VENV"}
