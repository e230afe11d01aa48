"""/api/schema/ describes real answers, and /api/docs renders it (or says how to install)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from starlette.requests import Request

from flagstaff.http import schemas
from flagstaff.http.docs import ASSETS, BUNDLE, docs_routes
from flagstaff.http.flags import FlagsRequest
from flagstaff.ingest.body import CaptureBatch
from flagstaff.store.records import Cohort
from tests.server import PROJECT_TOKEN, Api

P = "/api/projects/@current"


def _conforms(body: Any, shape: Any) -> None:
    """The body decodes strictly as the documented Struct (types and required fields)."""
    msgspec.convert(body, shape)


def test_answers_match_their_documented_schemas(api: Api, http: httpx.Client) -> None:
    key = f"doc-{uuid.uuid4().hex[:8]}"
    flag = api.create_flag(
        key=key,
        filters={"groups": [{"rollout_percentage": 100}], "payloads": {"true": '"x"'}},
    )
    _conforms(flag, schemas.FeatureFlag)
    _conforms(api.get(f"{P}/feature_flags/").json(), schemas.FeatureFlagPage)
    _conforms(api.get("/api/projects/").json(), schemas.ProjectPage)
    _conforms(api.get(f"{P}/").json(), schemas.Project)
    _conforms(api.get(f"{P}/groups_types/").json(), list[schemas.GroupType])
    _conforms(api.get(f"{P}/events/").json(), schemas.EventPage)
    _conforms(api.get(f"{P}/ingestion_warnings/").json(), schemas.WarningPage)
    cohort = api.post(f"{P}/cohorts/", json={"name": "doc", "is_static": True}).json()
    _conforms(cohort, Cohort)

    body = {"api_key": PROJECT_TOKEN, "distinct_id": "doc-user"}
    _conforms(body, FlagsRequest)
    v2 = http.post("/flags?v=2", json=body).json()
    _conforms(v2, schemas.FlagsResponse)
    _conforms(http.post("/flags", json=body).json(), schemas.LegacyFlagsResponse)
    _conforms(http.post("/decide?v=4", json=body).json(), schemas.FlagsResponse)
    _conforms(http.get(f"/array/{PROJECT_TOKEN}/config").json(), schemas.ClientConfig)
    _conforms(api.get("/flags/definitions").json(), schemas.LocalEvaluationResponse)
    event = {"api_key": PROJECT_TOKEN, "batch": [{"event": "e", "distinct_id": "doc-user"}]}
    _conforms(event, CaptureBatch)
    _conforms(http.post("/batch/", json=event).json(), schemas.CaptureResponse)
    _conforms(http.get("/_health").json(), schemas.Status)
    _conforms(http.get(f"{P}/feature_flags/0/").json(), schemas.Error)


def test_docs_page_serves_the_installed_renderer(http: httpx.Client) -> None:
    if not (ASSETS / BUNDLE).is_file():
        pytest.skip("run scripts/fetch-docs-assets.sh (make test does) to install the renderer")
    page = http.get("/api/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'spec-url="/api/schema/"' in page.text and f"/api/docs/{BUNDLE}" in page.text
    script = http.get(f"/api/docs/{BUNDLE}")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.content == (ASSETS / BUNDLE).read_bytes()


def test_docs_page_says_how_to_install_a_missing_renderer(tmp_path: Path) -> None:
    for route in docs_routes(tmp_path):  # an assets folder without the renderer
        scope = {"type": "http", "method": "GET", "path": route.path, "headers": []}
        r = asyncio.run(route.endpoint(Request(scope)))
        assert r.status_code == 503
        body = json.loads(r.body)
        assert body["code"] == "docs_not_installed"
        assert "scripts/fetch-docs-assets.sh" in body["detail"]
