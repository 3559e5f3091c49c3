#!/usr/bin/env bash
# Checks that a change left the what-if evaluation's figures as they were:
# builds `qm` (release) at BASE (default: the commit before HEAD) in a
# worktree and at the working tree, runs `qm whatif` on the full ITP-2021
# trace with both mappings at each, and compares every figure (the
# JSON of every figure and the summary.md of each mapping, to the last
# digit; the runs' wall-clock times left out). Exit 0: identical.
#
#   bench/compare-evaluation.sh [BASE]      QM_TRACES: the traces folder
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-HEAD~1}
commit=$(git -C "$root" rev-parse --verify --quiet "$base^{commit}") ||
  { echo "compare-evaluation: $base is not a commit" >&2; exit 2; }
traces=$(cd "${QM_TRACES:-$root/../shared/traces}" && pwd)
tarball="$traces/itp-2021/raw-traces.tar.gz"
quota="$traces/helios-venus-quota/cluster_gpu_number.csv"
[ -f "$tarball" ] || { echo "compare-evaluation: no $tarball (set QM_TRACES)" >&2; exit 2; }
cache=${QM_CACHE:-$HOME/.cache/quartermaster}
unpacked=$("$root/bench/unpack-trace.sh" "$tarball")
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; git -C "$root" worktree prune; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/base" "$commit" >/dev/null
run() { # name, source folder
  echo "== $1: building qm (release)" >&2
  (cd "$2" && CARGO_TARGET_DIR="$cache/compare-target-$1" cargo build --release --locked -q -p qm)
  local qm="$cache/compare-target-$1/release/qm"
  "$qm" whatif --trace "$unpacked" --mapping clusters --seed 2021 --out "$work/$1/clusters" >/dev/null
  "$qm" whatif --trace "$unpacked" --mapping teams --quota "$quota" --seed 2021 --out "$work/$1/teams" >/dev/null
}
run base "$work/base"
run change "$root"
# Every figure of report.json (unrounded) and summary.md (as people read
# it); the run's own wall-clock times are not figures and are left out.
python3 - "$work/base" "$work/change" <<'PY'
import difflib, json, pathlib, sys

def figures(value):
    if isinstance(value, dict):
        return {k: figures(v) for k, v in value.items() if k != "wallSeconds"}
    if isinstance(value, list):
        return [figures(v) for v in value]
    return value

base, change = map(pathlib.Path, sys.argv[1:3])
status = 0
for mapping in ("clusters", "teams"):
    same = True
    for name in ("report.json", "summary.md"):
        a, b = base / mapping / name, change / mapping / name
        if not a.is_file() or not b.is_file():
            print(f"compare-evaluation: {mapping}: {name} is missing", file=sys.stderr)
            same = False
            continue
        if name.endswith(".json"):
            left = json.dumps(figures(json.loads(a.read_text())), indent=1, sort_keys=True)
            right = json.dumps(figures(json.loads(b.read_text())), indent=1, sort_keys=True)
        else:
            left, right = a.read_text(), b.read_text()
        if left != right:
            same = False
            diff = difflib.unified_diff(left.splitlines(), right.splitlines(), "base", "change", lineterm="")
            print("\n".join(list(diff)[:60]))
    print(f"compare-evaluation: {mapping}: " + ("every figure identical" if same else "the figures differ (above)"), file=sys.stderr)
    status |= 0 if same else 1
sys.exit(status)
PY
