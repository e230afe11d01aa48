"""posthog-js's lazily loaded bundles, served from the npm package installed at setup.

posthog-js loads its extensions from the API host: ``/static/<name>.js?v=<version>`` (the
default) or ``/static/<version>/<name>.js`` (``strict_script_versioning``), and the snippet
loads ``/static/array.js``. ``scripts/install-posthog-js.sh`` (run by ``make run``) installs the
pinned release into ``data/posthog-js/node_modules/posthog-js``; every ``.js`` file of its
``dist/`` is served from memory, read once per worker.

Only names listed in ``dist/`` are served, so no path can leave that folder. The versioned
path answers only for the installed version (so ``strict_script_versioning: "fallback"``
falls back to the unversioned path instead of running a mismatched bundle); the unversioned
path serves the installed release whatever ``v`` says, as PostHog's CDN serves its latest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from flagstaff.application.errors import ApiError
from flagstaff.http.asgi import Request, Response
from flagstaff.server.services import Services

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "data" / "posthog-js"
INSTALL_HINT = "run scripts/install-posthog-js.sh (make run does)"
CONTENT_TYPE = b"application/javascript; charset=utf-8"
LONG_CACHE = b"public, max-age=31536000, immutable"
SHORT_CACHE = b"public, max-age=3600"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.js")
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?")


class Bundles:
    """The ``dist/*.js`` files of one installed posthog-js package, loaded on first use."""

    def __init__(self, package_dir: Path) -> None:
        self.dist = package_dir / "node_modules" / "posthog-js" / "dist"
        self.version: str | None = None
        self.names: frozenset[str] = frozenset()
        self._files: dict[str, tuple[bytes, bytes]] = {}
        self._loaded = False

    def load(self) -> bool:
        """Read the package version and the list of bundles; False when not installed."""
        if self._loaded:
            return self.version is not None
        try:
            manifest = json.loads((self.dist.parent / "package.json").read_text("utf-8"))
            names = {p.name for p in self.dist.iterdir() if p.is_file()}
        except (OSError, ValueError):
            return False
        version = manifest.get("version") if isinstance(manifest, dict) else None
        if not isinstance(version, str):
            return False
        self.version = version
        self.names = frozenset(n for n in names if _NAME.fullmatch(n))
        self._loaded = True
        return True

    def get(self, name: str) -> tuple[bytes, bytes] | None:
        """(body, etag) of a listed bundle, None for any other name."""
        if name not in self.names:
            return None
        cached = self._files.get(name)
        if cached is None:
            body = (self.dist / name).read_bytes()
            etag = f'"{self.version}-{name}-{len(body)}"'.encode()
            cached = self._files[name] = (body, etag)
        return cached


_bundles = Bundles(PACKAGE_DIR)


def _parse(path: str) -> tuple[str | None, str]:
    """(version or None, file name) of ``/static/<name>`` or ``/static/<version>/<name>``."""
    parts = path.strip("/").split("/")
    if len(parts) == 2:
        return None, parts[1]
    if len(parts) == 3:
        return parts[1], parts[2]
    raise ApiError(404, "not_found", "use /static/<name>.js or /static/<version>/<name>.js")


async def static_endpoint(svc: Services, request: Request) -> Response:
    return serve(_bundles, request)


def serve(store: Bundles, request: Request) -> Response:
    version, name = _parse(request.path)
    if not store.load():
        detail = f"the posthog-js bundles are not installed: {INSTALL_HINT}"
        raise ApiError(503, "bundles_not_installed", detail)
    if version is not None and version != store.version:
        detail = (
            f"posthog-js {version} is not served here; this server has {store.version}"
            if _VERSION.fullmatch(version)
            else f"{version!r} is not a posthog-js version"
        )
        raise ApiError(404, "unknown_version", detail)
    found = store.get(name) if _NAME.fullmatch(name) else None
    if found is None:
        raise ApiError(
            404,
            "unknown_bundle",
            f"posthog-js {store.version} has no bundle named {name!r}",
            "name",
        )
    body, etag = found
    long_lived = version is not None or "v" in request.query
    headers = [
        (b"cache-control", LONG_CACHE if long_lived else SHORT_CACHE),
        (b"etag", etag),
        (b"cross-origin-resource-policy", b"cross-origin"),
        (b"x-content-type-options", b"nosniff"),
    ]
    if request.headers.get("if-none-match") == etag.decode():
        return Response(b"", 304, CONTENT_TYPE, headers)
    return Response(b"" if request.method == "HEAD" else body, 200, CONTENT_TYPE, headers)
