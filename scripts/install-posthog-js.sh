#!/usr/bin/env bash
# Installs the posthog-js npm package pinned in src/flagstaff/data/posthog-js/package-lock.json
# (the release the e2e tooling uses) into that folder's node_modules/, which is git-ignored.
# Flagstaff serves its dist/ bundles at /static/<name>.js and /static/<version>/<name>.js, so
# a page using Flagstaff as api_host loads surveys.js, recorder.js... from it.
# Safe to run repeatedly: nothing is done while the installed tree matches the lock file.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/src/flagstaff/data/posthog-js"
stamp="$dest/node_modules/.flagstaff-lock.sha256"

fail() {
    echo "install-posthog-js: $*" >&2
    exit 1
}

command -v npm >/dev/null || fail "npm is not installed (Node.js 20 or newer is needed)"
lock_sum="$(sha256sum "$dest/package-lock.json" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$lock_sum" ]] &&
    [[ -f "$dest/node_modules/posthog-js/dist/array.js" ]]; then
    exit 0
fi
echo "install-posthog-js: npm ci in $dest"
(cd "$dest" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error) ||
    fail "npm ci failed"
[[ -f "$dest/node_modules/posthog-js/dist/array.js" ]] || fail "posthog-js has no dist/array.js"
echo "$lock_sum" >"$stamp"
echo "install-posthog-js: posthog-js $(node -p "require('$dest/node_modules/posthog-js/package.json').version") installed"
