#!/usr/bin/env bash
# Installs the Debian packages the Python tests need beyond the venv: PostgreSQL's server
# binaries (the tests start a PostgreSQL of their own with initdb/pg_ctl). Safe to rerun.
set -euo pipefail

if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; then
    exit 0
fi
command -v apt-get >/dev/null || { echo "install-test-deps: initdb is missing and apt-get is not available" >&2; exit 1; }
sudo=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || { echo "install-test-deps: installing postgresql needs root or sudo" >&2; exit 1; }
    sudo=(sudo)
fi
echo "install-test-deps: installing Debian postgresql"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends postgresql >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || { echo "install-test-deps: postgresql installed but initdb not found" >&2; exit 1; }
