#!/usr/bin/env bash
# Builds the Quartermaster book (docs/, mdBook) into target/book and checks
# every link: the checker's self-test, the Markdown sources (README.md and
# docs/**/*.md), then the rendered HTML. Exits non-zero on any broken link.
#
# mdBook 0.5.4 is used from ~/.cache/quartermaster/mdbook-0.5.4 and installed
# there with `cargo install` the first time.
set -euo pipefail

docs="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$docs/.." && pwd)"
version=0.5.4
prefix="$HOME/.cache/quartermaster/mdbook-$version"
mdbook="$prefix/bin/mdbook"
book="$root/target/book"

if [ ! -x "$mdbook" ]; then
    echo "docs: installing mdbook $version into $prefix (once)" >&2
    cargo install mdbook --locked --version "$version" --root "$prefix"
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

python3 "$docs/check-links.py" --self-test >/dev/null

if ! sources="$(python3 "$docs/check-links.py" --root "$root")"; then
    echo "$sources"
    echo "docs: broken links in the sources (above)" >&2
    exit 1
fi

if ! (cd "$root" && "$mdbook" build docs) >"$log" 2>&1; then
    cat "$log" >&2
    echo "docs: mdbook build failed (above)" >&2
    exit 1
fi
if grep -E "\b(WARN|ERROR)\b" "$log" >&2; then
    echo "docs: mdbook warned (above)" >&2
    exit 1
fi

if ! html="$(python3 "$docs/check-links.py" --root "$root" --html "$book")"; then
    echo "$html"
    echo "docs: broken links in the built book (above)" >&2
    exit 1
fi

summary() { sed -e 's/^check-links: //' -e 's/, none broken$//' <<<"$1"; }
echo "docs: book built in ${book#"$root"/}; links checked, none broken: $(summary "$sources"); $(summary "$html")"
