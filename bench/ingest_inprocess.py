"""``/batch/`` work in-process, for instruction counts on a shared machine.

The two halves of a 100-event batch's path, without HTTP or sockets, on the events of
``bench.ingest_load``:

- ``worker N``: what an HTTP worker does with N batches: decode the body, the envelope,
  normalise each event, the hand-off (``protocol.for_writer``) and the frame's msgpack;
- ``writer N``: what the SQLite ingest writer does with those N frames: decode, plan (person
  rules, rows; persons cached as in the writer), execute, one transaction per frame, on a
  fresh database (``synchronous=OFF``: instructions, not the disk).

Count each at two sizes; the difference over the extra events is the cost of one event
(start-up cancels out)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m bench.ingest_inprocess worker 20     (then 120)

With ``BENCH_DIGEST=1`` (outside valgrind), ``digest`` must match between trees compared
(the same frames; for ``writer``, the same stored rows); without it nothing is hashed, so the
counts are the path's alone.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

from tests.server import PROJECT_TOKEN

from bench.ingest_load import _EVENT
from flagstaff.http.payload import decode_body
from flagstaff.ingest import normalize
from flagstaff.ingest.model import Envelope, Event
from flagstaff.ingest.normalize import parse_envelope
from flagstaff.store.sqlite import ingest, schema
from flagstaff.store.sqlite.person_cache import PersonCache
from flagstaff.store.sqlite.protocol import for_writer, request_decoder, request_encoder

BATCH = 100
NOW_MS = 1_795_600_000_000
LIMIT = 20 * 1024 * 1024


def bodies(count: int) -> list[bytes]:
    out = []
    n = 0
    for _ in range(count):
        events = []
        for _ in range(BATCH):
            n += 1
            uuid = f"01930001-0000-7000-8001-{n:012x}"
            user = n * 7919 % 10_000
            events.append(_EVENT % (uuid, user, n % 500, n % 500, n, n, n % 500))
        out.append(f'{{"api_key":"{PROJECT_TOKEN}","batch":[{",".join(events)}]}}'.encode())
    return out


def normalized(
    envelope: Envelope, now_ms: int = NOW_MS, ip: str = "127.0.0.1"
) -> tuple[list[Event], int]:
    """The events a worker keeps of an envelope, and how many it dropped: `normalize_batch`,
    or each event alone in a tree before it (to compare commits)."""
    batch = getattr(normalize, "normalize_batch", None)
    if batch is not None:
        events, drops = batch(envelope, now_ms=now_ms, ip=ip, geoip=None)
        return events, len(drops)
    results = [
        normalize.normalize_event(raw, envelope, now_ms=now_ms, ip=ip, geoip=None)
        for raw in envelope.events
    ]
    events = [e for e in results if type(e) is Event]
    return events, len(results) - len(events)


def frame(body: bytes, number: int) -> bytes:
    """The frame a worker sends for one body: decoded, normalised, handed off, msgpack."""
    payload = decode_body(
        body, content_type="application/json", content_encoding=None, query={}, limit=LIMIT
    )
    events, _ = normalized(parse_envelope(payload, {}))
    return request_encoder.encode((number, 1, for_writer(events), []))


def worker(count: int) -> list[bytes]:
    """The frames a worker sends for ``count`` batches."""
    return [frame(body, number) for number, body in enumerate(bodies(count))]


def writer(frames: list[bytes], folder: Path, digest_rows: bool) -> tuple[int, str]:
    """Plan and write ``frames`` as the ingest writer would; returns events stored and, with
    ``digest_rows``, a digest of the stored events and persons (not while counting: the repr
    and SHA-256 of every row were 29% of the writer's count)."""
    db = folder / "flagstaff.sqlite3"
    schema.migrate(db)
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute(
        "INSERT INTO projects (id, uuid, name, api_token, created_at) VALUES (1, 'u', 'b', 't', '')"
    )
    cache = PersonCache()
    ids = ingest.PersonIds()
    stored = 0
    for frame in frames:
        _, project_id, events, drops = request_decoder.decode(frame)
        conn.execute("BEGIN IMMEDIATE")
        plan = ingest.plan_ingest(lambda: conn, project_id, events, drops, NOW_MS, ids, cache)
        stored += ingest.execute_plan(conn, plan).ingested
        conn.execute("COMMIT")
    digest = hashlib.sha256()
    if digest_rows:
        for table in ("events ORDER BY seq", "persons ORDER BY id"):
            for row in conn.execute(f"SELECT * FROM {table}"):
                digest.update(repr(row).encode())
    conn.close()
    return stored, digest.hexdigest()[:16] if digest_rows else "-"


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("worker", "writer"):
        raise SystemExit(__doc__)
    count = int(sys.argv[2])
    if sys.argv[1] == "worker":
        frames = worker(count)
        if os.environ.get("BENCH_DIGEST"):  # not while counting: hashing costs per byte
            print("digest", hashlib.sha256(b"".join(frames)).hexdigest()[:16])
        return
    frames = worker(count)  # built before the writer's part; subtract a `worker N` count
    with tempfile.TemporaryDirectory() as folder:
        stored, digest = writer(frames, Path(folder), bool(os.environ.get("BENCH_DIGEST")))
        print("stored", stored, "digest", digest)


if __name__ == "__main__":
    main()
