"""The monthly partitions of the events table on PostgreSQL (migration 0121).

Each UTC month's events live in ``events_pYYYYMM``; events of a month without a partition
(older than the first, or beyond those made ahead) land in ``events_default``. The retention
pass (``store/postgres/retention.py``) keeps :data:`MONTHS_AHEAD` months made ahead and drops a
partition once every event in it has expired for its project.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import asyncpg
import msgspec

from flagstaff.common.units import DAY_MS

MONTHS_AHEAD = 2
LOCK_TIMEOUT = "2s"
"""How long creating or dropping a partition waits for ingestion's locks before giving up
(and trying again on the next pass), so that ingestion never queues behind it for longer."""
HISTORY_MS = 10 * 366 * DAY_MS
"""Past months get a partition of their own up to about ten years back; older events stay in
the default partition (and are deleted row by row when they expire)."""
_BOUNDS = re.compile(r"FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")


class Partition(msgspec.Struct, frozen=True):
    name: str
    start_ms: int
    end_ms: int
    """Exclusive."""


def month_start(year: int, month: int) -> int:
    return int(datetime(year, month, 1, tzinfo=UTC).timestamp() * 1000)


def month_of(ms: int) -> tuple[int, int]:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.year, moment.month


def next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def partition_for(year: int, month: int) -> Partition:
    following = next_month(year, month)
    return Partition(
        f"events_p{year:04d}{month:02d}", month_start(year, month), month_start(*following)
    )


async def partitions(conn: asyncpg.Connection) -> list[Partition]:
    """The range partitions of ``events`` (the default one apart), oldest first."""
    rows = await conn.fetch(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass"
    )
    out = []
    for name, bound in rows:
        found = _BOUNDS.search(bound or "")
        if found:
            out.append(Partition(name, int(found.group(1)), int(found.group(2))))
    return sorted(out, key=lambda p: p.start_ms)


async def ensure(conn: asyncpg.Connection, now_ms: int) -> int:
    """Create this month's partition and the next :data:`MONTHS_AHEAD` when missing, and one
    for each past month that has events in the default partition (a historical import, late
    events); how many were created. Rows of such a month in the default partition move into
    it, so that they are dropped with their month."""
    existing = {p.name for p in await partitions(conn)}
    months = []
    month = month_of(now_ms)
    for _ in range(MONTHS_AHEAD + 1):
        months.append(month)
        month = next_month(*month)
    last = partition_for(*months[-1]).end_ms
    if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM events_default)"):
        rows = await conn.fetch(
            "SELECT DISTINCT date_trunc('month', to_timestamp(timestamp_ms / 1000.0) "
            "AT TIME ZONE 'UTC') FROM events_default WHERE timestamp_ms >= $1 "
            "AND timestamp_ms < $2",
            now_ms - HISTORY_MS,
            last,
        )
        months += [(r[0].year, r[0].month) for r in rows]
    created = 0
    for month in sorted(set(months)):
        part = partition_for(*month)
        if part.name in existing:
            continue
        try:
            await _create(conn, part)
        except (asyncpg.LockNotAvailableError, asyncpg.CheckViolationError):
            continue  # the next pass tries again
        created += 1
    return created


async def _create(conn: asyncpg.Connection, part: Partition) -> None:
    """Make ``part`` and move its month's rows out of the default partition.

    Ingestion waits meanwhile (the parent is locked in SHARE mode, which its inserts' ROW
    EXCLUSIVE conflicts with): an insert that chose the default partition for this month just
    before the attach would otherwise fail with "violates partition constraint". The wait is
    the time to move those rows, none in the usual case (a month made ahead).
    """
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        await conn.execute("LOCK TABLE ONLY events IN SHARE MODE")
        await conn.execute(f"CREATE TABLE {part.name} (LIKE events INCLUDING DEFAULTS)")
        await conn.execute(
            f"WITH moved AS (DELETE FROM events_default WHERE timestamp_ms >= $1 "
            f"AND timestamp_ms < $2 RETURNING *) INSERT INTO {part.name} SELECT * FROM moved",
            part.start_ms,
            part.end_ms,
        )
        await conn.execute(
            f"ALTER TABLE events ATTACH PARTITION {part.name} "
            f"FOR VALUES FROM ({part.start_ms}) TO ({part.end_ms})"
        )


async def droppable(
    conn: asyncpg.Connection, part: Partition, cutoffs: dict[int, int | None]
) -> bool:
    """Whether every event in ``part`` has expired: each project (``cutoffs``: every project's
    cutoff, None when it keeps events forever) either has none there or expires the whole
    month. An index probe per project that keeps some of them."""
    for project_id, cutoff in cutoffs.items():
        if cutoff is not None and cutoff >= part.end_ms:
            continue
        if await conn.fetchval(
            f"SELECT EXISTS (SELECT 1 FROM {part.name} WHERE project_id = $1)", project_id
        ):
            return False
    return True


async def drop_expired(conn: asyncpg.Connection, cutoffs: dict[int, int | None]) -> int:
    """Drop every partition whose events have all expired; how many were dropped."""
    dropped = 0
    latest = max((c for c in cutoffs.values() if c is not None), default=None)
    for part in await partitions(conn):
        if latest is None or part.end_ms > latest:
            break  # no project expires the whole month: only old months are looked at
        if not await droppable(conn, part, cutoffs):
            continue
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                # The parent first, as ingestion locks it (DROP takes it too), then checked
                # again: an event may have arrived since. Ingestion waits for the drop only.
                await conn.execute("LOCK TABLE ONLY events IN ACCESS EXCLUSIVE MODE")
                if not await droppable(conn, part, cutoffs):
                    continue
                await conn.execute(f"DROP TABLE {part.name}")
        except asyncpg.LockNotAvailableError:
            continue
        dropped += 1
    return dropped
