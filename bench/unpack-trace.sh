#!/usr/bin/env bash
# Unpacks the ITP-2021 trace once into ~/.cache/quartermaster/traces
# (or $QM_CACHE) and prints the folder: evaluate.sh and
# compare-evaluation.sh share it.   bench/unpack-trace.sh TARBALL
set -euo pipefail
tarball=${1:?the trace tarball}
cache=${QM_CACHE:-$HOME/.cache/quartermaster}/traces/itp-2021
sum=$(sha256sum "$tarball" | cut -c1-12)
if [ ! -f "$cache/$sum.complete" ]; then
  # Unpacked beside it and moved into place whole, so a second run at the
  # same time never reads half a trace.
  echo "unpacking $tarball into $cache" >&2
  mkdir -p "$(dirname "$cache")"
  tmp=$(mktemp -d "$cache.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$tarball" -C "$tmp"
  touch "$tmp/$sum.complete"
  rm -rf "$cache"
  mv "$tmp" "$cache"
fi
echo "$cache"
