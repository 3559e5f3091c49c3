#!/usr/bin/env bash
# The what-if evaluation on the full ITP-2021 trace (docs/evaluation.md):
# unpacks the trace once into ~/.cache/quartermaster/traces, then runs
# `qm whatif` with each of the two mappings its README allows, writing the
# reports under docs/evaluation/{clusters,teams}/ (HTML with the plots, the
# JSON of every figure, the Markdown summary).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
traces=$(cd "${1:-$root/../shared/traces}" && pwd)
tarball="$traces/itp-2021/raw-traces.tar.gz"
quota="$traces/helios-venus-quota/cluster_gpu_number.csv"
[ -f "$tarball" ] || { echo "evaluate: no $tarball (set QM_TRACES to the traces folder)" >&2; exit 2; }
cache=$("$root/bench/unpack-trace.sh" "$tarball")
qm="$root/target/release/qm"
out="$root/docs/evaluation"
echo "== clusters: each ITP cluster a quota share of one fleet" >&2
"$qm" whatif --trace "$cache" --mapping clusters --seed 2021 --out "$out/clusters"
echo "== teams: 20 synthetic teams sized by the Helios (Venus) quota table" >&2
"$qm" whatif --trace "$cache" --mapping teams --quota "$quota" --seed 2021 --out "$out/teams"
# The JSON holds every figure; keep it out of the repository's history
# when it is large (it is regenerated here in seconds).
echo "evaluate: reports in $out/{clusters,teams}/report.html" >&2
