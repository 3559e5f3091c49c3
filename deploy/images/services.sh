#!/usr/bin/env bash
# Builds one image per service from the release binaries, FROM scratch with
# the binary (debug info stripped), the shared libraries it links, the CA
# certificates (for S3 and NATS over TLS) and a passwd entry for the
# unprivileged user it runs as (65532, "nonroot"):
#   ${QM_IMAGE_PREFIX:-quartermaster/}qm-admission:<version>   and :local
#   ...qm-scheduler, qm-executor (with the example workload qm-trainer), qm-checkpoint,
#   qm-gateway (the AWS Batch API), qm-console (the web console), and qm (the command
#   line: `docker run quartermaster/qm:local auth ...`)
# Every service image also holds qm-probe, its health check (no shell or curl
# in a FROM-scratch image): `qm-probe http://127.0.0.1:9642/readyz`.
# Labels: org.opencontainers.image.{title,version,revision,created,source}.
# No registry is needed or contacted; push the tags to yours if you have one.
#
#   deploy/images/services.sh            build the release binaries, then the images
#   QM_SKIP_BUILD=1 deploy/images/services.sh   use target/release as it is
#   QM_IMAGE_PROFILE=dev ...   from target/debug instead (`make images-test`:
#                              the tests' images without a release build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=${QM_IMAGE_PREFIX:-quartermaster/}
say() { printf 'images: %s\n' "$*" >&2; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
revision=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)

profile=${QM_IMAGE_PROFILE:-release}
case "$profile" in
  release) release="$root/target/release"; profile_flag=--release ;;
  dev) release="$root/target/debug"; profile_flag= ;;
  *) say "QM_IMAGE_PROFILE=$profile: must be release or dev"; exit 2 ;;
esac
if [ -z "${QM_SKIP_BUILD:-}" ]; then
  say "building the $profile binaries"
  (cd "$root" && cargo build $profile_flag --locked --bins \
    -p qm-admission -p qm-scheduler -p qm-executor -p qm-supervise -p qm-checkpointd -p qm-trainer \
    -p qm-gateway -p qm-console \
    -p qm -p qm-probe)
fi

# service_image NAME BINARY... (the first binary is the entrypoint)
service_image() {
  local name=$1
  shift
  local image="$prefix$name"
  local ctx
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' RETURN
  mkdir -p "$ctx/rootfs/tmp" "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/var/lib/quartermaster"
  chmod 1777 "$ctx/rootfs/tmp"
  chmod 0777 "$ctx/rootfs/var/lib/quartermaster"
  printf 'root:x:0:0:root:/:/nonexistent\nnonroot:x:65532:65532:nonroot:/var/lib/quartermaster:/nonexistent\n' >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
  fi
  local binary sums=""
  for binary in "$@"; do
    [ -x "$release/$binary" ] || { say "missing $release/$binary (run without QM_SKIP_BUILD)"; exit 1; }
    strip --strip-debug -o "$ctx/rootfs/$binary" "$release/$binary"
    sums="$sums$(sha256sum "$ctx/rootfs/$binary" | cut -c1-16)"
    # The dynamic loader and every library the binary links.
    for lib in $(ldd "$release/$binary" | awk '/=>/ { print $3 } /^[[:space:]]*\/.*ld-linux/ { print $1 }'); do
      mkdir -p "$ctx/rootfs$(dirname "$lib")"
      cp -L "$lib" "$ctx/rootfs$lib"
    done
  done
  local sum
  # The binaries and this recipe: a change to either rebuilds.
  sum=$(printf '%s%s' "$sums" "$(sha256sum "$0" | cut -c1-16)" | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "qm.binary.sha256" }}' "$image:local" 2>/dev/null || true)" = "$sum" ]; then
    say "$image:local is up to date"
    docker tag "$image:local" "$image:$version"
    return
  fi
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
USER 65532:65532
WORKDIR /var/lib/quartermaster
ENV PATH=/
LABEL org.opencontainers.image.title="$name" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.revision="$revision" \\
      org.opencontainers.image.created="$created" \\
      org.opencontainers.image.source="quartermaster" \\
      org.opencontainers.image.licenses="Apache-2.0" \\
      qm.binary.sha256="$sum"
ENTRYPOINT ["/$1"]
DOCKERFILE
  say "building $image:$version ($revision)"
  docker build -q -t "$image:local" -t "$image:$version" "$ctx" >/dev/null 2>"$ctx/build.err" \
    || { cat "$ctx/build.err"; exit 1; }
}

service_image qm-admission qm-admission qm-probe
service_image qm-scheduler qm-scheduler qm-probe
# Jobs run inside the executor's container: the image carries the example
# workload; for real training, build FROM your training image and copy
# /qm-executor and /qm-supervise into it (deploy/README.md).
service_image qm-executor qm-executor qm-supervise qm-trainer qm-probe
service_image qm-checkpoint qm-checkpoint qm-probe
service_image qm-gateway qm-gateway qm-probe
service_image qm-console qm-console qm-probe
service_image qm qm
for name in qm-admission qm-scheduler qm-executor qm-checkpoint qm-gateway qm-console qm; do
  size=$(docker image inspect -f '{{ .Size }}' "$prefix$name:local")
  say "ready: $prefix$name:$version ($((size / 1024 / 1024)) MiB)"
done
