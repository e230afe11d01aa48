"""/api/docs: the OpenAPI document of /api/schema/ rendered in a browser.

The renderer (redoc's standalone bundle) is third-party code, so it is not in the repository:
``scripts/fetch-docs-assets.sh`` (run by ``make run`` and ``make test``) installs it from npm
into ``data/docs/``, and this module serves it from there.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from flagstaff.application.errors import ApiError

ASSETS = Path(__file__).resolve().parents[1] / "data" / "docs"
BUNDLE = "redoc.standalone.js"

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Flagstaff API</title>
</head>
<body>
  <redoc spec-url="/api/schema/"></redoc>
  <script type="module" src="/api/docs/{bundle}"></script>
</body>
</html>
"""

MISSING = (
    "the API docs renderer is not installed: run `make docs-assets` (or "
    "`bash scripts/fetch-docs-assets.sh`) in the source checkout, then reload; "
    "the OpenAPI document itself is at /api/schema/"
)


def docs_routes(assets: Path = ASSETS) -> list[Route]:
    bundle = assets / BUNDLE

    def missing() -> Response:
        error = ApiError(503, "docs_not_installed", MISSING)
        return Response(error.body(), 503, media_type="application/json")

    async def page(request: Request) -> Response:
        if not bundle.is_file():
            return missing()
        return HTMLResponse(_PAGE.format(bundle=BUNDLE))

    async def script(request: Request) -> Response:
        if not bundle.is_file():
            return missing()
        return FileResponse(
            bundle,
            media_type="text/javascript; charset=utf-8",
            headers={"cache-control": "public, max-age=3600"},
        )

    return [
        Route("/api/docs", page),
        Route("/api/docs/", page),
        Route(f"/api/docs/{BUNDLE}", script),
    ]
