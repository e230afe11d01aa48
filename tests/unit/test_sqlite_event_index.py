"""Events by distinct id: indexed entries, in buckets of the sequence, plus the events past the
watermark read as one."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from flagstaff.ingest.model import Event
from flagstaff.store import schema_files
from flagstaff.store.records import EventQuery
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.ingest import apply_ingest
from flagstaff.store.sqlite.store import SQLiteStore
from flagstaff.store.sqlite.writer import connect
from tests.events import T0, event, seq_uuid


def _events(rng: random.Random, start: int, count: int) -> list[Event]:
    return [
        event(
            rng.choice(["$pageview", "clicked"]),
            rng.choice(["a", "b", "c"]),
            props={"n": n},
            ts=T0 + rng.randrange(50),
            received_ms=T0,
            uid=seq_uuid(n),
            process_person=False,
        )
        for n in range(start, start + count)
    ]


@pytest.mark.parametrize("indexed_batches", [0, 1, 2, 3])
def test_listing_by_distinct_id_spans_the_watermark(tmp_path: Path, indexed_batches: int) -> None:
    asyncio.run(_scenario(tmp_path, indexed_batches))


@pytest.mark.parametrize("indexed_batches", [1, 2, 3])
def test_listing_by_distinct_id_merges_buckets(
    tmp_path: Path, indexed_batches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Buckets of 8 sequence numbers: the 120 events' entries fall in 16 of them, each step's
    across a boundary; timestamps are random, so every bucket holds rows of every page."""
    monkeypatch.setattr(event_index, "BUCKET_BITS", 3)
    asyncio.run(_scenario(tmp_path, indexed_batches))
    conn = connect(tmp_path / "db.sqlite3")
    found = conn.execute("SELECT DISTINCT bucket, seq >> 3 = bucket FROM events_by_distinct_id")
    buckets = found.fetchall()
    conn.close()
    assert len(buckets) == 16 and all(ok for _, ok in buckets)


async def _scenario(tmp_path: Path, indexed_batches: int) -> None:
    path = tmp_path / "db.sqlite3"
    store = SQLiteStore(path)
    await store.open()
    project = await store.create_project("p")
    rng = random.Random(indexed_batches)
    conn = connect(path)
    stored: list[Event] = []
    for batch in range(3):
        events = _events(rng, batch * 40, 40)
        stored += events
        conn.execute("BEGIN IMMEDIATE")
        apply_ingest(conn, project.id, events, [], T0)
        if batch < indexed_batches:
            assert event_index.index_events(conn) > 0
        conn.execute("COMMIT")
    assert event_index.unindexed(conn) == (40 * (3 - indexed_batches) if indexed_batches else 120)

    for did in ("a", "b", "c", "nobody"):
        expected = sorted(
            (e for e in stored if e.distinct_id == did),
            key=lambda e: (e.timestamp_ms, e.properties["n"]),
            reverse=True,
        )
        seen: list[int] = []
        cursor = None
        while True:
            page = await store.list_events(
                project.id, EventQuery(distinct_id=did, cursor=cursor, limit=7)
            )
            if not page:
                break
            seen += [e.properties["n"] for e in page]
            cursor = (page[-1].timestamp_ms, page[-1].seq)
        assert seen == [e.properties["n"] for e in expected]
        clicks = await store.list_events(
            project.id,
            EventQuery(
                distinct_id=did, event="clicked", after_ms=T0 + 10, before_ms=T0 + 40, limit=1000
            ),
        )
        assert sorted(e.properties["n"] for e in clicks) == sorted(
            e.properties["n"]
            for e in expected
            if e.event == "clicked" and T0 + 10 < e.timestamp_ms < T0 + 40
        )

    conn.execute("BEGIN IMMEDIATE")
    while event_index.index_events(conn, limit=25):
        pass
    conn.execute("COMMIT")
    assert event_index.unindexed(conn) == 0
    conn.close()
    await store.close()


def test_entries_indexed_before_buckets_are_kept_in_bucket_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_migration_scenario(tmp_path, monkeypatch))


async def _migration_scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "db.sqlite3"
    pending = schema_files.pending
    monkeypatch.setattr(
        schema_files, "pending", lambda pkg, done: [m for m in pending(pkg, done) if m.number < 43]
    )
    store = SQLiteStore(path)
    await store.open()
    project = await store.create_project("p")
    await store.close()
    rng = random.Random(7)
    old = _events(rng, 0, 60)
    conn = connect(path)
    conn.execute("BEGIN IMMEDIATE")
    apply_ingest(conn, project.id, old, [], T0)
    conn.execute(  # the step before migration 0043, for the first 50 events
        "INSERT INTO events_by_distinct_id (project_id, distinct_id, timestamp_ms, seq) "
        "SELECT project_id, distinct_id, timestamp_ms, seq FROM events WHERE seq <= 50"
    )
    conn.execute("UPDATE event_index_state SET watermark = 50 WHERE name = 'distinct_id'")
    conn.execute("COMMIT")
    conn.close()

    monkeypatch.setattr(schema_files, "pending", pending)
    monkeypatch.setattr(event_index, "BUCKET_BITS", 4)
    store = SQLiteStore(path)
    await store.open()
    new = _events(rng, 60, 30)
    conn = connect(path)
    conn.execute("BEGIN IMMEDIATE")
    apply_ingest(conn, project.id, new, [], T0)
    assert event_index.index_events(conn, limit=20) == 20
    conn.execute("COMMIT")
    buckets = dict(
        conn.execute("SELECT bucket, count(*) FROM events_by_distinct_id GROUP BY bucket")
    )
    conn.close()
    assert buckets == {0: 50, 3: 13, 4: 7}  # seqs 51-63 and 64-70, indexed after it
    for did in ("a", "b", "c"):
        expected = sorted(
            (e for e in old + new if e.distinct_id == did),
            key=lambda e: (e.timestamp_ms, e.properties["n"]),
            reverse=True,
        )
        page = await store.list_events(project.id, EventQuery(distinct_id=did, limit=1000))
        assert [e.properties["n"] for e in page] == [e.properties["n"] for e in expected]
    await store.close()
