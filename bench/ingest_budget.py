"""Where an ingested event's CPU goes, stage by stage, in process, with no HTTP and no sockets.

Run: ``python -m bench.ingest_budget [--events 20000]``

Issue 28's levels set a CPU budget per event: on 2 cores, ``2 s / (level x floor)``. This
prints what the stages an event goes through cost here, on the events of
``bench.ingest_load`` (``$pageview``s of ~600 bytes, 10,000 persons):

- ``worker``: an HTTP worker's Python per event, cumulative: the body decoded, the envelope,
  each event normalised, the hand-off to the writer (``protocol.for_writer``) and the frame's
  msgpack; for single-event bodies and for 100-event batches;
- ``writer``: the ingest writer's work per event as ``ingestd`` does it (frames decoded,
  grouped per project, the person rules over cached persons, rows planned, executed, one
  transaction, the answers encoded), with one durable commit for every ``k`` single-event
  frames, and for 100-event frames; with ``synchronous=FULL`` as served, then ``OFF``
  (without the commit's fsync, which is not something the service may do);
- ``commit``: SQLite alone, one commit of 1 or 8 event rows into a table with the events
  table's two indexes, ``FULL`` against ``OFF``: what a durable commit costs this machine.

CPU is the process's user + system time (``time.process_time``), so the kernel's work for the fsync
counts. Run it on a quiet machine; the figures are per event unless said otherwise.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.server import PROJECT_TOKEN

from bench.ingest_inprocess import LIMIT, NOW_MS, normalized
from bench.ingest_inprocess import bodies as batch_bodies
from bench.ingest_inprocess import frame as _frame
from bench.ingest_load import _EVENT
from flagstaff.http.payload import decode_body
from flagstaff.ingest.normalize import parse_envelope
from flagstaff.store.records import IngestResult
from flagstaff.store.sqlite import ingest, schema
from flagstaff.store.sqlite.ingestd import WAL_CHECKPOINT_BYTES
from flagstaff.store.sqlite.person_cache import DEFAULT_PERSON_CACHE_MB, PersonCache
from flagstaff.store.sqlite.protocol import for_writer, request_decoder, request_encoder
from flagstaff.store.sqlite.writer import connect, write_transaction

PERSONS = 10_000


def single_bodies(count: int, first: int = 0) -> list[bytes]:
    """``count`` single-event bodies as posthog-js sends them, each with a fresh uuid."""
    out = []
    for n in range(first, first + count):
        uuid = f"01930002-0000-7000-8002-{n:012x}"
        event = _EVENT % (uuid, n * 7919 % PERSONS, n % 500, n % 500, n, n, n % 500)
        out.append(f'{{"api_key":"{PROJECT_TOKEN}",{event[1:]}'.encode())
    return out


def _cpu() -> float:
    return time.process_time()


STAGES = ("decode", "envelope", "normalise", "hand-off", "frame")


def worker_stages(bodies: list[bytes], events_each: int) -> list[float]:
    """CPU µs per event of each worker stage, cumulative (best of 3)."""

    def upto(stage: int) -> float:
        started = _cpu()
        for body in bodies:
            payload = decode_body(
                body, content_type="application/json", content_encoding=None, query={}, limit=LIMIT
            )
            if stage < 1:
                continue
            envelope = parse_envelope(payload, {})
            if stage < 2:
                continue
            events, _ = normalized(envelope)
            if stage < 3:
                continue
            handed = for_writer(events)
            if stage < 4:
                continue
            request_encoder.encode((1, 1, handed, []))
        return (_cpu() - started) / (len(bodies) * events_each) * 1e6

    return [min(upto(stage) for _ in range(3)) for stage in range(len(STAGES))]


class WriterBench:
    """A fresh database with the project and its 10,000 persons stored and cached."""

    def __init__(self, folder: Path, synchronous: str) -> None:
        self.db = folder / f"writer-{synchronous}.sqlite3"
        schema.migrate(self.db)
        self.conn = connect(self.db)
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_BYTES // schema.PAGE_SIZE}")
        self.conn.execute(
            "INSERT INTO projects (id, uuid, name, api_token, created_at) "
            "VALUES (1, 'u', 'bench', 't', '')"
        )
        self.lock_fd = os.open(str(self.db) + ".writer-lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.cache = PersonCache(DEFAULT_PERSON_CACHE_MB * 1024 * 1024)
        self.ids = ingest.PersonIds()
        warm = [_frame(b, n) for n, b in enumerate(single_bodies(PERSONS, first=10**9))]
        for start in range(0, len(warm), 500):
            self.commit(warm[start : start + 500])

    def commit(self, frames: list[bytes]) -> None:
        """What ``IngestServer._apply`` does with the frames of one turn."""
        accepted, requests = [], []
        for payload in frames:
            request_id, project_id, events, drops = request_decoder.decode(payload)
            accepted.append(request_id)
            requests.append((project_id, events, drops))
        plans = [
            (
                batch.indexes,
                ingest.plan_ingest(
                    lambda: self.conn,
                    batch.project_id,
                    batch.events,
                    batch.drops,
                    NOW_MS,
                    self.ids,
                    self.cache,
                ),
            )
            for batch in ingest.by_project(requests)
        ]
        with write_transaction(self.conn, self.lock_fd):
            results = [ingest.execute_plan(self.conn, plan) for _, plan in plans]
        out: list[IngestResult] = [ingest.EMPTY_RESULT] * len(requests)
        for (indexes, _), result in zip(plans, results, strict=True):
            out[indexes[0]] = result
        for request_id, result in zip(accepted, out, strict=True):
            request_encoder.encode((request_id, result, None))

    def per_event(self, frames: list[bytes], per_commit: int, events_each: int) -> float:
        started = _cpu()
        for start in range(0, len(frames), per_commit):
            self.commit(frames[start : start + per_commit])
        return (_cpu() - started) / (len(frames) * events_each) * 1e6

    def close(self) -> None:
        self.conn.close()
        os.close(self.lock_fd)


def commit_cost(folder: Path, synchronous: str, rows: int, commits: int = 2000) -> float:
    """CPU µs of one commit of ``rows`` event rows (the events table's two indexes)."""
    path = folder / f"commit-{synchronous}-{rows}.sqlite3"
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA page_size=16384")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.executescript(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, project_id INTEGER, uuid TEXT, "
        "timestamp_ms INTEGER, properties TEXT);"
        "CREATE UNIQUE INDEX events_uuid ON events(project_id, uuid);"
        "CREATE INDEX events_timestamp ON events(project_id, timestamp_ms);"
    )
    properties = "p" * 550
    n = 0
    started = _cpu()
    for _ in range(commits):
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(rows):
            n += 1
            conn.execute(
                "INSERT INTO events (project_id, uuid, timestamp_ms, properties) "
                "VALUES (1, ?, ?, ?)",
                (f"01930003-0000-7000-8003-{n:012x}", NOW_MS + n, properties),
            )
        conn.execute("COMMIT")
    conn.close()
    return (_cpu() - started) / commits * 1e6


def _row(label: str, value: float, unit: str = "µs/event") -> None:
    print(f"  {label:<52} {value:8.1f} {unit}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    singles = single_bodies(args.events)
    batches = batch_bodies(max(args.events // 100, 20))

    print("worker, in process (cumulative, best of 3)")
    for label, bodies, each in (("single events", singles, 1), ("100-event batches", batches, 100)):
        for stage, cost in zip(STAGES, worker_stages(bodies, each), strict=True):
            _row(f"{label}: + {stage}", cost)

    single_frames = [_frame(b, n) for n, b in enumerate(singles)]
    batch_frames = [_frame(b, n) for n, b in enumerate(batches)]
    cases: list[tuple[str, Callable[[WriterBench], float]]] = [
        (f"{k} single-event frame{'s' if k > 1 else ''} per commit", _singles(single_frames, k))
        for k in (1, 4, 8, 16, 32)
    ]
    cases.append(("one 100-event frame per commit", lambda w: w.per_event(batch_frames, 1, 100)))
    with tempfile.TemporaryDirectory(prefix="flagstaff-budget-") as folder:
        for synchronous in ("FULL", "OFF"):
            print(f"ingest writer, persons cached, synchronous={synchronous}")
            for label, case in cases:
                bench = WriterBench(Path(folder), synchronous)
                try:
                    _row(label, case(bench))
                finally:
                    bench.close()
                for leftover in Path(folder).glob("writer-*"):
                    leftover.unlink()
        print("SQLite alone: CPU of one commit (events table, two indexes)")
        for rows in (1, 8):
            full = commit_cost(Path(folder), "FULL", rows)
            off = commit_cost(Path(folder), "OFF", rows)
            label = f"{rows} row{'s' if rows > 1 else ''}: FULL {full:.0f}, OFF {off:.0f}"
            _row(label, full - off, "µs/commit for the fsync")
    print(f"measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def _singles(frames: list[bytes], per_commit: int) -> Callable[[WriterBench], float]:
    return lambda bench: bench.per_event(frames, per_commit, 1)


if __name__ == "__main__":
    main()
