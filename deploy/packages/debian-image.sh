#!/usr/bin/env bash
# The Debian system the package test installs the packages on:
# quartermaster/debian-systemd:local (QM_DEBIAN_SYSTEMD_IMAGE), a minimal
# root file system of this host's Debian release with systemd as its init,
# made with mmdebstrap (no registry; deploy/images/debian-base.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../images/debian-base.sh" "${QM_DEBIAN_SYSTEMD_IMAGE:-quartermaster/debian-systemd:local}" \
  systemd,systemd-sysv,adduser,procps,ca-certificates \
  ': > "$1"/etc/machine-id'
