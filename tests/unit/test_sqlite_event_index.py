"""Events by distinct id: indexed entries plus the events past the watermark read as one."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from flagstaff.ingest.model import Event
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
                project.id,
                distinct_id=did,
                event=None,
                after_ms=None,
                before_ms=None,
                cursor=cursor,
                limit=7,
            )
            if not page:
                break
            seen += [e.properties["n"] for e in page]
            cursor = (page[-1].timestamp_ms, page[-1].seq)
        assert seen == [e.properties["n"] for e in expected]
        clicks = await store.list_events(
            project.id,
            distinct_id=did,
            event="clicked",
            after_ms=T0 + 10,
            before_ms=T0 + 40,
            cursor=None,
            limit=1000,
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
