#!/usr/bin/env bash
# Checks that a change left the what-if evaluation's figures as they were:
# builds `qm` (release) at BASE (default: the commit before HEAD) in a
# worktree and at the working tree, runs `qm whatif` on the full ITP-2021
# trace with both mappings at each, and compares every figure (the
# JSON of every figure and the summary.md of each mapping, to the last
# digit). Exit 0: identical.
#
#   bench/compare-evaluation.sh [BASE]      QM_TRACES: the traces folder
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-HEAD~1}
traces=$(cd "${QM_TRACES:-$root/../shared/traces}" && pwd)
tarball="$traces/itp-2021/raw-traces.tar.gz"
quota="$traces/helios-venus-quota/cluster_gpu_number.csv"
[ -f "$tarball" ] || { echo "compare-evaluation: no $tarball (set QM_TRACES)" >&2; exit 2; }
cache=${QM_CACHE:-$HOME/.cache/quartermaster}
unpacked=$("$root/bench/unpack-trace.sh" "$tarball")
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/base" "$(git -C "$root" rev-parse "$base")" >/dev/null
run() { # name, source folder
  echo "== $1: building qm (release)" >&2
  (cd "$2" && CARGO_TARGET_DIR="$cache/compare-target-$1" cargo build --release --locked -q -p qm)
  local qm="$cache/compare-target-$1/release/qm"
  "$qm" whatif --trace "$unpacked" --mapping clusters --seed 2021 --out "$work/$1/clusters" >/dev/null
  "$qm" whatif --trace "$unpacked" --mapping teams --quota "$quota" --seed 2021 --out "$work/$1/teams" >/dev/null
}
run base "$work/base"
run change "$root"
status=0
for m in clusters teams; do
  # The JSON holds every figure unrounded; the summary as people read it.
  same=yes
  [ "$(cd "$work/base/$m" && ls)" = "$(cd "$work/change/$m" && ls)" ] || same=no
  for f in "$work/base/$m"/*.json "$work/base/$m"/summary.md; do
    [ -f "$f" ] || continue
    cmp -s "$f" "$work/change/$m/$(basename "$f")" || { diff -u "$f" "$work/change/$m/$(basename "$f")" | head -40; same=no; }
  done
  if [ "$same" = yes ]; then
    echo "compare-evaluation: $m: every figure identical" >&2
  else
    echo "compare-evaluation: $m: the figures differ (above)" >&2
    status=1
  fi
done
exit "$status"
