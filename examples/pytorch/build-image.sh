#!/usr/bin/env bash
# Builds the PyTorch training image the container tests and the demo run,
# without a registry: a Debian root file system made with mmdebstrap from
# this host's own Debian package sources, with Debian's CPU build of
# PyTorch (python3-torch), imported as a base image; then this folder's
# SageMaker-contract training script on top, as `train` on the PATH (so
# the engine runs it as SageMaker does: the image with the argument
# `train`).
#
#   $QM_TORCH_IMAGE       the image built (default quartermaster/pytorch-trainer:local)
#   $QM_DEBIAN_SOURCES    the package sources mmdebstrap reads (default: this
#                         host's, /etc/apt/sources.list.d/*.sources or
#                         /etc/apt/sources.list)
#   $QM_DEBIAN_SUITE      default bookworm
#   $QM_CACHE             where the root file system is cached (default
#                         ~/.cache/quartermaster): only the first build is slow
# Prints the time each step took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${QM_CACHE:-$HOME/.cache/quartermaster}
image=${QM_TORCH_IMAGE:-quartermaster/pytorch-trainer:local}
suite=${QM_DEBIAN_SUITE:-bookworm}
packages=python3-torch,python3-numpy,ca-certificates,tini
base_image=quartermaster/pytorch-base:$suite
say() { printf 'torch image: %s\n' "$*" >&2; }
started=$(date +%s)

# The base: rebuilt only when its recipe (suite, packages) changes.
QM_DEBIAN_SUITE=$suite "$here/../../deploy/images/debian-base.sh" "$base_image" "$packages" \
  'chroot "$1" useradd --uid 1000 --create-home trainer'

# The script on top: rebuilt only when it or this recipe changes.
sum=$(cat "$here/train.py" "$0" | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "qm.script.sha256" }}' "$image" 2>/dev/null || true)" = "$sum" ]; then
  say "$image is up to date ($(( $(date +%s) - started )) s)"
  exit 0
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/train.py" "$ctx/train"
chmod 0755 "$ctx/train"
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base_image
COPY train /usr/local/bin/train
LABEL qm.script.sha256="$sum"
WORKDIR /opt/ml
USER trainer
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["/usr/bin/tini", "-s", "--"]
DOCKERFILE
docker build -q -t "$image" "$ctx" >"$ctx/build.log" 2>&1 || { cat "$ctx/build.log" >&2; exit 1; }
say "built $image in $(( $(date +%s) - started )) s"
