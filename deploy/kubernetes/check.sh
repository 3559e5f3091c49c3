#!/usr/bin/env bash
# Validates the Kubernetes manifests offline (no cluster is needed or
# contacted) against the Kubernetes API schemas with kubernetes-validate
# (--strict: an unknown field is an error), for the oldest and newest
# Kubernetes versions supported, and checks that kustomization.yaml lists
# every manifest. kubernetes-validate is installed once into a virtual
# environment under $QM_CACHE (default ~/.cache/quartermaster).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${QM_CACHE:-$HOME/.cache/quartermaster}
venv="$cache/venv-kubernetes-validate"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  echo "deploy: installing kubernetes-validate into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet kubernetes-validate==1.37.0
fi
manifests=()
for f in "$here"/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] && continue
  manifests+=("$f")
  grep -q "^  - $(basename "$f")\$" "$here/kustomization.yaml" \
    || { echo "deploy: $(basename "$f") is not listed in kustomization.yaml" >&2; exit 1; }
done
for version in 1.29.0 1.37.0; do
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}"
done
echo "deploy: ${#manifests[@]} manifests valid for Kubernetes 1.29 and 1.37 (schemas only: no cluster was contacted)"
