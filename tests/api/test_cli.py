"""The flagstaff command line, run as a user would (a subprocess on a data dir)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {k: v for k, v in os.environ.items() if not k.startswith("FLAGSTAFF_")}


def cli(data: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flagstaff", *args, "--data-dir", str(data)],
        env=ENV,
        input=stdin.decode() if stdin else None,
        capture_output=True,
        text=True,
        timeout=60,
    )


POSTHOG_EXPORT = {
    "count": 4,
    "results": [
        {
            "id": 101,
            "team_id": 7,
            "name": "New checkout",
            "key": "new-checkout",
            "filters": {
                "groups": [
                    {
                        "properties": [
                            {
                                "key": "email",
                                "type": "person",
                                "value": "@acme.com",
                                "operator": "icontains",
                            }
                        ],
                        "rollout_percentage": 50,
                    }
                ],
                "payloads": {"true": '{"color": "blue"}'},
            },
            "deleted": False,
            "active": True,
            "created_by": {"id": 1, "email": "a@acme.com"},
            "created_at": "2025-01-01T00:00:00Z",
            "ensure_experience_continuity": False,
            "rollout_percentage": None,
        },
        {
            "id": 102,
            "key": "pricing-test",
            "name": "Pricing",
            "filters": {
                "groups": [{"properties": [], "rollout_percentage": 100}],
                "multivariate": {
                    "variants": [
                        {"key": "control", "rollout_percentage": 50},
                        {"key": "test", "rollout_percentage": 50},
                    ]
                },
            },
            "active": True,
        },
        {"id": 103, "key": "bad flag key", "filters": {}},
        {"id": 104, "key": "gone", "deleted": True, "filters": {}},
    ],
}


def test_project_and_key_commands(tmp_path: Path) -> None:
    data = tmp_path / "d"
    r = cli(data, "project", "create", "Shop")
    assert r.returncode == 0, r.stderr
    assert "phc_" in r.stdout
    r = cli(data, "project", "list")
    assert r.returncode == 0 and "Shop" in r.stdout
    r = cli(data, "key", "create")
    assert r.returncode == 0, r.stderr
    assert "phx_" in r.stdout
    cli(data, "project", "create", "Other")
    r = cli(data, "key", "create")
    assert r.returncode != 0 and "--project" in r.stderr
    assert cli(data, "key", "create", "--project", "2").returncode == 0


def test_flags_import_then_export_round_trip(tmp_path: Path) -> None:
    data = tmp_path / "d"
    cli(data, "project", "create", "Shop")
    export = tmp_path / "flags.json"
    export.write_text(json.dumps(POSTHOG_EXPORT))
    r = cli(data, "flags", "import", str(export))
    assert r.returncode == 0, r.stderr
    assert "2 created, 0 updated, 2 rejected" in r.stdout
    assert "bad flag key" in r.stdout and "gone" in r.stdout

    r = cli(data, "flags", "import", str(export))
    assert "0 created, 2 updated, 2 rejected" in r.stdout

    out = tmp_path / "out.json"
    r = cli(data, "flags", "export", "-o", str(out))
    assert r.returncode == 0, r.stderr
    flags = json.loads(out.read_text())["results"]
    by_key = {f["key"]: f for f in flags}
    assert set(by_key) == {"new-checkout", "pricing-test"}
    assert by_key["new-checkout"]["version"] == 2
    assert by_key["new-checkout"]["filters"]["payloads"] == {"true": '{"color": "blue"}'}
    assert by_key["pricing-test"]["filters"]["multivariate"]["variants"][1]["key"] == "test"

    # the export is itself importable into another install
    other = tmp_path / "other"
    cli(other, "project", "create", "Copy")
    r = cli(other, "flags", "import", str(out))
    assert "2 created, 0 updated, 0 rejected" in r.stdout


@pytest.mark.parametrize("content", [b"{nope", b'{"x": 1}'])
def test_flags_import_rejects_unreadable_files(tmp_path: Path, content: bytes) -> None:
    data = tmp_path / "d"
    cli(data, "project", "create", "Shop")
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    r = cli(data, "flags", "import", str(bad))
    assert r.returncode != 0 and "flagstaff:" in r.stderr


def test_events_export_requires_a_valid_since(tmp_path: Path) -> None:
    data = tmp_path / "d"
    cli(data, "project", "create", "Shop")
    r = cli(data, "events", "export", "--since", "last tuesday")
    assert r.returncode != 0 and "--since" in r.stderr
    r = cli(data, "events", "export", "--since", "2026-01-01")
    assert r.returncode == 0 and r.stdout == "" and "0 events exported" in r.stderr


def test_flags_explain_reads_what_flags_reads(tmp_path: Path) -> None:
    import httpx

    from tests.server import PROJECT_TOKEN, Api, Server

    data = tmp_path / "d"
    srv = Server(data_dir=data).start()
    try:
        http = httpx.Client(base_url=srv.url, timeout=30)
        batch = [
            {
                "event": "$identify",
                "distinct_id": "u1",
                "properties": {"$set": {"plan": "pro", "email": "ana@acme.com"}},
            },
            {
                "event": "$groupidentify",
                "distinct_id": "u1",
                "properties": {
                    "$group_type": "company",
                    "$group_key": "acme",
                    "$group_set": {"tier": "gold"},
                },
            },
        ]
        assert http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch}).is_success
        plan = {"key": "plan", "type": "person", "operator": "exact", "value": "pro"}
        tier = {"key": "tier", "type": "group", "group_type_index": 0, "value": "gold"}
        Api(srv.url).create_flag(
            key="checkout",
            filters={"groups": [{"properties": [plan, tier], "rollout_percentage": 40}]},
        )
        answer = http.post(
            "/flags?v=2",
            json={"api_key": PROJECT_TOKEN, "distinct_id": "u1", "groups": {"company": "acme"}},
        ).json()["flags"]["checkout"]
        http.close()
    finally:
        srv.stop()
    extra = ["--database-url", srv.database_url] if srv.database_url else []
    args = ["flags", "explain", "checkout", "--distinct-id", "u1", *extra]

    r = cli(data, *args, "--groups", '{"company": "acme"}', "--json")
    assert r.returncode == 0, r.stderr
    explained = json.loads(r.stdout)
    assert explained["enabled"] == answer["enabled"]
    assert explained["reason_code"] == answer["reason"]["code"]
    (condition,) = explained["conditions"]
    assert [(f["key"], f["compared"], f["matched"]) for f in condition["filters"]] == [
        ("plan", "pro", True),
        ("tier", "gold", True),
    ]
    assert condition["rollout"]["identifier"] == "u1"
    assert condition["rollout"]["threshold"] == 0.4
    assert condition["in_rollout"] == (condition["rollout"]["value"] <= 0.4)

    r = cli(data, *args, "--person-properties", '{"plan": "free"}')
    assert r.returncode == 0, r.stderr
    assert 'person \'plan\' exact "pro": compared "free" -> no match' in r.stdout
    assert "group 'tier'" in r.stdout and "not evaluated" in r.stdout
    assert "result: false, reason no_condition_match" in r.stdout

    r = cli(data, "flags", "explain", "nope", "--distinct-id", "u1", *extra)
    assert r.returncode == 1 and "no flag with key 'nope'" in r.stderr
    r = cli(data, *args, "--groups", "{nope")
    assert r.returncode == 1 and "--groups is not JSON" in r.stderr
