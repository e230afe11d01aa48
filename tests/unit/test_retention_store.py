"""Retention's storage steps on SQLite (the ingest writer's bounded deletes and incremental
vacuum, an older database converted in place), the month arithmetic of PostgreSQL's
partitions and its pass (whole months dropped only when every project expires them). The
whole flow, on both engines, is in tests/api/test_retention.py."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from flagstaff.store.postgres.partitions import month_of, next_month, partition_for
from flagstaff.store.retention import (
    DAY_MS,
    RetentionPolicy,
    RetentionProgress,
    retention_problem,
)
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.retention import RetentionRunner, delete_step, vacuum_step
from flagstaff.store.sqlite.schema import INCREMENTAL, migrate
from flagstaff.store.sqlite.writer import connect
from tests.events import event

NOW = int(time.time() * 1000)  # the runner reads the clock


def _fill(conn: sqlite3.Connection, project_id: int, ages_days: list[float]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for n, age in enumerate(ages_days):
        ts = NOW - int(age * DAY_MS)
        conn.execute(
            "INSERT INTO events (project_id, uuid, event, distinct_id, timestamp_ms, received_ms, "
            "properties) VALUES (?, ?, 'e', ?, ?, ?, ?)",
            (
                project_id,
                f"{project_id}-{n}",
                f"d{n % 7}",
                ts,
                ts,
                "{" + '"p":"' + "x" * 900 + '"}',
            ),
        )
        conn.execute(
            "INSERT INTO ingestion_warnings (project_id, type, details, created_at_ms) "
            "VALUES (?, 't', '{}', ?)",
            (project_id, ts),
        )
    event_index.index_events(conn, 1_000_000)
    conn.execute("COMMIT")


def _counts(conn: sqlite3.Connection, project_id: int) -> tuple[int, int, int]:
    return tuple(  # type: ignore[return-value]
        conn.execute(
            f"SELECT count(*) FROM {table} WHERE project_id = ?", (project_id,)
        ).fetchone()[0]
        for table in ("events", "events_by_distinct_id", "ingestion_warnings")
    )


def test_delete_steps_are_bounded_and_keep_the_window(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    migrate(path)
    conn = connect(path)
    _fill(conn, 1, [40 + i / 100 for i in range(250)] + [29.0, 1.0])
    _fill(conn, 2, [40.0, 50.0])  # another project keeps everything
    policy = RetentionPolicy(1, 30)
    steps = []
    while True:
        conn.execute("BEGIN IMMEDIATE")
        progress = delete_step(conn, policy, NOW, limit=100)
        conn.execute("COMMIT")
        steps.append(progress.events)
        if progress.done:
            break
    assert steps == [100, 100, 50]
    assert _counts(conn, 1) == (2, 2, 2)  # the 29 and 1 day old events and their warnings
    assert _counts(conn, 2) == (2, 2, 2)


def test_vacuum_hands_pages_back_and_the_runner_finishes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    migrate(path)
    conn = connect(path)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL
    empty = conn.execute("PRAGMA page_count").fetchone()[0]
    _fill(conn, 1, [60.0] * 2000)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO projects (id, uuid, name, api_token, created_at, event_retention_days) "
        "VALUES (1, 'u', 'p', 't', '', 30)"
    )
    conn.execute("COMMIT")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    lock = (tmp_path / "lock").open("w")
    runner = RetentionRunner(interval=3600, clock=lambda: 1.0)
    runner.step(conn, lock.fileno())  # reads the settings, deletes up to a step
    assert runner.pending
    rounds = 1
    while runner.pending and rounds < 100:
        runner.step(conn, lock.fileno())
        rounds += 1
    assert not runner.pending
    assert _counts(conn, 1) == (0, 0, 0)
    assert pages > empty + 100
    assert conn.execute("PRAGMA page_count").fetchone()[0] <= empty + 2  # the file is back
    assert vacuum_step(conn) == 0


def test_an_older_database_is_converted_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE kept (x)")
    conn.execute("INSERT INTO kept VALUES (42)")
    conn.commit()
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    conn.close()
    migrate(path)
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL
    assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]


def test_months() -> None:
    assert month_of(1_767_225_599_999) == (2025, 12)  # 2025-12-31T23:59:59.999Z
    assert next_month(2025, 12) == (2026, 1)
    part = partition_for(2026, 2)
    assert part.name == "events_p202602"
    assert part.end_ms - part.start_ms == 28 * DAY_MS


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (None, True),
        (1, True),
        (36500, True),
        (0, False),
        (36501, False),
        (True, False),
        ("7", False),
    ],
)
def test_retention_values(value: object, ok: bool) -> None:
    assert (retention_problem(value) is None) is ok


async def _postgres_pass(url: str) -> None:
    from flagstaff.store.postgres.store import PostgresStore

    now = int(time.time() * 1000)
    store = PostgresStore(url)
    await store.open()
    try:
        a = (await store.create_project("A")).id
        b = (await store.create_project("B")).id
        assert await store.set_event_retention(a, 30)
        assert await store.get_event_retention(b) is None
        only_a = partition_for(*month_of(now - 150 * DAY_MS))
        shared = partition_for(*month_of(now - 100 * DAY_MS))
        await store.ingest(a, [event("e", "x", ts=only_a.start_ms + i) for i in range(30)], [])
        await store.ingest(a, [event("e", "x", ts=shared.start_ms + i) for i in range(20)], [])
        await store.ingest(b, [event("e", "y", ts=shared.start_ms + i) for i in range(10)], [])
        recent = [event("e", "x", ts=now - 5 * DAY_MS + i) for i in range(5)]
        await store.ingest(a, recent, [])
        async with store.pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO ingestion_warnings (project_id, type, details, created_at_ms) "
                "SELECT p, 't', '{}', c FROM unnest($1::bigint[], $2::bigint[]) AS x(p, c)",
                [a, a, b],
                [now - 40 * DAY_MS, now - DAY_MS, now - 40 * DAY_MS],
            )
        total = RetentionProgress(done=False)
        for _ in range(5):
            progress = await store.retention_pass(now)
            assert progress is not None
            total.events += progress.events
            total.warnings += progress.warnings
            total.partitions_dropped += progress.partitions_dropped
            if progress.done:
                break
        async with store.pool.acquire() as conn:
            names = {
                r[0]
                for r in await conn.fetch(
                    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'events'::regclass"
                )
            }
            counts = dict(await conn.fetch("SELECT project_id, count(*) FROM events GROUP BY 1"))
            uuids = dict(
                await conn.fetch("SELECT project_id, count(*) FROM event_uuids GROUP BY 1")
            )
            warnings = dict(
                await conn.fetch("SELECT project_id, count(*) FROM ingestion_warnings GROUP BY 1")
            )
        # A's only month is dropped whole; the month B keeps is kept, A's rows in it deleted.
        assert only_a.name not in names and shared.name in names
        assert total.partitions_dropped == 1 and total.events == 20
        assert counts == {a: 5, b: 10} and uuids == {a: 5, b: 10}
        assert warnings == {a: 1, b: 1}
        # Another node's pass waits for nobody: the lock is free again, and there is no work.
        again = await store.retention_pass(now)
        assert again is not None and again.events == 0 and again.partitions_dropped == 0
    finally:
        await store.close()


def test_postgres_pass_drops_whole_months_and_deletes_the_rest() -> None:
    import asyncio

    from tests import pg

    asyncio.run(_postgres_pass(pg.new_database()))
