"""Flag usage on SQLite: the rollup kept by ingestion, its reads, and its recompute.

In a batch's transaction, :func:`before_events` notes the largest event ``seq`` and
:func:`after_events` adds the batch's checks once its events are inserted: all of them when
every event was stored, else only those of rows past the noted ``seq`` (inserted now; a
retried event's row is older). One upsert per (flag key, day, value) of the batch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator

import msgspec

from flagstaff.ingest.event_names import FEATURE_FLAG_CALLED
from flagstaff.ingest.flag_usage import Tally
from flagstaff.store.flag_usage import (
    RECOMPUTE_CHUNK,
    BatchChecks,
    DailyChecks,
    ValueChecks,
    recompute_tally,
)

_CHUNK = 400
_json = msgspec.json.encode
_UPSERT = (
    "INSERT INTO flag_usage_daily (project_id, flag_key, day, value, checks, last_seen_ms) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (project_id, flag_key, day, value) DO UPDATE SET "
    "checks = checks + excluded.checks, last_seen_ms = max(last_seen_ms, excluded.last_seen_ms)"
)


def before_events(conn: sqlite3.Connection, checks: BatchChecks | None) -> int:
    """The largest event ``seq`` before the batch's events go in (0 without checks)."""
    if checks is None:
        return 0
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])


def after_events(
    conn: sqlite3.Connection,
    project_id: int,
    checks: BatchChecks | None,
    mark: int,
    all_stored: bool,
) -> None:
    """Add the batch's new checks to the rollup (its events are inserted, same transaction)."""
    if checks is None:
        return
    tally = (
        checks.tally
        if all_stored
        else checks.fresh_tally(_inserted(conn, project_id, checks, mark))
    )
    _add(conn, project_id, tally)


def _inserted(
    conn: sqlite3.Connection, project_id: int, checks: BatchChecks, mark: int
) -> set[str]:
    uuids = sorted(set(checks.uuids))
    found: set[str] = set()
    for start in range(0, len(uuids), _CHUNK):
        chunk = uuids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        found.update(
            uuid
            for (uuid,) in conn.execute(
                f"SELECT uuid FROM events WHERE project_id = ? AND uuid IN ({marks}) "
                "AND event = ? AND seq > ?",
                (project_id, *chunk, FEATURE_FLAG_CALLED, mark),
            )
        )
    return found


def _add(conn: sqlite3.Connection, project_id: int, tally: Tally) -> None:
    conn.executemany(
        _UPSERT,
        [(project_id, key, day, value, n, last) for key, day, value, n, last in tally.rows()],
    )


def recompute(conn: sqlite3.Connection, project_id: int) -> int:
    """Rebuild the project's rollup from its stored events in the caller's transaction;
    returns how many ``$feature_flag_called`` events were read."""

    def rows() -> Iterator[tuple[bytes, int]]:
        cursor = conn.execute(
            "SELECT properties, timestamp_ms FROM events WHERE project_id = ? AND event = ?",
            (project_id, FEATURE_FLAG_CALLED),
        )
        while batch := cursor.fetchmany(RECOMPUTE_CHUNK):
            yield from batch

    tally = Tally()
    read = recompute_tally(rows(), tally)
    conn.execute("DELETE FROM flag_usage_daily WHERE project_id = ?", (project_id,))
    _add(conn, project_id, tally)
    return read


def daily_checks(
    conn: sqlite3.Connection, project_id: int, since_day: int, keys: Iterable[str]
) -> list[DailyChecks]:
    """These flags' checks per day from ``since_day`` on, values added together: one seek per
    flag."""
    wanted = sorted(set(keys))
    out: list[DailyChecks] = []
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            "SELECT flag_key, day, sum(checks), max(last_seen_ms) FROM flag_usage_daily "
            f"WHERE project_id = ? AND flag_key IN ({marks}) AND day >= ? "
            "GROUP BY flag_key, day",
            (project_id, *chunk, since_day),
        )
        out.extend(DailyChecks(*row) for row in rows)
    return out


def value_checks(
    conn: sqlite3.Connection, project_id: int, flag_key: str, since_day: int
) -> list[ValueChecks]:
    """One flag's checks per day and value from ``since_day`` on."""
    rows = conn.execute(
        "SELECT day, value, checks, last_seen_ms FROM flag_usage_daily "
        "WHERE project_id = ? AND flag_key = ? AND day >= ? ORDER BY day, value",
        (project_id, flag_key, since_day),
    )
    return [ValueChecks(*row) for row in rows]


def last_seen(conn: sqlite3.Connection, project_id: int, keys: Iterable[str]) -> dict[str, int]:
    """The time of each flag's last check ever (flags never checked are left out): the last
    check of its newest day, two seeks per flag in one statement."""
    rows = conn.execute(
        "SELECT k.value, (SELECT max(u.last_seen_ms) FROM flag_usage_daily u "
        "WHERE u.project_id = ?1 AND u.flag_key = k.value AND u.day = (SELECT max(m.day) "
        "FROM flag_usage_daily m WHERE m.project_id = ?1 AND m.flag_key = k.value)) "
        "FROM json_each(?2) AS k",
        (project_id, _json(sorted(set(keys))).decode()),
    )
    return {key: int(seen) for key, seen in rows if seen is not None}
