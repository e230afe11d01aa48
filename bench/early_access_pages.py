"""The console's early access pages over HTTP with 1M persons, every one enrolled in a feature.

    python -m bench.early_access_pages [--persons 1000000] [--features 10] [--repeat 20]
                                       [--postgres]

The server (``flagstaff serve``, 2 workers, SQLite or a fresh PostgreSQL database) gets
``--features`` early access features through the API. Persons are then written by direct SQL
while the server is stopped (``bench.console_http``'s properties), each enrolled
(``$feature_enrollment/<key>: true``) in the first feature and every tenth one in each other
feature too, and the database is set back to before migration 0131 (its tables dropped, the
migration forgotten): starting again applies it, and its backfill of the enrolled persons is
timed (the server's start). A console user logs in and the list and two features' pages (1M
and 100k persons enrolled) are fetched ``--repeat`` times after one warm-up
(``bench.console_http.measure``).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sqlite3
import time
from pathlib import Path

import httpx
from tests.server import Server

from bench.console_http import console_server, fill_postgres, fill_sqlite, log_in, measure
from bench.load import CpuMeter

P = "/api/projects/@current"
PREFIX = "$feature_enrollment/"
UNDO_0131 = (
    "DROP TABLE person_enrollments; DROP TABLE enrollment_counts; "
    "DELETE FROM schema_migrations WHERE version = 131"
)
"""The database as it was before migration 0131."""
ENROLL = (
    "UPDATE persons SET properties = json_set(properties, '$.\"' || ?1 || '\"', json('true')) "
    "WHERE (id % ?2) = 0"
)


def _features(api: httpx.Client, count: int) -> list[tuple[str, str]]:
    """(id, flag key) of ``count`` new features in the beta stage."""
    out = []
    for n in range(count):
        made = api.post(
            f"{P}/early_access_feature/", json={"name": f"Feature {n}", "stage": "beta"}
        )
        assert made.status_code == 201, made.text
        body = made.json()
        out.append((str(body["id"]), str(body["feature_flag"]["key"])))
    return out


def _enroll_sqlite(db: Path, keys: list[str]) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        for n, key in enumerate(keys):
            conn.execute(ENROLL, (PREFIX + key, 1 if n == 0 else 10))
        conn.commit()
        conn.executescript(UNDO_0131)
    finally:
        conn.close()


async def _enroll_postgres(url: str, keys: list[str]) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        for n, key in enumerate(keys):
            await conn.execute(
                "UPDATE persons SET properties = (properties::jsonb || "
                "jsonb_build_object($1::text, true))::json WHERE id % $2 = 0",
                PREFIX + key,
                1 if n == 0 else 10,
            )
        await conn.execute(UNDO_0131 + "; DROP FUNCTION person_enrollments_count()")
        await conn.execute("VACUUM ANALYZE persons")
    finally:
        await conn.close()


def _restart_enrolled(srv: Server, persons: int, keys: list[str], postgres: bool) -> None:
    srv.stop()
    started = time.perf_counter()
    if postgres:
        url = srv.env["FLAGSTAFF_DATABASE_URL"]
        asyncio.run(fill_postgres(url, persons))
        asyncio.run(_enroll_postgres(url, keys))
    else:
        db = srv.data_dir / "flagstaff.sqlite3"
        fill_sqlite(db, persons)
        _enroll_sqlite(db, keys)
    print(f"{persons:,} persons written and enrolled in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    srv.start(timeout=600)
    print(f"started again, migration 0131 included, in {time.perf_counter() - started:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    srv, engine, api = console_server(args.postgres, timeout=120)
    try:
        features = _features(api, args.features)
        keys = [key for _, key in features]
        _restart_enrolled(srv, args.persons, keys, args.postgres)
        client = log_in(srv.url)
        listed = client.get("/early_access").text
        assert f"{args.persons:,}" in listed, "the list does not show the enrolled persons"
        assert f"{args.persons // 10:,}" in listed
        assert srv.proc is not None
        meter = CpuMeter(srv.proc.pid)
        pages = ["/early_access", *(f"/early_access/{fid}" for fid, _ in features[:2])]
        rows = [measure(client, meter, path, args.repeat) for path in pages]
    finally:
        srv.stop()
    print(
        f"\n{engine}, {args.persons:,} persons, {args.features} features (all persons enrolled "
        f"in the first, a tenth in each other), {args.repeat} requests per page after one "
        f"warm-up; {platform.node()}"
    )
    print(f"{'page':<52} {'median':>8} {'p95':>8} {'CPU/req':>8} {'size':>9}")
    for t in rows:
        print(
            f"{t.page:<52} {t.median_ms:6.1f} ms {t.p95_ms:6.1f} ms {t.cpu_ms:6.1f} ms "
            f"{t.kib:6.1f} KiB"
        )


if __name__ == "__main__":
    main()
