#!/usr/bin/env bash
# Runs each `make` target named on the command line in order, stopping at the
# first that fails, and prints how long each took at the end (also when one
# failed): `make test` runs its phases through this.
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
declare -a names=() secs=() marks=()
status=0
start_all=$(date +%s)
for phase in "$@"; do
  printf '\n== phase %s\n' "$phase"
  start=$(date +%s)
  "$make" --no-print-directory "$phase"
  rc=$?
  names+=("$phase")
  secs+=("$(( $(date +%s) - start ))")
  if [ "$rc" -ne 0 ]; then
    marks+=("  (failed)")
    status=$rc
    break
  fi
  marks+=("")
done
printf '\nphases (seconds):\n'
for i in "${!names[@]}"; do
  printf '  %-20s %6ss%s\n' "${names[$i]}" "${secs[$i]}" "${marks[$i]}"
done
printf '  %-20s %6ss\n' total "$(( $(date +%s) - start_all ))"
exit "$status"
