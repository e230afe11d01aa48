"""Ingestion latency while retention deletes: /batch/ under wrk, before and during a deletion.

Run: ``python -m bench.retention_load [--old 200000] [--seconds 10] [--postgres]``

The store is first given ``--old`` events 31 to 75 days old. wrk then sends 100-event
batches of current events for ``--seconds`` (the baseline); the project's retention is set to
30 days and wrk runs again as long while the expired events are deleted (on PostgreSQL the
whole expired months' partitions are dropped and the rest of October's rows deleted). The
figure is the p99 of the second run against the first's (issue 29: within 2x), with how many
expired events were still there when each run ended, to show the deletion overlapped it.
``--control`` leaves retention off, to see how much the second run differs by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import time
import uuid

import httpx
from tests.server import PROJECT_TOKEN, Api, Server

from bench.ingest_load import _script
from bench.load import start_server, wrk

DAY_MS = 86_400_000


def _preload(srv: Server, count: int) -> None:
    now = int(time.time() * 1000)
    rng = random.Random(7)
    with httpx.Client(timeout=120) as client:
        for start in range(0, count, 2000):
            batch = [
                {
                    "event": "$pageview",
                    "uuid": str(uuid.uuid4()),
                    "distinct_id": f"old-{rng.randrange(10_000)}",
                    "timestamp": time.strftime(
                        "%Y-%m-%dT%H:%M:%SZ",
                        time.gmtime((now - rng.randrange(31 * DAY_MS, 75 * DAY_MS)) / 1000),
                    ),
                    "properties": {
                        "$current_url": "https://shop.example.com/p/1",
                        "pad": "x" * 400,
                    },
                }
                for _ in range(min(2000, count - start))
            ]
            answer = client.post(
                f"{srv.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch}
            )
            answer.raise_for_status()


def _expired_left(srv: Server, postgres: bool) -> int:
    cutoff = int(time.time() * 1000) - 30 * DAY_MS
    if postgres:
        import asyncpg

        async def count() -> int:
            conn = await asyncpg.connect(srv.env["FLAGSTAFF_DATABASE_URL"])
            try:
                return int(
                    await conn.fetchval(
                        "SELECT count(*) FROM events WHERE timestamp_ms < $1", cutoff
                    )
                )
            finally:
                await conn.close()

        return asyncio.run(count())
    conn = sqlite3.connect(f"file:{srv.data_dir / 'flagstaff.sqlite3'}?mode=ro", uri=True)
    try:
        return int(
            conn.execute(
                "SELECT count(*) FROM events WHERE timestamp_ms < ?", (cutoff,)
            ).fetchone()[0]
        )
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--old", type=int, default=200_000)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument(
        "--control", action="store_true", help="leave retention off: the second run's drift alone"
    )
    args = parser.parse_args()
    srv, root = start_server(
        args.workers, {"FLAGSTAFF_RETENTION_CHECK_SECONDS": "1"}, postgres=args.postgres
    )
    try:
        started = time.monotonic()
        _preload(srv, args.old)
        print(f"preloaded {args.old:,} expired-to-be events in {time.monotonic() - started:.1f} s")
        run_id = random.randrange(1, 60000)
        url = srv.url + "/batch/"
        wrk("warm-up", url, seconds=2, connections=4, script=_script(root, "/batch/", 100, run_id))
        base = wrk(
            "POST /batch/ before",
            url,
            seconds=args.seconds,
            connections=args.connections,
            script=_script(root, "/batch/", 100, run_id + 1),
        )
        left_before = _expired_left(srv, args.postgres)
        if not args.control:
            answer = Api(srv.url).patch(
                "/api/projects/@current/", json={"event_retention_days": 30}
            )
            answer.raise_for_status()
        during = wrk(
            "POST /batch/ while deleting",
            url,
            seconds=args.seconds,
            connections=args.connections,
            script=_script(root, "/batch/", 100, run_id + 2),
        )
        left_after = _expired_left(srv, args.postgres)
        store = "PostgreSQL" if args.postgres else "SQLite"
        print(f"{store}, {args.workers} workers, wrk {args.connections} connections")
        print(base.line())
        print(during.line())
        print(f"expired events left: {left_before:,} before, {left_after:,} after the second run")
        print(f"p99 while deleting / before: {during.p99_ms / base.p99_ms:.2f}")
        print(
            f"throughput while deleting / before: {during.requests_per_s / base.requests_per_s:.2f}"
        )
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
