"""CPU cost of what the console's team pages read, on an SQLite store built for the run.

    python -m bench.team_pages [--events N] [--persons N] [--repeat N]

Measured as CPU time of this process (the store's reads run in it: on the event loop's thread,
or in a thread of their own for the capped counts), best of ``--repeat``:

- the events-per-minute chart (60 capped counts from the (project, timestamp) index) with
  ``--events`` events all in the last hour, against the same counts uncapped;
- the settings page's usage counts (events and persons up to 1,000,000);
- dynamic cohort sizes: persons read in id order and matched by two cohorts, per person, and
  the longest the event loop is held (one batch of 1,000);
- pruning the ingestion warnings kept (one ingest transaction's extra statement);
- a 200,000-id CSV upload parsed (multipart split and CSV reading).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from flagstaff.console.charts import EVENT_CHART_CAP, chart_start
from flagstaff.console.cohort_counts import COUNT_BATCH, COUNT_SCAN_LIMIT, CohortCounter
from flagstaff.console.team_data import USAGE_COUNT_CAP
from flagstaff.http.cohort_csv import distinct_ids_from_csv, form_parts
from flagstaff.store.rows import WARNINGS_KEPT
from flagstaff.store.sqlite.ingest import _PRUNE_WARNINGS
from flagstaff.store.sqlite.store import SQLiteStore

MINUTE = 60_000


def _fill(path: Path, project_id: int, events: int, persons: int, now: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    step = 3_600_000 / max(events, 1)
    conn.executemany(
        "INSERT INTO events (project_id, uuid, event, distinct_id, timestamp_ms, received_ms, "
        "properties) VALUES (?, ?, 'pageview', ?, ?, ?, '{}')",
        (
            (project_id, str(uuid.UUID(int=i)), f"u{i % 50_000}", now - int(i * step), now)
            for i in range(events)
        ),
    )
    encode = msgspec.json.encode
    conn.executemany(
        "INSERT INTO persons (project_id, uuid, properties, created_at_ms) VALUES (?, ?, ?, ?)",
        (
            (
                project_id,
                str(uuid.UUID(int=10**12 + i)),
                encode({"plan": ("free", "pro", "team")[i % 3], "email": f"p{i}@x.org", "n": i}),
                now,
            )
            for i in range(persons)
        ),
    )
    conn.executemany(
        "INSERT INTO ingestion_warnings (project_id, type, details, created_at_ms) "
        "VALUES (?, 'missing_event_name', '{}', ?)",
        ((project_id, now) for _ in range(WARNINGS_KEPT)),
    )
    conn.commit()
    conn.close()


async def _best_cpu_ms(run: Callable[[], Awaitable[Any]], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        await run()
        best = min(best, (time.process_time() - started) * 1000)
    return best


async def main(events: int, persons: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flagstaff.sqlite3"
        store = SQLiteStore(path)
        await store.open()
        try:
            project = await store.create_project("bench")
            now = int(time.time() * 1000)
            _fill(path, project.id, events, persons, now)
            start = chart_start(now)
            print(f"{events:,} events in the last hour, {persons:,} persons (SQLite)")

            capped = await _best_cpu_ms(
                lambda: store.events_per_minute(project.id, start, 60, EVENT_CHART_CAP), repeat
            )
            full = await _best_cpu_ms(
                lambda: store.events_per_minute(project.id, start, 60, 10**12), repeat
            )
            print(f"events per minute, capped at {EVENT_CHART_CAP:,}: {capped:.1f} ms CPU")
            print(f"events per minute, uncapped:          {full:.1f} ms CPU")
            usage = await _best_cpu_ms(
                lambda: store.project_usage(project.id, USAGE_COUNT_CAP), repeat
            )
            print(f"usage counts (cap {USAGE_COUNT_CAP:,}):      {usage:.1f} ms CPU")

            cohorts = [
                {"id": 1, "filters": {"properties": {"type": "AND", "values": [
                    {"key": "plan", "type": "person", "operator": "exact", "value": "pro"}]}}},
                {"id": 2, "filters": {"properties": {"type": "OR", "values": [
                    {"key": "email", "type": "person", "operator": "icontains",
                     "value": "7@"},
                    {"key": "n", "type": "person", "operator": "gt", "value": 100}]}}},
            ]  # fmt: skip
            longest = 0.0
            total = 0.0
            counted = 0
            for _ in range(repeat):
                counter = CohortCounter(cohorts)
                after, run_total, run_longest = 0, 0.0, 0.0
                while counter.scanned < COUNT_SCAN_LIMIT:
                    started = time.process_time()
                    batch = await store.scan_persons(project.id, after, COUNT_BATCH, False)
                    counter.add(batch)
                    spent = (time.process_time() - started) * 1000
                    run_total += spent
                    run_longest = max(run_longest, spent)
                    if len(batch) < COUNT_BATCH:
                        break
                    after = batch[-1].id
                counter.close()
                counted = counter.scanned
                total = min(total or run_total, run_total)
                longest = min(longest or run_longest, run_longest)
            print(
                f"dynamic cohort sizes (2 cohorts, {counted:,} persons): {total:.0f} ms CPU, "
                f"{total * 1000 / max(counted, 1):.1f} us a person, longest batch {longest:.1f} ms"
            )

            conn = sqlite3.connect(path)
            started = time.process_time()
            for _ in range(1000):
                conn.execute(_PRUNE_WARNINGS, (project.id, WARNINGS_KEPT - 1))
            prune = (time.process_time() - started) * 1000
            conn.close()
            print(f"warnings prune at {WARNINGS_KEPT:,} kept: {prune:.1f} us CPU per batch")

            csv = b"".join(f"user-{i:08d}\n".encode() for i in range(200_000))
            boundary = "----bench"
            body = (
                (
                    f'--{boundary}\r\nContent-Disposition: form-data; name="csv"; '
                    f'filename="ids.csv"\r\nContent-Type: text/csv\r\n\r\n'
                ).encode()
                + csv
                + f"\r\n--{boundary}--\r\n".encode()
            )

            async def parse() -> None:
                parts = form_parts(f"multipart/form-data; boundary={boundary}", body)
                distinct_ids_from_csv(parts["csv"][1])

            parsed = await _best_cpu_ms(parse, repeat)
            print(f"CSV of 200,000 ids ({len(body) / 1e6:.1f} MB) parsed: {parsed:.0f} ms CPU")
        finally:
            await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--persons", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.persons, args.repeat))
