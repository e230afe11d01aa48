"""The ingest writer process: pipelined batches store what sequential transactions store."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from flagstaff.ingest.model import Event
from flagstaff.store.base import StoreError
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.client import IngestClient
from flagstaff.store.sqlite.ingest import apply_ingest
from flagstaff.store.sqlite.schema import migrate
from flagstaff.store.sqlite.writer import connect
from tests.events import random_person_event
from tests.unit.test_sqlite_ingest import _state


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    db = tmp_path / "db.sqlite3"
    migrate(db)
    sock = str(tmp_path / "ingest.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "flagstaff.store.sqlite.ingestd", str(db), sock],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    yield db, sock
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(10) == 0


def _batches(seed: int) -> list[list[Event]]:
    rng = random.Random(seed)
    return [
        [random_person_event(rng, b * 1000 + i) for i in range(rng.randrange(1, 30))]
        for b in range(40)
    ]


async def _send_concurrently(sock: str, batches: list[list[Event]]) -> None:
    """Many requests in flight at once, so batches are planned while others commit."""
    client = IngestClient(sock)
    try:
        for start in range(0, len(batches), 8):
            group = batches[start : start + 8]
            results = await asyncio.gather(
                *(client.ingest(1, [msgspec.structs.replace(e) for e in b], []) for b in group)
            )
            # counts of requests committed together are reported on the first of them
            assert sum(r.ingested + r.duplicates for r in results) == sum(len(b) for b in group)
    finally:
        await client.close()


@pytest.mark.parametrize("seed", range(3))
def test_pipelined_writer_stores_what_sequential_transactions_store(
    writer: tuple[Path, str], tmp_path: Path, seed: int
) -> None:
    db, sock = writer
    batches = _batches(seed)
    asyncio.run(_send_concurrently(sock, batches))

    reference = tmp_path / "reference.sqlite3"
    migrate(reference)
    conn = connect(reference)
    for batch in batches:
        conn.execute("BEGIN IMMEDIATE")
        apply_ingest(conn, 1, [msgspec.structs.replace(e) for e in batch], [], 0)
        conn.execute("COMMIT")
    expected = _state(conn)
    conn.close()

    stored = connect(db)
    assert _state(stored) == expected
    count = stored.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    assert count == sum(len(b) for b in batches)
    stored.close()


def test_a_batch_failing_to_commit_is_retried_alone_and_nothing_is_lost(
    writer: tuple[Path, str],
) -> None:
    """Another connection takes the person id the writer planned to use: the planned insert
    fails, the writer rolls back, forgets its cached persons and applies the batch again."""
    db, sock = writer
    rng = random.Random(9)
    first = [random_person_event(rng, i) for i in range(10)]
    asyncio.run(_send_concurrently(sock, [first]))
    other = connect(db)
    (top,) = other.execute("SELECT max(id) FROM persons").fetchone()
    other.execute(
        "INSERT INTO persons (id, project_id, uuid, properties, is_identified, created_at_ms) "
        "VALUES (?, 2, 'intruder', '{}', 0, 0)",
        (top + 1,),
    )
    fresh = [
        msgspec.structs.replace(e, distinct_id=f"new-{n}", event="$pageview")
        for n, e in enumerate(random_person_event(rng, 100 + i) for i in range(5))
    ]
    asyncio.run(_send_concurrently(sock, [fresh]))
    ids = dict(
        other.execute(
            "SELECT distinct_id, person_id FROM person_distinct_ids WHERE distinct_id LIKE 'new-%'"
        ).fetchall()
    )
    stored = other.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    other.close()
    assert stored == 15
    created = [e for e in fresh if e.process_person]
    assert len(ids) == len(created) and top + 1 not in ids.values()


def test_a_request_that_does_not_decode_fails_alone(writer: tuple[Path, str]) -> None:
    _, sock = writer

    async def scenario() -> None:
        client = IngestClient(sock)
        try:
            connection = await client._connect()
            loop = asyncio.get_running_loop()
            broken: asyncio.Future[object] = loop.create_future()
            connection.pending[777] = broken  # type: ignore[assignment]
            connection.send(msgspec.msgpack.encode([777, "not a project id", [], []]))
            with pytest.raises(StoreError, match="bad request"):
                await asyncio.wait_for(broken, 5)
            rng = random.Random(4)
            result = await client.ingest(1, [random_person_event(rng, 1)], [])
            assert result.ingested == 1
        finally:
            await client.close()

    asyncio.run(scenario())


def test_an_idle_writer_indexes_what_it_stored_by_distinct_id(writer: tuple[Path, str]) -> None:
    db, sock = writer
    asyncio.run(_send_concurrently(sock, _batches(5)[:8]))
    conn = connect(db)
    try:
        deadline = time.monotonic() + 10
        while event_index.unindexed(conn) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert event_index.unindexed(conn) == 0
        indexed = conn.execute("SELECT COUNT(*) FROM events_by_distinct_id").fetchone()[0]
        assert indexed == conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] > 0
    finally:
        conn.close()
