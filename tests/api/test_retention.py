"""Event retention against the real server (SQLite or PostgreSQL by FLAGSTAFF_TEST_BACKEND),
while ingestion goes on: events older than the window are deleted, nothing newer is lost, and
the space comes back (the SQLite file shrinks; PostgreSQL drops the expired months'
partitions). ``FLAGSTAFF_RETENTION_CHECK_SECONDS`` makes the server look every 0.3 s instead
of every 15."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.api.retention_load import DAY_MS, Sender, events_at, exported, send, wait_for
from tests.server import Api, Server, storage_backend

P = "/api/projects/@current"
OLD_EVENTS = 6_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", env={"FLAGSTAFF_RETENTION_CHECK_SECONDS": "0.3"}).start()
    try:
        yield srv
    finally:
        srv.stop()


def _partitions(url: str) -> set[str]:
    async def read() -> set[str]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'events'::regclass"
            )
            return {r[0] for r in rows}
        finally:
            await conn.close()

    return asyncio.run(read())


def _month(ms: int) -> str:
    moment = time.gmtime(ms / 1000)
    return f"events_p{moment.tm_year:04d}{moment.tm_mon:02d}"


def _sqlite_file_size(path: Path) -> int:
    """The main file's size once the WAL is copied back (what ``du`` shows after a checkpoint)."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    finally:
        conn.close()
    return path.stat().st_size


def test_retention_deletes_expired_events_while_ingesting(server: Server) -> None:
    api = Api(server.url)
    now = int(time.time() * 1000)
    # Expired at 30 days: 70 to 100 days old (whole months before the window).
    old = [now - 70 * DAY_MS - (i * 30 * DAY_MS) // OLD_EVENTS for i in range(OLD_EVENTS)]
    kept_old = [now - 29 * DAY_MS + i * 1000 for i in range(200)]
    expired = events_at(old, "old")
    inside = events_at(kept_old, "inside")
    for start in range(0, len(expired), 1000):
        assert send(server, expired[start : start + 1000]) == 200
    assert send(server, inside) == 200
    db = server.data_dir / "flagstaff.sqlite3"
    postgres = storage_backend() == "postgres"
    if postgres:
        assert server.database_url is not None
        url = server.database_url
        # The pass gives the past months found in the default partition partitions of their own.
        old_months = {_month(ts) for ts in old}
        wait_for(lambda: old_months <= _partitions(url), 30, f"partitions {old_months}")
    else:
        size_before = _sqlite_file_size(db)
    assert len(exported(server)) == OLD_EVENTS + len(inside)

    # About 200 events a second: the file's growth meanwhile stays small beside what is freed.
    sender = Sender(server, batch=10, pause=0.05)
    sender.start()
    try:
        wait_for(lambda: len(sender.acknowledged) >= 100, 30, "events to be ingested")
        answer = api.patch(f"{P}/", json={"event_retention_days": 30})
        assert answer.status_code == 200, answer.text

        def expired_gone() -> bool:
            stored = exported(server)
            return not any(e["properties"]["tag"] == "old" for e in stored.values())

        wait_for(expired_gone, 60, "the expired events to be deleted")
        if postgres:
            wait_for(lambda: not (old_months & _partitions(url)), 30, "the old partitions dropped")
        else:
            # Incremental vacuum hands the pages back: the file loses most of the old events.
            wait_for(lambda: _sqlite_file_size(db) < size_before * 0.6, 30, "the file to shrink")
        time.sleep(0.5)  # ingestion goes on after the deletion too
    finally:
        sender.finish()
    assert sender.statuses.get(200, 0) > 0 and set(sender.statuses) == {200}, sender.statuses
    stored = exported(server)
    assert not {e["uuid"] for e in expired} & stored.keys()
    assert {e["uuid"] for e in inside} <= stored.keys()  # 29 days old: inside the window
    assert sender.acknowledged <= stored.keys()
    # Persons are kept: the distinct ids of the deleted events still resolve.
    persons = api.get(f"{P}/persons/", params={"distinct_id": "old-7"}).json()
    assert persons["results"], persons
