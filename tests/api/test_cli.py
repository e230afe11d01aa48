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


def test_project_update_sets_the_event_retention(tmp_path: Path) -> None:
    data = tmp_path / "d"
    assert cli(data, "project", "create", "Shop").returncode == 0
    r = cli(data, "project", "update", "--event-retention-days", "90")
    assert r.returncode == 0 and "events kept 90 days" in r.stdout, r.stderr
    r = cli(data, "project", "update", "--name", "Store", "--event-retention-days", "forever")
    assert r.returncode == 0 and "'Store': events kept forever" in r.stdout, r.stderr
    for bad in ("0", "36501", "soon"):
        r = cli(data, "project", "update", "--event-retention-days", bad)
        assert r.returncode == 2 and "--event-retention-days" in r.stderr, r.stderr
    r = cli(data, "project", "update")
    assert r.returncode != 0 and "nothing to change" in r.stderr


def _write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _export(data: Path) -> dict:
    r = cli(data, "flags", "export")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_flags_import_then_export_round_trip(tmp_path: Path) -> None:
    data = tmp_path / "d"
    cli(data, "project", "create", "Shop")
    export = _write(tmp_path, "flags.json", POSTHOG_EXPORT)
    r = cli(data, "flags", "import", str(export))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 created, 0 updated, 0 unchanged, 1 skipped, 1 rejected" in r.stdout
    assert "rejected bad flag key: key:" in r.stdout
    assert "skipped gone: deleted in the export" in r.stdout

    # rerunning the same file changes nothing: no version bump, created_at as exported
    before = _export(data)
    r = cli(data, "flags", "import", str(export))
    assert "0 created, 0 updated, 2 unchanged, 1 skipped, 1 rejected" in r.stdout
    after = _export(data)
    assert after == before
    by_key = {f["key"]: f for f in after["results"]}
    assert set(by_key) == {"new-checkout", "pricing-test"}
    assert by_key["new-checkout"]["version"] == 1
    assert by_key["new-checkout"]["created_at"] == "2025-01-01T00:00:00Z"
    assert by_key["new-checkout"]["filters"]["payloads"] == {"true": '{"color": "blue"}'}
    assert by_key["pricing-test"]["filters"]["multivariate"]["variants"][1]["key"] == "test"

    # a changed flag is updated, once
    changed = json.loads(json.dumps(POSTHOG_EXPORT))
    changed["results"][1]["active"] = False
    changed_file = _write(tmp_path, "changed.json", changed)
    r = cli(data, "flags", "import", str(changed_file))
    assert "0 created, 1 updated, 1 unchanged" in r.stdout
    assert {f["key"]: f["version"] for f in _export(data)["results"]}["pricing-test"] == 2

    # the export is itself importable into another install, without rejections
    out = tmp_path / "out.json"
    assert cli(data, "flags", "export", "-o", str(out)).returncode == 0
    other = tmp_path / "other"
    cli(other, "project", "create", "Copy")
    r = cli(other, "flags", "import", str(out))
    assert r.returncode == 0, r.stdout
    assert "2 created, 0 updated, 0 unchanged, 0 skipped, 0 rejected" in r.stdout


def test_flags_import_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    cli(data, "project", "create", "Shop")
    export = _write(tmp_path, "flags.json", POSTHOG_EXPORT)
    r = cli(data, "flags", "import", "--dry-run", str(export))
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert "create new-checkout" in lines and "create pricing-test" in lines
    assert any(line.startswith("rejected bad flag key:") for line in lines)
    assert "dry run, nothing written: 2 to create, 0 to update" in r.stdout
    assert _export(data)["results"] == []

    good = _write(tmp_path, "good.json", POSTHOG_EXPORT["results"][:2])
    assert cli(data, "flags", "import", str(good)).returncode == 0
    r = cli(data, "flags", "import", "--dry-run", str(good))
    assert r.returncode == 0
    assert "unchanged new-checkout" in r.stdout.splitlines()


GROUP_FLAG = {
    "key": "big-companies",
    "filters": {
        "aggregation_group_type_index": 1,
        "groups": [{"properties": [], "rollout_percentage": 100}],
    },
}


def test_flags_import_creates_group_types(tmp_path: Path) -> None:
    data = tmp_path / "d"
    cli(data, "project", "create", "Shop")
    bare = _write(tmp_path, "bare.json", [GROUP_FLAG])
    r = cli(data, "flags", "import", str(bare))
    assert r.returncode == 1
    assert "group type index 1 is unknown" in r.stdout and "--group-type 1=NAME" in r.stdout

    r = cli(data, "flags", "import", str(bare), "--group-type", "1=company")
    assert r.returncode == 0, r.stdout
    assert "group type 1=company: created" in r.stdout and "1 created" in r.stdout
    exported = _export(data)
    assert exported["group_type_mapping"] == {"1": "company"}

    # a PostHog-style mapping in the file; an existing, equal type is left as it is
    mapped = {"results": [GROUP_FLAG], "group_type_mapping": {"1": "company", "2": "team"}}
    r = cli(data, "flags", "import", str(_write(tmp_path, "mapped.json", mapped)))
    assert r.returncode == 0, r.stdout
    assert "group type 1=company: unchanged" in r.stdout
    assert "group type 2=team: created" in r.stdout and "1 unchanged" in r.stdout

    # a mapping that contradicts the store is rejected, and so is a bad option
    clash = {"results": [], "group_type_mapping": [{"group_type_index": 1, "group_type": "org"}]}
    r = cli(data, "flags", "import", str(_write(tmp_path, "clash.json", clash)))
    assert r.returncode == 1 and "group type 1=org: rejected" in r.stdout
    r = cli(data, "flags", "import", str(bare), "--group-type", "7=x")
    assert r.returncode != 0 and "--group-type" in r.stderr


def test_flags_import_and_export_progress_bar(tmp_path: Path) -> None:
    data = tmp_path / "d"
    cli(data, "project", "create", "Shop")
    many = [{"key": f"flag-{i}", "filters": {"groups": []}} for i in range(120)]
    path = _write(tmp_path, "many.json", many)
    r = cli(data, "flags", "import", str(path))
    assert r.returncode == 0 and "[" not in r.stderr  # not a TTY: no bar unless asked
    r = cli(data, "flags", "import", "--progress", str(path))
    assert "importing [" in r.stderr and "120/120" in r.stderr
    assert "120 unchanged" in r.stdout
    r = cli(data, "flags", "export", "--progress", "-o", str(tmp_path / "out.json"))
    assert "exporting [" in r.stderr and "120/120" in r.stderr
    assert len(json.loads((tmp_path / "out.json").read_text())["results"]) == 120


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


def test_serve_refuses_a_url_for_its_listen_address_before_creating_anything(
    tmp_path: Path,
) -> None:
    """``FLAGSTAFF_HOST`` exported for the examples (a URL) must not make ``serve`` create a
    project and then fail: the address is checked first, and the message names it."""
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "flagstaff", "serve", "--data-dir", str(data), "--port", "8123"],
        env={**ENV, "FLAGSTAFF_HOST": "http://127.0.0.1:8000"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "not a URL" in done.stderr and "FLAGSTAFF_HOST" in done.stderr
    assert not (data / "flagstaff.sqlite3").exists()
