#!/usr/bin/env bash
# `make dist`: Quartermaster's release files in dist/ (QM_DIST_DIR):
#   quartermaster-<version>-<arch>-linux.tar.gz   every binary, the systemd
#                                                 units, example configurations
#   quartermaster-<service>_<version>_<debarch>.deb   one Debian package per
#       service (admission, scheduler, executor, checkpoint, gateway,
#       console): its binary, a hardened systemd unit (user quartermaster,
#       ProtectSystem=strict, NoNewPrivileges, restart on failure; the
#       executor's stop timeout longer than its drain), its configuration
#       /etc/quartermaster/<service>.yaml (a conffile, kept on upgrade)
#   quartermaster-cli_<version>_<debarch>.deb     qm, qm-trainer, man pages,
#                                                 bash completion
#   quartermaster-<version>-py3-none-any.whl      the Python client
#   SHA256SUMS                                    of all of the above
#
#   deploy/packages/build.sh                  release build, then package
#   QM_DIST_PROFILE=dev QM_SKIP_BUILD=1 ...   package target/debug as it is
#                                             (the package test does)
# Needs dpkg-deb (Debian's dpkg). No unit is enabled or started on install:
# configure first (docs/packages.md), then `systemctl enable --now`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/deploy/packages"
out=${QM_DIST_DIR:-$root/dist}
profile=${QM_DIST_PROFILE:-release}
say() { printf 'dist: %s\n' "$*" >&2; }
case $profile in
  release) bin_dir="$root/target/release"; flag=--release; compress=(-Zxz); gzip_level=9 ;;
  # The debug binaries are large: compressed fast, for tests.
  dev) bin_dir="$root/target/debug"; flag=; compress=(-Zgzip -z1); gzip_level=1 ;;
  *) say "QM_DIST_PROFILE=$profile: must be release or dev"; exit 2 ;;
esac
command -v dpkg-deb >/dev/null || { say "dpkg-deb is needed (Debian's package dpkg)"; exit 2; }
services=(admission scheduler executor checkpoint gateway console)
binaries=(qm qm-trainer qm-supervise)
for s in "${services[@]}"; do binaries+=("qm-$s"); done
if [ -z "${QM_SKIP_BUILD:-}" ]; then
  say "building the binaries ($profile)"
  (cd "$root" && cargo build $flag --locked --bins \
    -p qm-admission -p qm-scheduler -p qm-executor -p qm-supervise -p qm-checkpointd \
    -p qm-gateway -p qm-console -p qm -p qm-trainer)
fi
for b in "${binaries[@]}"; do
  [ -x "$bin_dir/$b" ] || { say "missing $bin_dir/$b (run without QM_SKIP_BUILD)"; exit 1; }
done
# (awk reads its input whole: no SIGPIPE for the writer under pipefail)
version=$(awk -F'"' '/^version = / { print $2; exit }' "$root/Cargo.toml")
debarch=$(dpkg --print-architecture)
arch=$(uname -m)
glibc=$(ldd --version 2>/dev/null | awk 'NR == 1 { print $NF }')
# Only what an earlier run made goes (QM_DIST_DIR may hold other files).
mkdir -p "$out"
rm -f "$out"/quartermaster-*.deb "$out"/quartermaster-*-linux.tar.gz "$out/SHA256SUMS"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A unit with the shared hardening block in place of @HARDENING@.
unit() {
  awk -v block="$(grep -v '^#' "$here/systemd/hardening.conf.in")" \
    '$0 == "@HARDENING@" { print block; next } { print }' "$here/systemd/$1"
}

# The maintainer scripts every service package shares.
postinst() {
  cat <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if ! getent group quartermaster >/dev/null; then
    addgroup --system quartermaster >/dev/null
  fi
  if ! getent passwd quartermaster >/dev/null; then
    adduser --system --ingroup quartermaster --home /var/lib/quartermaster \
      --no-create-home --shell /usr/sbin/nologin quartermaster >/dev/null
  fi
  # Keys and secrets: readable by the services, not by other users (made
  # once: a mode the administrator chose since is kept).
  if [ ! -d /etc/quartermaster/credentials ]; then
    install -d -m 0750 -o root -g quartermaster /etc/quartermaster/credentials
  fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
    # An upgrade: a running service restarts on the new binary.
    if [ -n "$2" ]; then systemctl try-restart "$UNIT" >/dev/null || true; fi
  fi
fi
exit 0
SH
}
prerm() {
  cat <<SH
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "\$1" = remove ]; then
  systemctl disable --now $1.service >/dev/null 2>&1 || true
fi
exit 0
SH
}
postrm() {
  cat <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null || true; fi
exit 0
SH
}

deb() { # name, description, depends; the tree is $work/$name
  local name=$1 description=$2 depends=$3 tree="$work/$1"
  local size
  size=$(du -sk "$tree" | cut -f1)
  mkdir -p "$tree/DEBIAN" "$tree/usr/share/doc/$name"
  cat >"$tree/usr/share/doc/$name/copyright" <<TXT
Quartermaster $version. License: Apache-2.0 (/usr/share/common-licenses/Apache-2.0).
TXT
  cat >"$tree/DEBIAN/control" <<TXT
Package: $name
Version: $version
Architecture: $debarch
Maintainer: Quartermaster <quartermaster@localhost>
Installed-Size: $size
Depends: $depends
Section: net
Priority: optional
Description: $description
 Quartermaster shares GPU training capacity between teams: quota shares
 that keep, lend and borrow idle capacity, preemption with resume from
 checkpoints, services over NATS. See /usr/share/doc/$name.
TXT
  if [ -d "$tree/etc" ]; then
    (cd "$tree" && find etc -type f | sed 's|^|/|' | sort) >"$tree/DEBIAN/conffiles"
  fi
  dpkg-deb --root-owner-group "${compress[@]}" --build "$tree" "$out/${name}_${version}_${debarch}.deb" >/dev/null
  say "built ${name}_${version}_${debarch}.deb"
}

libc="libc6 (>= $glibc), libgcc-s1"
for s in "${services[@]}"; do
  name=quartermaster-$s
  tree="$work/$name"
  install -D -m 0755 "$bin_dir/qm-$s" "$tree/usr/bin/qm-$s"
  # The executor launches each attempt through qm-supervise, beside it.
  [ "$s" = executor ] && install -m 0755 "$bin_dir/qm-supervise" "$tree/usr/bin/qm-supervise"
  install -d "$tree/lib/systemd/system"
  unit "qm-$s.service" >"$tree/lib/systemd/system/qm-$s.service"
  chmod 0644 "$tree/lib/systemd/system/qm-$s.service"
  install -D -m 0644 "$here/etc/$s.yaml" "$tree/etc/quartermaster/$s.yaml"
  mkdir -p "$tree/DEBIAN"
  postinst | sed "s/\$UNIT/qm-$s.service/" >"$tree/DEBIAN/postinst"
  prerm "qm-$s" >"$tree/DEBIAN/prerm"
  postrm >"$tree/DEBIAN/postrm"
  chmod 0755 "$tree/DEBIAN/postinst" "$tree/DEBIAN/prerm" "$tree/DEBIAN/postrm"
  deb "$name" "Quartermaster $s (qm-$s) with its systemd unit" "$libc, adduser"
done

# The command line: qm, the example trainer, man pages, completion.
tree="$work/quartermaster-cli"
install -D -m 0755 "$bin_dir/qm" "$tree/usr/bin/qm"
install -D -m 0755 "$bin_dir/qm-trainer" "$tree/usr/bin/qm-trainer"
install -d "$tree/usr/share/man/man1" "$tree/usr/share/bash-completion/completions"
"$bin_dir/qm" man --out "$work/man" >/dev/null
for page in "$work"/man/*.1; do gzip -9n <"$page" >"$tree/usr/share/man/man1/$(basename "$page").gz"; done
"$bin_dir/qm" completions bash >"$tree/usr/share/bash-completion/completions/qm"
deb quartermaster-cli "Quartermaster's command line (qm) and the example trainer" "$libc"

# The tarball: every binary, the units and the example configurations.
tar_name="quartermaster-$version-$arch-linux"
mkdir -p "$work/$tar_name/bin" "$work/$tar_name/systemd" "$work/$tar_name/etc"
for b in "${binaries[@]}"; do install -m 0755 "$bin_dir/$b" "$work/$tar_name/bin/$b"; done
for s in "${services[@]}"; do
  unit "qm-$s.service" >"$work/$tar_name/systemd/qm-$s.service"
  install -m 0644 "$here/etc/$s.yaml" "$work/$tar_name/etc/$s.yaml"
done
install -m 0644 "$root/README.md" "$work/$tar_name/README.md"
tar -C "$work" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$tar_name" | gzip "-${gzip_level}n" >"$out/$tar_name.tar.gz"
say "built $tar_name.tar.gz"

# The Python client (clients/python) as a wheel, built with the pinned
# tools of its environment, outside the checkout.
venv=$("$root/clients/python/setup.sh")
wheel_src="$work/python-client"
cp -r "$root/clients/python" "$wheel_src"
rm -rf "$wheel_src/build" "$wheel_src"/src/*.egg-info
"$venv/bin/pip" wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --wheel-dir "$out" "$wheel_src" >&2
say "built $(cd "$out" && ls quartermaster-*.whl)"

(cd "$out" && sha256sum -- *.tar.gz *.deb *.whl >SHA256SUMS)
say "SHA256SUMS written; $(ls "$out" | wc -l) files in $out"
