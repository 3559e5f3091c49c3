#!/usr/bin/env bash
# Checks that a change left the core's speed as it was: the scheduling-pass
# benchmarks (`make bench-pass`'s `pass` bench) and the million-job
# simulation (`make bench-sim`), built at BASE (default: the commit before
# HEAD) in a worktree and at the working tree, run alternately
# (base, change, base, change, ...; QM_ROUNDS rounds, default 2) on this
# machine, then each measure's median per side and the ratio change/base.
# Wall times on a shared machine move by more than the 5% a refactoring
# must stay within, so it also counts the instructions (valgrind's
# callgrind, when installed) the simulation of QM_CALLGRIND_JOBS jobs
# (default 20,000) executes on each side: the same work gives the same
# count, whatever else the machine does.
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
# Instructions executed: deterministic, so one run per side.
if command -v valgrind >/dev/null; then
  for side in base change; do
    echo "== $side: instructions of the simulation (callgrind)" >&2
    exe=$(ls -t "$cache/compare-target-$side"/release/deps/simulate-* | grep -v '\.d$' | head -1)
    QM_BENCH_JOBS=${QM_CALLGRIND_JOBS:-20000} valgrind --tool=callgrind \
      --callgrind-out-file="$work/callgrind.$side" "$exe" >/dev/null 2>"$work/callgrind.$side.log"
    ir=$(awk '/^summary:/ { print $2 }' "$work/callgrind.$side")
    echo "$side simulate/instructions_${QM_CALLGRIND_JOBS:-20000}_jobs $ir" >>"$work/results"
  done
fi
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
    unit = "" if "instructions" in name else "ns"
    print(f"{name:44} {b:>12.0f}{unit:2} {c:>12.0f}{unit:2} {ratio:>12.3f}")
PY
