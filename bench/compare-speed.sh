#!/usr/bin/env bash
# Checks that a change left the core's speed as it was: the scheduling-pass
# benchmarks (`make bench-pass`'s `pass` bench) and the million-job
# simulation (`make bench-sim`), built at BASE (default: the commit before
# HEAD) in a worktree and at the working tree, run alternately
# (base, change, base, change, ...; QM_ROUNDS rounds, default 2) on this
# machine, then each measure's median per side and the ratio change/base.
#
#   bench/compare-speed.sh [BASE]        QM_ROUNDS=3 for more rounds
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-HEAD~1}
rounds=${QM_ROUNDS:-2}
commit=$(git -C "$root" rev-parse --verify --quiet "$base^{commit}") ||
  { echo "compare-speed: $base is not a commit" >&2; exit 2; }
cache=${QM_CACHE:-$HOME/.cache/quartermaster}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; git -C "$root" worktree prune; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/base" "$commit" >/dev/null
dir() { if [ "$1" = base ]; then echo "$work/base"; else echo "$root"; fi; }
bench() { # side, bench package, bench name, extra args...
  local side=$1 package=$2 name=$3
  shift 3
  (cd "$(dir "$side")" && CARGO_TARGET_DIR="$cache/compare-target-$side" \
    cargo bench --locked -q -p "$package" --bench "$name" -- "$@")
}
for side in base change; do
  echo "== $side: building the benchmarks (release)" >&2
  (cd "$(dir "$side")" && CARGO_TARGET_DIR="$cache/compare-target-$side" \
    cargo bench --locked -q --no-run -p qm-core --bench pass -p qm-sim --bench simulate)
done
for round in $(seq "$rounds"); do
  for side in base change; do
    echo "== round $round: $side" >&2
    bench "$side" qm-core pass --noplot --output-format bencher |
      awk -v s="$side" '/^test / { gsub(",", "", $5); print s, $2, $5 }' >>"$work/results"
    bench "$side" qm-sim simulate |
      awk -v s="$side" '/^  full:/ { print s, "simulate/1m_jobs_wall_ns", $5 * 1e9 }' >>"$work/results"
  done
done
python3 - "$work/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, name, ns = line.split()
    runs.setdefault(name, {}).setdefault(side, []).append(float(ns))
print(f"{'measure':44} {'base':>14} {'change':>14} {'change/base':>12}")
for name, sides in sorted(runs.items()):
    b, c = statistics.median(sides.get("base", [0])), statistics.median(sides.get("change", [0]))
    ratio = c / b if b else float("nan")
    print(f"{name:44} {b:>12.0f}ns {c:>12.0f}ns {ratio:>12.3f}")
PY
