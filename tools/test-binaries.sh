#!/usr/bin/env bash
# Builds every test of the workspace once (`cargo test --workspace --no-run`,
# so the unit tests, the integration tests and `cargo build --workspace
# --bins` share one feature set and one build), then runs a set of the test
# binaries the way `cargo test` would: from their package's folder, one after
# another, and stops at the first that fails.
#
#   tools/test-binaries.sh unit         every test binary but the end-to-end ones,
#                                       then the doc tests
#   tools/test-binaries.sh integration  the end-to-end tests (qm-integration-tests)
#   tools/test-binaries.sh integration faults -- --test-threads 1
#                                       only the binaries named, with arguments
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:?unit or integration}
shift
names=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do names+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
args=("$@")
case "$which" in unit | integration) ;; *) echo "test-binaries: $which: unit or integration" >&2; exit 2 ;; esac

list=$(mktemp)
trap 'rm -f "$list"' EXIT
cargo test --locked --workspace --no-run --message-format=json-render-diagnostics >"$list"
# "package<TAB>manifest folder<TAB>target name<TAB>executable", one a line.
binaries=$(python3 - "$list" <<'PY'
import json, os, sys
seen = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m.get("profile", {}).get("test"):
        continue
    exe = m["executable"]
    if exe in seen:
        continue
    seen.add(exe)
    # "path+file:///dir#name@version", or "...#version" when the name is
    # the folder's.
    url, _, fragment = m["package_id"].partition("#")
    package = fragment.split("@")[0] if "@" in fragment else url.rstrip("/").split("/")[-1]
    print("\t".join([package, os.path.dirname(m["manifest_path"]), m["target"]["name"], exe]))
PY
)
status=0
ran=0
while IFS=$'\t' read -r package dir target exe; do
  [ -n "$exe" ] || continue
  if [ "$which" = integration ]; then
    [ "$package" = qm-integration-tests ] || continue
  else
    [ "$package" != qm-integration-tests ] || continue
  fi
  if [ ${#names[@]} -gt 0 ]; then
    keep=no
    for n in "${names[@]}"; do [ "$n" = "$target" ] && keep=yes; done
    [ "$keep" = yes ] || continue
  fi
  printf '\n     Running %s (%s)\n' "$target" "$package"
  ran=$((ran + 1))
  # A binary that hangs is killed (and fails the run) rather than holding
  # CI until its own limit: QM_TEST_TIMEOUT seconds each (default 1800).
  if ! (cd "$dir" && CARGO_MANIFEST_DIR="$dir" CARGO_PKG_NAME="$package" \
    timeout --kill-after=30 "${QM_TEST_TIMEOUT:-1800}" "$exe" ${args[@]+"${args[@]}"}); then
    echo "test-binaries: $target ($package) failed (or ran past QM_TEST_TIMEOUT=${QM_TEST_TIMEOUT:-1800} s)" >&2
    status=1
    break
  fi
done <<<"$binaries"
if [ "$ran" = 0 ]; then
  echo "test-binaries: no $which test binary matched ${names[*]:-}" >&2
  exit 2
fi
if [ "$which" = unit ] && [ "$status" = 0 ] && [ ${#names[@]} -eq 0 ]; then
  cargo test --locked --workspace --doc
fi
exit "$status"
