#!/usr/bin/env bash
# The size rule `make lint` keeps for files (clippy's too_many_lines keeps
# the one for functions): no Rust source file outside tests over 800 lines.
# Test files (a crate's tests/, a module's tests.rs) are left out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
limit=${QM_MAX_FILE_LINES:-800}
over=$(cd "$root" && git ls-files --cached --others --exclude-standard '*.rs' |
  grep -Ev '(^|/)tests/|(^|/)tests\.rs$' |
  while read -r f; do
    n=$(wc -l <"$f")
    [ "$n" -gt "$limit" ] && echo "$f: $n lines"
  done || true)
if [ -n "$over" ]; then
  echo "files over $limit lines (split them by what they do):" >&2
  echo "$over" >&2
  exit 1
fi
echo "no source file over $limit lines"
