"""posthog-js's lazy bundles at /static/, and the empty product lists posthog-js reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "src/flagstaff/data/posthog-js/node_modules/posthog-js/dist"


@pytest.fixture(scope="module", autouse=True)
def installed_bundles() -> None:
    """The setup script `make run` calls; a no-op once the pinned release is installed."""
    subprocess.run(["bash", str(ROOT / "scripts/install-posthog-js.sh")], check=True)


def _version() -> str:
    return json.loads((DIST.parent / "package.json").read_text())["version"]


def test_the_pinned_release_is_the_one_the_e2e_tooling_uses() -> None:
    ours = json.loads((ROOT / "src/flagstaff/data/posthog-js/package.json").read_text())
    e2e = json.loads((ROOT / "tests/e2e/tooling/package.json").read_text())
    assert ours["dependencies"]["posthog-js"] == e2e["dependencies"]["posthog-js"]
    assert _version() == ours["dependencies"]["posthog-js"]


@pytest.mark.parametrize("name", ["surveys.js", "recorder.js", "array.js", "web-vitals.js"])
def test_legacy_path_serves_the_installed_bundle(http: httpx.Client, name: str) -> None:
    r = http.get(f"/static/{name}", params={"v": _version()}, headers={"Origin": "https://a.test"})
    assert r.status_code == 200
    assert r.content == (DIST / name).read_bytes()
    assert r.headers["content-type"] == "application/javascript; charset=utf-8"
    assert "max-age=31536000" in r.headers["cache-control"]
    assert r.headers["access-control-allow-origin"] == "https://a.test"
    assert r.headers["cross-origin-resource-policy"] == "cross-origin"


def test_every_dist_script_is_served(http: httpx.Client) -> None:
    names = sorted(p.name for p in DIST.glob("*.js"))
    assert len(names) > 20
    for name in names:
        r = http.head(f"/static/{name}")
        assert r.status_code == 200, name


def test_versioned_path_and_revalidation(http: httpx.Client) -> None:
    version = _version()
    r = http.get(f"/static/{version}/surveys.js")
    assert r.status_code == 200 and r.content == (DIST / "surveys.js").read_bytes()
    assert "immutable" in r.headers["cache-control"]
    again = http.get(f"/static/{version}/surveys.js", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    # Without ?v= the browser may cache it, but not for a year.
    assert "max-age=3600" in http.get("/static/array.js").headers["cache-control"]


def test_another_version_is_a_clear_404(http: httpx.Client) -> None:
    r = http.get("/static/1.0.0/surveys.js")
    assert r.status_code == 404
    body = r.json()
    assert body["code"] == "unknown_version" and _version() in body["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/static/nope.js",
        "/static/toolbar.js",  # PostHog builds it from its app, posthog-js does not ship it
        "/static/module.d.ts",
        "/static/array.js.map",
        "/static/..%2f..%2fpyproject.toml",
        "/static/%2e%2e/package.json",
        "/static/../../../etc/passwd",
        "/static/.hidden.js",
        "/static/a/b/c.js",
    ],
)
def test_unknown_names_and_traversal_are_json_404(http: httpx.Client, path: str) -> None:
    r = http.get(path)
    assert r.status_code == 404, path
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["type"] == "invalid_request"


def test_preflight_and_methods(http: httpx.Client) -> None:
    r = http.options("/static/surveys.js", headers={"Origin": "https://a.test"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://a.test"
    assert http.post("/static/surveys.js").status_code == 405


def test_web_experiments_and_product_tours_answer_empty_shapes(
    http: httpx.Client, token: str
) -> None:
    origin = {"Origin": "https://a.test"}
    r = http.get("/api/web_experiments/", params={"token": token}, headers=origin)
    assert r.status_code == 200 and r.json() == {"experiments": []}
    assert r.headers["access-control-allow-origin"] == "https://a.test"
    r = http.get("/api/product_tours/", params={"token": token}, headers=origin)
    assert r.status_code == 200 and r.json() == {"product_tours": []}


@pytest.mark.parametrize("path", ["/api/web_experiments/", "/api/product_tours/"])
def test_product_lists_need_a_known_token(http: httpx.Client, path: str) -> None:
    missing = http.get(path)
    assert missing.status_code == 401 and missing.json()["code"] == "missing_api_key"
    unknown = http.get(path, params={"token": "phc_nobodyhasthis"})
    assert unknown.status_code == 401 and unknown.json()["code"] == "invalid_api_key"
