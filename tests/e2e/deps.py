"""What the end-to-end tests need outside the venv, checked loudly: node, the npm SDKs, Chromium.

Nothing is installed here. A missing piece fails the test with the command that installs it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

TOOLING = Path(__file__).resolve().parent / "tooling"
NODE_MODULES = TOOLING / "node_modules"
ARRAY_JS = NODE_MODULES / "posthog-js" / "dist" / "array.full.js"
CHROMIUM = Path(os.environ.get("FLAGSTAFF_CHROMIUM", "/usr/bin/chromium"))
INSTALL = "bash scripts/install-e2e-deps.sh"
NPM_PACKAGES = (
    "posthog-node",
    "posthog-js",
    "playwright-core",
    "@openfeature/core",
    "@openfeature/server-sdk",
    "@openfeature/ofrep-provider",
    "@openfeature/web-sdk",
    "@openfeature/ofrep-web-provider",
    "oidc-provider",  # the OpenID Provider of the single sign-on tests
    "jose",
)


def _pinned_versions() -> dict[str, str]:
    manifest = json.loads((TOOLING / "package.json").read_text())
    return {name: manifest["dependencies"][name] for name in NPM_PACKAGES}


def node_tooling_problems() -> list[str]:
    """Why the node SDK tooling cannot run, or an empty list."""
    problems = []
    if shutil.which("node") is None:
        problems.append("`node` is not on PATH (Node.js 20 or newer is needed)")
    for name, pinned in _pinned_versions().items():
        manifest = NODE_MODULES / name / "package.json"
        if not manifest.exists():
            problems.append(f"{manifest} is missing")
            continue
        installed = json.loads(manifest.read_text())["version"]
        if installed != pinned:
            problems.append(f"{name} {installed} is installed, package.json pins {pinned}")
    if not ARRAY_JS.exists():
        problems.append(f"{ARRAY_JS.name} of posthog-js is missing")
    return problems


def chromium_problems() -> list[str]:
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return [f"{CHROMIUM} does not exist or is not executable"]
    return []


def require(problems: list[str]) -> None:
    if problems:
        pytest.fail(
            "end-to-end tooling is missing: "
            + "; ".join(problems)
            + f". Install it with `{INSTALL}` (`make test` runs it before pytest).",
            pytrace=False,
        )
