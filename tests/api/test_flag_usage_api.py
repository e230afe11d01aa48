"""Flag usage and property value suggestions against the real server (SQLite with its ingest
writer, or PostgreSQL): exact checks per day and value after ingestion, the CLI backfill that
rebuilds them from stored events, and the suggestion routes' shapes, roles and bad input."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from flagstaff.common.units import DAY_MS
from flagstaff.http import usage_schemas
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server

ADMIN_EMAIL = "admin@example.com"
PASSWORD = "correct horse battery staple"
P = "/api/projects/@current"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("usage") / "data",
        env={"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD},
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {PERSONAL_KEY}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        yield client


def _cli(server: Server, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    if server.database_url:
        env["FLAGSTAFF_DATABASE_URL"] = server.database_url
    return subprocess.run(
        [sys.executable, "-m", "flagstaff", *args, "--data-dir", str(server.data_dir)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def _check(key: str, response: Any, ts: int, uid: str | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"$feature_flag": key}
    if response is not None:
        props["$feature_flag_response"] = response
    return {
        "event": "$feature_flag_called",
        "distinct_id": "usage-user",
        "properties": props,
        "timestamp": _iso(ts),
        "uuid": uid or str(uuid.uuid4()),
    }


def _send(server: Server, batch: list[dict[str, Any]]) -> None:
    r = httpx.post(server.url + "/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
    assert r.status_code == 200, r.text


def _usage(api: httpx.Client, flag_id: int, days: int = 30) -> dict[str, Any]:
    r = api.get(f"{P}/feature_flags/{flag_id}/usage/", params={"days": days})
    assert r.status_code == 200, r.text
    body = r.json()
    msgspec.convert(body, usage_schemas.FlagUsage)
    return dict(body)


def _made(api: httpx.Client, key: str, **filters: Any) -> int:
    body = {"key": key, "filters": {"groups": [{"rollout_percentage": 100}], **filters}}
    r = api.post(f"{P}/feature_flags/", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_checks_per_day_and_value_are_exact_then_backfilled(
    server: Server, api: httpx.Client
) -> None:
    boolean = _made(api, "usage-bool")
    variants = [
        {"key": "control", "rollout_percentage": 50},
        {"key": "test", "rollout_percentage": 50},
    ]
    multi = _made(api, "usage-mv", multivariate={"variants": variants})
    now = int(time.time() * 1000)
    today, yesterday, earlier = now - 60_000, now - DAY_MS, now - 3 * DAY_MS
    retried = [_check("usage-bool", True, today), _check("usage-mv", "control", today)]
    _send(server, retried)
    _send(
        server,
        [
            *retried,  # a retry: stored once, counted once
            _check("usage-bool", True, today),
            _check("usage-bool", True, today),
            _check("usage-bool", False, today),
            _check("usage-bool", True, earlier),
            _check("usage-bool", True, earlier),
            _check("usage-mv", "control", today),
            _check("usage-mv", "test", yesterday),
            _check("usage-mv", "test", yesterday),
            _check("usage-mv", "test", yesterday),
            _check("usage-mv", None, yesterday),
            {"event": "$pageview", "distinct_id": "usage-user", "properties": {}},
        ],
    )
    got = _usage(api, boolean)
    assert got["flag_key"] == "usage-bool" and got["total"] == 6
    assert got["values"] == {"true": 5, "false": 1}
    assert len(got["days"]) == 30 and got["days"][-1]["date"] == _day(now)
    by_day = {d["date"]: d for d in got["days"] if d["checks"]}
    assert by_day == {
        _day(today): {"date": _day(today), "checks": 4, "values": {"true": 3, "false": 1}},
        _day(earlier): {"date": _day(earlier), "checks": 2, "values": {"true": 2}},
    }
    assert got["checks_per_day"] == pytest.approx(6 / 30)
    assert got["last_seen"] == _iso(today).replace("+00:00", "Z")
    mv = _usage(api, multi)
    assert mv["values"] == {"control": 2, "test": 3, "": 1}
    assert [d["values"] for d in mv["days"] if d["checks"]] == [
        {"test": 3, "": 1},
        {"control": 2},
    ]
    assert _usage(api, multi, days=1)["values"] == {"control": 2}
    for bad in ("0", "366", "x"):
        r = api.get(f"{P}/feature_flags/{multi}/usage/", params={"days": bad})
        assert r.status_code == 400 and r.json()["attr"] == "days", r.text
    assert api.get(f"{P}/feature_flags/999999/usage/").status_code == 404

    # an upgraded install: the events were stored before the rollup existed
    server.stop()
    _forget_rollup(server)
    server.start()
    assert _usage(api, boolean)["total"] == 0
    done = _cli(server, "flags", "recompute-usage")
    assert done.returncode == 0, done.stderr
    assert re.search(r"project 1: 12 \$feature_flag_called events read", done.stdout)
    assert _usage(api, boolean) == got
    assert _usage(api, multi) == mv


def _forget_rollup(server: Server) -> None:
    if server.database_url:
        import asyncpg

        async def wipe() -> None:
            conn = await asyncpg.connect(server.database_url)
            try:
                await conn.execute("DELETE FROM flag_usage_daily")
            finally:
                await conn.close()

        asyncio.run(wipe())
    else:
        with sqlite3.connect(server.data_dir / "flagstaff.sqlite3") as conn:
            conn.execute("DELETE FROM flag_usage_daily")


def test_person_and_group_values_most_frequent_first(server: Server, api: httpx.Client) -> None:
    plans = ["pro"] * 4 + ["free"] * 2 + ["Team <b>"]
    batch = [
        {"event": "$set", "distinct_id": f"values-{i}", "$set": {"sugg_plan": p, "sugg_n": i % 2}}
        for i, p in enumerate(plans)
    ]
    batch.append(
        {
            "event": "$groupidentify",
            "distinct_id": "values-0",
            "properties": {
                "$group_type": "company",
                "$group_key": "acme",
                "$group_set": {"sugg_tier": "gold"},
            },
        }
    )
    _send(server, batch)
    r = api.get(f"{P}/persons/values/", params={"key": "sugg_plan"})
    assert r.status_code == 200, r.text
    assert r.json() == [
        {"name": "pro", "count": 4},
        {"name": "free", "count": 2},
        {"name": "Team <b>", "count": 1},
    ]
    msgspec.convert(r.json(), list[usage_schemas.PropertyValue])
    got = api.get(f"{P}/persons/values/", params={"key": "sugg_plan", "value": "TEAM"}).json()
    assert got == [{"name": "Team <b>", "count": 1}]
    got = api.get(f"{P}/persons/values/", params={"key": "sugg_plan", "limit": "1"}).json()
    assert got == [{"name": "pro", "count": 4}]
    assert api.get(f"{P}/persons/values/", params={"key": "sugg_n"}).json() == [
        {"name": "0", "count": 4},
        {"name": "1", "count": 3},
    ]
    index = next(
        t["group_type_index"]
        for t in api.get(f"{P}/groups_types/").json()
        if t["group_type"] == "company"
    )
    r = api.get(
        f"{P}/groups/property_values/", params={"group_type_index": index, "key": "sugg_tier"}
    )
    assert r.status_code == 200 and r.json() == [{"name": "gold", "count": 1}]


@pytest.mark.parametrize(
    ("path", "params", "attr"),
    [
        ("/persons/values/", {}, "key"),
        ("/persons/values/", {"key": ""}, "key"),
        ("/persons/values/", {"key": "k" * 401}, "key"),
        ("/persons/values/", {"key": "plan", "value": "v" * 201}, "value"),
        ("/persons/values/", {"key": "plan", "limit": "lots"}, "limit"),
        ("/groups/property_values/", {"key": "tier"}, "group_type_index"),
        ("/groups/property_values/", {"key": "tier", "group_type_index": "5"}, "group_type_index"),
        ("/groups/property_values/", {"key": "tier", "group_type_index": "-1"}, "group_type_index"),
        ("/groups/property_values/", {"group_type_index": "0"}, "key"),
    ],
)
def test_suggestions_refuse_bad_input(
    api: httpx.Client, path: str, params: dict[str, str], attr: str
) -> None:
    r = api.get(P + path, params=params)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "validation_error" and body["attr"] == attr and body["detail"]


def test_suggestions_need_access_to_the_project(server: Server) -> None:
    path = f"{P}/persons/values/?key=sugg_plan"
    anonymous = httpx.get(server.url + path)
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "not_authenticated"
    made = _cli(
        server, "user", "create", "--email", "usage-viewer@example.com", "--password", "-",
        "--role", "viewer", stdin="viewer password 123\n",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    viewer = _log_in(server, "usage-viewer@example.com", "viewer password 123")
    assert viewer.get(path).status_code == 200  # a read: viewers may
    assert viewer.get("/api/projects/999/persons/values/?key=x").status_code == 404
    assert viewer.get(f"{P}/feature_flags/1/usage/").status_code in (200, 404)
    with httpx.Client(
        base_url=server.url, headers={"Authorization": "Bearer phx_not_a_key"}, timeout=30
    ) as stranger:
        assert stranger.get(path).status_code == 401


def _log_in(server: Server, email: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=30.0)
    form = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token is not None
    done = client.post(
        "/login",
        data={"email": email, "password": password, "csrf_token": token.group(1)},
        headers={"Origin": server.url},
    )
    assert done.status_code == 303, done.text
    return client
