#!/usr/bin/env bash
# Installs the Debian packages the Python tests need beyond the venv: PostgreSQL's server
# binaries (the tests start a PostgreSQL of their own with initdb/pg_ctl) and nats-server
# (tests/api/test_stream.py starts a 3-server JetStream cluster of its own). Safe to rerun.
set -euo pipefail

packages=()
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && ! command -v initdb >/dev/null; then
    packages+=(postgresql)
fi
if ! command -v nats-server >/dev/null && [[ ! -x /usr/sbin/nats-server ]]; then
    packages+=(nats-server)
fi
if [[ ${#packages[@]} -eq 0 ]]; then
    exit 0
fi
command -v apt-get >/dev/null || { echo "install-test-deps: ${packages[*]} missing and apt-get is not available" >&2; exit 1; }
sudo=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || { echo "install-test-deps: installing ${packages[*]} needs root or sudo" >&2; exit 1; }
    sudo=(sudo)
fi
echo "install-test-deps: installing Debian ${packages[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null || { echo "install-test-deps: postgresql installed but initdb not found" >&2; exit 1; }
command -v nats-server >/dev/null || [[ -x /usr/sbin/nats-server ]] || { echo "install-test-deps: nats-server installed but not found" >&2; exit 1; }
