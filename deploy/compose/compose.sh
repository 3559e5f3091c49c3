# Sourced by up.sh, down.sh and check.sh: `compose ARGS...` runs the compose
# tool on the compose file: $QM_COMPOSE if set (e.g. "docker-compose"),
# else Docker's compose plugin when installed, else docker-compose.
compose() {
  local tool
  if [ -n "${QM_COMPOSE:-}" ]; then
    read -r -a tool <<<"$QM_COMPOSE"
  elif docker compose version >/dev/null 2>&1; then
    tool=(docker compose)
  else
    tool=(docker-compose)
  fi
  "${tool[@]}" "$@"
}
