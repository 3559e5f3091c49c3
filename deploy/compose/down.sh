#!/usr/bin/env bash
# Stops the compose project up.sh started. The volumes (the log, the jobs,
# the checkpoints) are kept: `deploy/compose/down.sh -v` deletes them too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=${QM_COMPOSE_PROJECT:-quartermaster}
export QM_COMPOSE_CREDENTIALS=${QM_COMPOSE_CREDENTIALS:-$here/credentials}
# shellcheck source=compose.sh
. "$here/compose.sh"
compose -p "$project" -f "$here/docker-compose.yml" down "$@"
