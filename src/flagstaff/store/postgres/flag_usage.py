"""Flag usage on PostgreSQL: the rollup kept by ingestion, its reads, and its recompute.

:func:`update` runs in the ingest transaction after its events are inserted: every check
counts when every event was stored, else only those whose row this transaction inserted
(``xmin`` is its id; a retried event's row is older). Each process adds to rows of its own
:data:`LANE`, locked in key order, so nodes never wait on each other's rows; reads add the
lanes up. A recompute takes the table's SHARE ROW EXCLUSIVE lock: ingestion waits for it
(every transaction that stored events before it has committed and is counted by the read;
later ones add theirs after it).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

import asyncpg

from flagstaff.ingest.event_names import FEATURE_FLAG_CALLED
from flagstaff.ingest.flag_usage import Tally
from flagstaff.ingest.model import Event
from flagstaff.store.flag_usage import (
    RECOMPUTE_CHUNK,
    DailyChecks,
    ValueChecks,
    batch_checks,
    recompute_tally,
)
from flagstaff.store.postgres.sql import pg_text

LANE = secrets.randbits(62)
"""This process's rows of the rollup (reads add the rows of every lane)."""

_INSERTED_NOW = (
    "SELECT uuid::text FROM event_uuids WHERE project_id = $1 AND uuid = ANY($2::uuid[]) "
    "AND xmin = pg_current_xact_id()::xid"
)
"""Which of the batch's ``$feature_flag_called`` uuids this transaction stored (looked up in
``event_uuids``: the events table has no uuid index since it is partitioned by time)."""
_UPSERT = (
    "INSERT INTO flag_usage_daily (project_id, flag_key, day, value, lane, checks, "
    "last_seen_ms) SELECT $1, k, d, v, $2, c, l FROM unnest($3::text[], $4::int[], $5::text[], "
    "$6::bigint[], $7::bigint[]) AS x(k, d, v, c, l) "
    "ON CONFLICT (project_id, flag_key, day, value, lane) DO UPDATE SET "
    "checks = flag_usage_daily.checks + excluded.checks, "
    "last_seen_ms = greatest(flag_usage_daily.last_seen_ms, excluded.last_seen_ms)"
)


async def update(
    conn: asyncpg.Connection, project_id: int, kept: list[Event], all_stored: bool
) -> None:
    """Add the batch's new checks to the rollup (its events are inserted, same transaction)."""
    checks = batch_checks(kept)
    if checks is None:
        return
    if all_stored:
        tally = checks.tally
    else:
        rows = await conn.fetch(_INSERTED_NOW, project_id, checks.uuids)
        tally = checks.fresh_tally({r[0] for r in rows})
    await _add(conn, project_id, tally, LANE)


async def _add(conn: asyncpg.Connection, project_id: int, tally: Tally, lane: int) -> None:
    rows = tally.rows()
    if not rows:
        return
    await conn.execute(
        _UPSERT,
        project_id,
        lane,
        [pg_text(key) for key, _, _, _, _ in rows],
        [day for _, day, _, _, _ in rows],
        [pg_text(value) for _, _, value, _, _ in rows],
        [n for _, _, _, n, _ in rows],
        [last for _, _, _, _, last in rows],
    )


async def recompute(conn: asyncpg.Connection, project_id: int) -> int:
    """Rebuild the project's rollup from its stored events in the caller's transaction;
    returns how many ``$feature_flag_called`` events were read."""
    await conn.execute("LOCK TABLE flag_usage_daily IN SHARE ROW EXCLUSIVE MODE")
    cursor = await conn.cursor(
        "SELECT properties::text, timestamp_ms FROM events WHERE project_id = $1 AND event = $2",
        project_id,
        FEATURE_FLAG_CALLED,
    )
    tally, read = Tally(), 0
    while rows := await cursor.fetch(RECOMPUTE_CHUNK):
        read += recompute_tally(rows, tally)
    await conn.execute("DELETE FROM flag_usage_daily WHERE project_id = $1", project_id)
    await _add(conn, project_id, tally, LANE)
    return read


async def daily_checks(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: int, since_day: int, keys: Iterable[str]
) -> list[DailyChecks]:
    """These flags' checks per day from ``since_day`` on, values and lanes added together: one
    index range per flag."""
    rows = await conn.fetch(
        "SELECT flag_key, day, sum(checks)::bigint, max(last_seen_ms) FROM flag_usage_daily "
        "WHERE project_id = $1 AND flag_key = ANY($2::text[]) AND day >= $3 "
        "GROUP BY flag_key, day",
        project_id,
        sorted({pg_text(k) for k in keys}),
        since_day,
    )
    return [DailyChecks(*row) for row in rows]


async def value_checks(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: int, flag_key: str, since_day: int
) -> list[ValueChecks]:
    """One flag's checks per day and value from ``since_day`` on, lanes added together."""
    rows = await conn.fetch(
        "SELECT day, value, sum(checks)::bigint, max(last_seen_ms) FROM flag_usage_daily "
        "WHERE project_id = $1 AND flag_key = $2 AND day >= $3 GROUP BY day, value "
        "ORDER BY day, value",
        project_id,
        pg_text(flag_key),
        since_day,
    )
    return [ValueChecks(*row) for row in rows]


async def last_seen(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: int, keys: Iterable[str]
) -> dict[str, int]:
    """The time of each flag's last check ever (flags never checked are left out): one index
    look-up per flag."""
    wanted = sorted({pg_text(k) for k in keys})
    if not wanted:
        return {}
    rows = await conn.fetch(
        "SELECT k, (SELECT max(u.last_seen_ms) FROM flag_usage_daily u "
        "WHERE u.project_id = $1 AND u.flag_key = k AND u.day = (SELECT max(m.day) "
        "FROM flag_usage_daily m WHERE m.project_id = $1 AND m.flag_key = k)) "
        "FROM unnest($2::text[]) AS x(k)",
        project_id,
        wanted,
    )
    return {k: int(v) for k, v in rows if v is not None}
