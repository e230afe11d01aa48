"""What counting survey events adds to the SQLite ingest write path, in one process.

Plans and writes batches of 100 ``$pageview`` events (the writer's ``apply_ingest``, one
transaction per batch, no fsync) with the survey hook as shipped and with it replaced by a
no-op, alternating on fresh databases, best of several runs (on a busy machine the two
differ by noise; the hook's own cost is timed apart); then batches where one event in 100 is a
``survey sent`` for an existing survey (its aggregate read, folded and written back).

Run: ``python -m bench.survey_ingest [--batches N] [--repeat N]``
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from flagstaff.ingest.model import Event
from flagstaff.store.sqlite import ingest as sqlite_ingest
from flagstaff.store.sqlite.schema import migrate
from flagstaff.store.sqlite.writer import connect
from flagstaff.surveys.model import Survey

BATCH = 100
SURVEY_ID = "0193a000-0000-4000-8000-000000000001"


def _event(n: int, name: str = "$pageview", props: dict[str, Any] | None = None) -> Event:
    properties = {"$current_url": f"https://shop.example.com/p/{n % 50}", "$browser": "Chrome"}
    properties.update(props or {})
    return Event(
        uuid=str(uuid.uuid4()),
        event=name,
        distinct_id=f"user-{n % 1000}",
        properties=properties,
        timestamp_ms=1_777_600_000_000 + n,
        received_ms=1_777_600_000_000 + n,
        set={"plan": "pro"} if n % 10 == 0 else None,
        set_once=None,
        unset=None,
        process_person=True,
        historical=False,
    )


def _batches(count: int, survey_every: int | None) -> list[list[Event]]:
    out = []
    for b in range(count):
        batch = []
        for i in range(BATCH):
            n = b * BATCH + i
            if survey_every and i % survey_every == 0:
                props = {"$survey_id": SURVEY_ID, "$survey_response": "yes"}
                batch.append(_event(n, "survey sent", props))
            else:
                batch.append(_event(n))
        out.append(batch)
    return out


def _run(conn: sqlite3.Connection, batches: list[list[Event]]) -> float:
    started = time.perf_counter()
    for batch in batches:
        conn.execute("BEGIN IMMEDIATE")
        sqlite_ingest.apply_ingest(conn, 1, batch, [], 0)
        conn.execute("COMMIT")
    return (time.perf_counter() - started) / (len(batches) * BATCH) * 1e6


def _database(folder: Path, name: str) -> sqlite3.Connection:
    """A new database with one project and one survey."""
    path = folder / f"{name}.db"
    migrate(path)
    conn = connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    now = "2026-01-01T00:00:00Z"
    conn.execute(
        "INSERT INTO projects (id, uuid, name, api_token, created_at) VALUES (1, ?, ?, ?, ?)",
        (str(uuid.uuid4()), "bench", "phc_bench", now),
    )
    survey = Survey(id=SURVEY_ID, name="bench", type="popover")
    conn.execute(
        "INSERT INTO surveys (id, project_id, name, data, created_at, updated_at) "
        "VALUES (?, 1, ?, ?, ?, ?)",
        (SURVEY_ID, "bench", msgspec.json.encode(survey).decode(), now, now),
    )
    return conn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    shipped = sqlite_ingest.survey_events
    hooks = {"shipped hook": shipped, "no-op hook": lambda events, book=None: []}
    best = dict.fromkeys(hooks, float("inf"))
    with_surveys = float("inf")
    with tempfile.TemporaryDirectory(prefix="flagstaff-bench-") as scratch:
        for run in range(args.repeat):
            # a fresh database per measurement, the two hooks in alternating order
            for label in sorted(hooks, reverse=run % 2 == 1):
                sqlite_ingest.survey_events = hooks[label]  # type: ignore[assignment]
                conn = _database(Path(scratch), f"{label}-{run}".replace(" ", "-"))
                best[label] = min(best[label], _run(conn, _batches(args.batches, None)))
                conn.close()
            sqlite_ingest.survey_events = shipped  # type: ignore[assignment]
            conn = _database(Path(scratch), f"surveys-{run}")
            with_surveys = min(with_surveys, _run(conn, _batches(args.batches, 100)))
            conn.close()
    plain = _batches(1, None)[0]
    runs = 20_000
    started = time.perf_counter()
    for _ in range(runs):
        shipped(plain)
    hook = (time.perf_counter() - started) / runs / BATCH * 1e6
    print(f"the hook alone, no survey event {hook:7.3f} us/event")
    print(f"$pageview batches, no-op hook   {best['no-op hook']:7.2f} us/event")
    print(f"$pageview batches, shipped hook {best['shipped hook']:7.2f} us/event")
    print(f"ratio shipped / no-op           {best['shipped hook'] / best['no-op hook']:7.3f}")
    print(f"1 survey sent in 100 events     {with_surveys:7.2f} us/event")


if __name__ == "__main__":
    main()
