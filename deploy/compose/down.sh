#!/usr/bin/env bash
# Stops the compose project up.sh started. The volumes (the log, the jobs,
# the checkpoints) are kept: `deploy/compose/down.sh -v` deletes them too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=${QM_COMPOSE_PROJECT:-quartermaster}
export QM_COMPOSE_CREDENTIALS=${QM_COMPOSE_CREDENTIALS:-$here/credentials}
if [ -n "${QM_COMPOSE:-}" ]; then
  $QM_COMPOSE -p "$project" -f "$here/docker-compose.yml" down "$@"
elif docker compose version >/dev/null 2>&1; then
  docker compose -p "$project" -f "$here/docker-compose.yml" down "$@"
else
  docker-compose -p "$project" -f "$here/docker-compose.yml" down "$@"
fi
