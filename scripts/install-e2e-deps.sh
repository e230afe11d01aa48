#!/usr/bin/env bash
# Installs what the end-to-end tests need: Debian's Chromium and the npm tooling
# (posthog-node, posthog-js, playwright-core, the OpenFeature SDKs and OFREP providers, and
# oidc-provider, the OpenID Provider of the single sign-on tests) in
# tests/e2e/tooling. Safe to run repeatedly.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tooling="$repo_root/tests/e2e/tooling"
chromium_bin="/usr/bin/chromium"
stamp="$tooling/node_modules/.flagstaff-lock.sha256"

fail() {
    echo "install-e2e-deps: $*" >&2
    exit 1
}

install_chromium() {
    if [[ -x "$chromium_bin" ]]; then
        return
    fi
    command -v apt-get >/dev/null || fail "$chromium_bin is missing and apt-get is not available"
    local sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || fail "$chromium_bin is missing; installing it needs root or sudo"
        sudo=(sudo)
    fi
    echo "install-e2e-deps: installing Debian chromium"
    "${sudo[@]}" apt-get update -qq || fail "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
        chromium fonts-liberation >/dev/null || fail "apt-get install chromium failed"
    [[ -x "$chromium_bin" ]] || fail "chromium was installed but $chromium_bin does not exist"
}

install_node_tooling() {
    command -v node >/dev/null || fail "node is not installed (Node.js 20 or newer is needed)"
    command -v npm >/dev/null || fail "npm is not installed"
    local node_major
    node_major="$(node -p 'process.versions.node.split(".")[0]')"
    ((node_major >= 20)) || fail "Node.js 20 or newer is needed, found $(node --version)"

    local lock_sum
    lock_sum="$(sha256sum "$tooling/package-lock.json" | cut -d' ' -f1)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$lock_sum" ]]; then
        return
    fi
    echo "install-e2e-deps: npm ci in $tooling"
    (cd "$tooling" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci failed"
    echo "$lock_sum" >"$stamp"
}

install_chromium
install_node_tooling
"$chromium_bin" --version >/dev/null 2>&1 || fail "$chromium_bin does not run"
echo "install-e2e-deps: ready ($("$chromium_bin" --version 2>/dev/null), node $(node --version))"
