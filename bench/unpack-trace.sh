#!/usr/bin/env bash
# Unpacks the ITP-2021 trace once into ~/.cache/quartermaster/traces
# (or $QM_CACHE) and prints the folder: evaluate.sh and
# compare-evaluation.sh share it.   bench/unpack-trace.sh TARBALL
set -euo pipefail
tarball=${1:?the trace tarball}
cache=${QM_CACHE:-$HOME/.cache/quartermaster}/traces/itp-2021
sum=$(sha256sum "$tarball" | cut -c1-12)
if [ ! -f "$cache/$sum.complete" ]; then
  echo "unpacking $tarball into $cache" >&2
  rm -rf "$cache" && mkdir -p "$cache"
  tar -xzf "$tarball" -C "$cache"
  touch "$cache/$sum.complete"
fi
echo "$cache"
