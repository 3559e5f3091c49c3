#!/usr/bin/env bash
# A Debian base image without a registry: a root file system made with
# mmdebstrap from this host's own Debian package sources, imported into
# Docker. Made once per recipe (suite, packages, hook) and cached.
#
#   deploy/images/debian-base.sh IMAGE PACKAGES [CUSTOMIZE-HOOK]
#   $QM_DEBIAN_SOURCES    the package sources (default: this host's,
#                         /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list)
#   $QM_DEBIAN_SUITE      default: this host's release (bookworm if unknown)
#   $QM_CACHE             the cache (default ~/.cache/quartermaster)
# Used by examples/pytorch/build-image.sh and the package test.
set -euo pipefail
image=${1:?image}
packages=${2:?packages}
hook=${3:-true}
cache=${QM_CACHE:-$HOME/.cache/quartermaster}
host_suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
suite=${QM_DEBIAN_SUITE:-${host_suite:-bookworm}}
say() { printf 'debian image: %s\n' "$*" >&2; }
started=$(date +%s)

sources=${QM_DEBIAN_SOURCES:-}
if [ -z "$sources" ]; then
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    if [ -s "$f" ] && grep -qE '^(deb |Types: *deb)' "$f"; then sources=$f; break; fi
  done
fi
[ -n "$sources" ] || { say "no Debian package sources found; set QM_DEBIAN_SOURCES"; exit 2; }

recipe=$(printf '%s %s %s' "$suite" "$packages" "$hook" | sha256sum | cut -c1-16)
rootfs="$cache/debian-rootfs/$recipe.tar"
if [ "$(docker image inspect -f '{{ index .Config.Labels "qm.recipe" }}' "$image" 2>/dev/null || true)" = "$recipe" ]; then
  exit 0
fi
if [ ! -s "$rootfs" ]; then
  command -v mmdebstrap >/dev/null || {
    [ "$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
  } || { say "mmdebstrap is needed (Debian's package mmdebstrap)"; exit 2; }
  say "making a Debian $suite root file system with $packages (first time only; a few minutes)"
  mkdir -p "$(dirname "$rootfs")"
  mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="$hook" \
    "$suite" "$rootfs.partial" "$sources" >&2
  mv "$rootfs.partial" "$rootfs"
  say "root file system ready ($(du -h "$rootfs" | cut -f1 | tail -1)) after $(( $(date +%s) - started )) s"
fi
docker import --change "LABEL qm.recipe=$recipe" "$rootfs" "$image" >/dev/null
say "imported $image"
