#!/usr/bin/env bash
# Checks the compose files as compose reads them (`config`, with placeholder
# credentials; nothing is started): part of `make check-deploy`. The compose
# test (integration-tests/tests/compose.rs) runs the system for real.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
creds=$(mktemp -d)
trap 'rm -rf "$creds"' EXIT
touch "$creds/s3.env" "$creds/checkpoint-s3.env" "$creds/nats-routes.conf"
export QM_COMPOSE_CREDENTIALS=$creds
# shellcheck source=compose.sh
. "$here/compose.sh"
compose -f "$here/docker-compose.yml" config -q
compose -f "$here/docker-compose.yml" -f "$here/docker-compose.gpu.yml" config -q
echo "compose: docker-compose.yml and docker-compose.gpu.yml are valid"
