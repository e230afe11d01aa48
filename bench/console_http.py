"""Console pages over HTTP on a real server with 1,000 flags and 1M persons.

    python -m bench.console_http [--flags 1000] [--persons 1000000] [--repeat 20] [--postgres]

The server (``flagstaff serve``, 2 workers, SQLite or a fresh PostgreSQL database from
``tests/pg.py``) gets ``--flags`` flags through the API (the shapes of ``bench.console_pages``:
two condition sets, a third multivariate), one of them changed 20 times (its history), and one
check per flag, UTC day and value over the last 30 days through ``/batch/`` (60,000 events
for 1,000 flags: the most rows the usage rollup can have per day). Persons are written by
direct SQL while the server is stopped (the properties of ``bench.engine.build_people``),
then it starts again. A console user logs in and each page is fetched ``--repeat`` times
after one warm-up: the median and p95 wall time of a request (client on the same machine),
and the Flagstaff processes' CPU time per request (user + system from /proc, which other load
on a shared machine does not move; PostgreSQL's own processes are not counted). Property
value suggestions are timed apart on their first ask per key, which reads the sample.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import re
import sqlite3
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server

from bench.console_pages import make_flag
from bench.engine import build_people
from bench.load import CpuMeter, start_server
from bench.prefill import PERSON_COLUMNS
from flagstaff.common.units import DAY_MS

ADMIN_EMAIL = "bench@example.com"
PASSWORD = "bench password 123"
P = "/api/projects/@current"
PERSON_CHUNK = 20_000
COLD_KEYS = ("country", "email", "age", "app_version", "beta")


def _flags(api: httpx.Client, count: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    made = []
    for i in range(1, count + 1):
        body = make_flag(i, rng)
        for field in ("id", "deleted", "version", "created_at", "updated_at"):
            body.pop(field)
        r = api.post(f"{P}/feature_flags/", json=body)
        r.raise_for_status()
        made.append(r.json())
    changed = made[0]
    for n in range(20):
        r = api.patch(
            f"{P}/feature_flags/{changed['id']}/",
            json={"name": f"Flag number 1, change {n}", "active": n % 2 == 0},
        )
        r.raise_for_status()
    return made


def _checks(url: str, flags: list[dict[str, Any]], now_ms: int) -> int:
    """One check per flag, day and value over the last 30 days."""
    events = []
    for flag in flags:
        variants = (flag["filters"].get("multivariate") or {}).get("variants") or []
        values: list[Any] = [v["key"] for v in variants] or [True, False]
        for day in range(30):
            ts = now_ms - day * DAY_MS - 1000
            for value in values:
                events.append(
                    {
                        "event": "$feature_flag_called",
                        "distinct_id": f"visitor-{len(events) % 1000}",
                        "uuid": str(uuid.uuid4()),
                        "timestamp": datetime.fromtimestamp(ts / 1000, UTC).isoformat(),
                        "properties": {
                            "$feature_flag": flag["key"],
                            "$feature_flag_response": value,
                        },
                    }
                )
    with httpx.Client(base_url=url, timeout=120) as http:
        for start in range(0, len(events), 2000):
            batch = events[start : start + 2000]
            r = http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
            r.raise_for_status()
    return len(events)


def _person_rows(project_id: int, start: int, people: list[Any], now_ms: int) -> list[tuple]:
    return [
        (
            start + n + 1,
            project_id,
            str(uuid.UUID(int=random.getrandbits(128), version=4)),
            msgspec.json.encode(props).decode(),
            True,
            now_ms,
            distinct_id,
        )
        for n, (distinct_id, props, _) in enumerate(people)
    ]


def fill_sqlite(db: Path, persons: int) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        project_id = conn.execute("SELECT min(id) FROM projects").fetchone()[0]
        base = conn.execute("SELECT coalesce(max(id), 0) FROM persons").fetchone()[0]
        now = int(time.time() * 1000)
        rng = random.Random(11)
        for start in range(0, persons, PERSON_CHUNK):
            people = build_people(rng, min(PERSON_CHUNK, persons - start))
            people = [(f"person-{start + n}", p, g) for n, (_, p, g) in enumerate(people)]
            rows = _person_rows(project_id, base + start, people, now)
            conn.executemany(
                "INSERT INTO persons (id, project_id, uuid, properties, is_identified, "
                "created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                [r[:6] for r in rows],
            )
            conn.executemany(
                "INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) "
                "VALUES (?, ?, ?)",
                [(project_id, r[6], r[0]) for r in rows],
            )
            conn.commit()
    finally:
        conn.close()


async def fill_postgres(url: str, persons: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        project_id = await conn.fetchval("SELECT min(id) FROM projects")
        base = await conn.fetchval("SELECT coalesce(max(id), 0) FROM persons")
        now = int(time.time() * 1000)
        rng = random.Random(11)
        for start in range(0, persons, PERSON_CHUNK):
            people = build_people(rng, min(PERSON_CHUNK, persons - start))
            people = [(f"person-{start + n}", p, g) for n, (_, p, g) in enumerate(people)]
            rows = _person_rows(project_id, base + start, people, now)
            await conn.copy_records_to_table(
                "persons",
                records=[(r[0], r[1], uuid.UUID(r[2]), r[3], r[4], r[5], 0) for r in rows],
                columns=list(PERSON_COLUMNS),
            )
            await conn.copy_records_to_table(
                "person_distinct_ids",
                records=[(project_id, r[6], r[0]) for r in rows],
                columns=["project_id", "distinct_id", "person_id"],
            )
        await conn.execute(
            "SELECT setval(pg_get_serial_sequence('persons', 'id'), (SELECT max(id) FROM persons))"
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def log_in(url: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=60.0)
    form = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token is not None
    done = client.post(
        "/login",
        data={"email": ADMIN_EMAIL, "password": PASSWORD, "csrf_token": token.group(1)},
        headers={"Origin": url},
    )
    assert done.status_code == 303, done.text
    return client


class Timing(msgspec.Struct):
    page: str
    median_ms: float
    p95_ms: float
    cpu_ms: float
    kib: float


def measure(client: httpx.Client, meter: CpuMeter, page: str, repeat: int) -> Timing:
    first = client.get(page)
    assert first.status_code == 200, (page, first.status_code, first.text[:300])
    times = []
    meter.start()
    for _ in range(repeat):
        started = time.perf_counter()
        r = client.get(page)
        times.append((time.perf_counter() - started) * 1000)
        assert r.status_code == 200, (page, r.status_code)
    spent = meter.stop()
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    cpu = (spent["workers"] + spent["writer"]) / repeat * 1000
    return Timing(page, statistics.median(times), p95, cpu, len(first.content) / 1024)


def console_server(postgres: bool, *, timeout: float) -> tuple[Server, str, httpx.Client]:
    """A 2-worker server whose console admin is ADMIN_EMAIL, its engine's name, and an API
    client with the personal key (the console benchmarks' start)."""
    env = {"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD}
    srv, _ = start_server(2, env, postgres=postgres)
    api = httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"}, timeout=timeout
    )
    return srv, "PostgreSQL" if postgres else "SQLite", api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flags", type=int, default=1000)
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    srv, engine, api = console_server(args.postgres, timeout=60)
    try:
        started = time.perf_counter()
        flags = _flags(api, args.flags)
        checks = _checks(srv.url, flags, int(time.time() * 1000))
        print(f"{len(flags)} flags, {checks:,} checks in {time.perf_counter() - started:.0f} s")
        _restart_with_persons(srv, args.persons, args.postgres)
        mv = next(f for f in flags if (f["filters"].get("multivariate") or {}).get("variants"))
        person = f"person-{args.persons // 2}"
        pages = [
            "/feature_flags",
            "/feature_flags?search=flag-0042",
            "/feature_flags?stale=false&type=multivariate",
            f"/feature_flags/{mv['id']}",
            f"/feature_flags/{flags[0]['id']}/history",
            "/persons",
            f"/persons?distinct_id={person}",
            "/events",
            f"{P}/persons/values/?key=plan",
        ]
        client = log_in(srv.url)
        if client.get("/cohorts").status_code == 200:
            pages.append("/cohorts")
        assert srv.proc is not None
        meter = CpuMeter(srv.proc.pid)
        cold_ms = []
        for key in COLD_KEYS:  # each key's first ask reads a sample (then it is cached)
            cold = time.perf_counter()
            r = client.get(f"{P}/persons/values/?key={key}")
            cold_ms.append((time.perf_counter() - cold) * 1000)
            assert r.status_code == 200 and r.json(), r.text
        rows = [measure(client, meter, page, args.repeat) for page in pages]
    finally:
        srv.stop()
    print(
        f"\n{engine}, {args.flags:,} flags, {args.persons:,} persons, {args.repeat} requests "
        f"per page after one warm-up; {platform.node()}, {platform.processor() or 'cpu'}"
    )
    print(f"{'page':<52} {'median':>8} {'p95':>8} {'CPU/req':>8} {'size':>9}")
    for t in rows:
        print(
            f"{t.page:<52} {t.median_ms:6.1f} ms {t.p95_ms:6.1f} ms {t.cpu_ms:6.1f} ms "
            f"{t.kib:6.1f} KiB"
        )
    print(
        f"persons/values/, first ask per key ({', '.join(COLD_KEYS)}): median "
        f"{statistics.median(cold_ms):.1f} ms, slowest {max(cold_ms):.1f} ms"
    )


def _restart_with_persons(srv: Server, persons: int, postgres: bool) -> None:
    srv.stop()
    started = time.perf_counter()
    if postgres:
        asyncio.run(fill_postgres(srv.env["FLAGSTAFF_DATABASE_URL"], persons))
    else:
        fill_sqlite(srv.data_dir / "flagstaff.sqlite3", persons)
    print(f"{persons:,} persons written in {time.perf_counter() - started:.0f} s")
    srv.start(timeout=120)


if __name__ == "__main__":
    main()
