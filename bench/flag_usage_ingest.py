"""What keeping the flag usage rollup adds to ingestion: CPU per event, with and without it.

    python -m bench.flag_usage_ingest [--batches 200] [--rounds 5] [--postgres]

Batches of 100 events from 1,000 persons, three mixes: ``$pageview`` only (the rollup then
costs a name comparison per event), one ``$feature_flag_called`` in five (20 flags, two
values), and checks only. Each round runs every mix on a fresh database with the rollup as
shipped and with it switched off (the batch's checks never found), in alternating order.
SQLite: the ingest writer's ``apply_ingest`` in this process, one transaction per batch
(``synchronous=OFF``), CPU = this process's. PostgreSQL (``--postgres``, a private server from
``tests/pg.py``): ``PostgresStore.ingest``, CPU = this process's plus every process of the
PostgreSQL cluster. The figure is the median over rounds of CPU microseconds per event; the
machine may be shared, and CPU time does not move with other load the way wall time does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.load import _children, _cpu_seconds, postmaster_of
from flagstaff.ingest.model import Event
from flagstaff.store.postgres import flag_usage as pg_flag_usage
from flagstaff.store.sqlite import ingest as sqlite_ingest
from flagstaff.store.sqlite.schema import migrate
from flagstaff.store.sqlite.writer import connect

BATCH = 100
T0 = 1_777_600_000_000
MIXES: dict[str, int | None] = {"pageviews only": None, "1 check in 5": 5, "checks only": 1}


def _event(n: int, check_every: int | None) -> Event:
    properties: dict[str, Any] = {"$current_url": f"https://shop.example.com/p/{n % 50}"}
    name = "$pageview"
    if check_every and n % check_every == 0:
        name = "$feature_flag_called"
        properties = {
            "$feature_flag": f"flag-{n % 20}",
            "$feature_flag_response": n % 3 == 0,
        }
    return Event(
        uuid=str(uuid.uuid4()),
        event=name,
        distinct_id=f"user-{n % 1000}",
        properties=properties,
        timestamp_ms=T0 + n * 1000,
        received_ms=T0 + n * 1000,
        set=None,
        set_once=None,
        unset=None,
        process_person=True,
        historical=False,
    )


def batches(count: int, check_every: int | None) -> list[list[Event]]:
    return [[_event(b * BATCH + i, check_every) for i in range(BATCH)] for b in range(count)]


@contextlib.contextmanager
def rollup(on: bool) -> Iterator[None]:
    """The rollup as shipped, or switched off: no batch has checks."""
    shipped_sqlite = sqlite_ingest.batch_checks
    shipped_pg = pg_flag_usage.update

    async def no_update(*args: Any) -> None:
        return None

    if not on:
        sqlite_ingest.batch_checks = lambda events: None  # type: ignore[assignment]
        pg_flag_usage.update = no_update  # type: ignore[assignment]
    try:
        yield
    finally:
        sqlite_ingest.batch_checks = shipped_sqlite  # type: ignore[assignment]
        pg_flag_usage.update = shipped_pg  # type: ignore[assignment]


def sqlite_run(folder: Path, name: str, work: list[list[Event]]) -> float:
    path = folder / f"{name}.db"
    migrate(path)
    conn = connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute(
        "INSERT INTO projects (id, uuid, name, api_token, created_at) VALUES (1, ?, ?, ?, ?)",
        (str(uuid.uuid4()), "bench", f"phc_{name}", "2026-01-01T00:00:00Z"),
    )
    try:
        started = time.process_time()
        for batch in work:
            conn.execute("BEGIN IMMEDIATE")
            sqlite_ingest.apply_ingest(conn, 1, batch, [], 0)
            conn.execute("COMMIT")
        return (time.process_time() - started) / (len(work) * BATCH) * 1e6
    finally:
        conn.close()


async def pg_run(work: list[list[Event]]) -> float:
    from tests import pg

    from flagstaff.store.postgres.store import PostgresStore

    url = pg.new_database()
    store = PostgresStore(url)
    await store.open()
    postmaster = await postmaster_of(url)

    def cluster() -> float:
        return sum(_cpu_seconds(p) for p in [postmaster, *_children(postmaster)])

    try:
        project = await store.create_project("bench")
        before, pg_before = time.process_time(), cluster()
        for batch in work:
            await store.ingest(project.id, batch, [])
        spent = time.process_time() - before + cluster() - pg_before
        return spent / (len(work) * BATCH) * 1e6
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    figures: dict[tuple[str, bool], list[float]] = {
        (mix, on): [] for mix in MIXES for on in (True, False)
    }
    with tempfile.TemporaryDirectory(prefix="flagstaff-bench-") as scratch:
        for n in range(args.rounds):
            for mix, every in MIXES.items():
                for on in (True, False) if n % 2 == 0 else (False, True):
                    work = batches(args.batches, every)
                    with rollup(on):
                        if args.postgres:
                            spent = asyncio.run(pg_run(work))
                        else:
                            name = f"{n}-{mix.replace(' ', '-')}-{on}"
                            spent = sqlite_run(Path(scratch), name, work)
                    figures[(mix, on)].append(spent)
    engine = "PostgreSQL" if args.postgres else "SQLite"
    print(f"{engine}: CPU us per event, median of {args.rounds} rounds of {args.batches} batches")
    print(f"{'mix':<16} {'rollup':>9} {'no rollup':>10} {'added':>8} {'ratio':>7}")
    for mix in MIXES:
        on = statistics.median(figures[(mix, True)])
        off = statistics.median(figures[(mix, False)])
        print(f"{mix:<16} {on:9.1f} {off:10.1f} {on - off:8.1f} {on / off:7.3f}")


if __name__ == "__main__":
    main()
