"""Writing stream batches to PostgreSQL: the direct path's transaction, minus what is stored.

A consumer hands over the batches it read from one shard, in stream order. They are applied
in one transaction per call, per project in project order, by
:func:`~flagstaff.store.postgres.ingest.apply_ingest`: the same locks, person and group
rules, event insert and aggregates as a capture node writing directly. Before the rules run,
events whose uuid is stored already are taken out, with their person and group effects:
such an event was applied by an earlier transaction (a batch redelivered after a consumer
died between commit and acknowledgement, or an SDK retry of an acknowledged batch), so a
redelivery changes nothing, and an older ``$set`` replayed cannot overwrite a newer one.
"""

from __future__ import annotations

import asyncio
import random

import asyncpg
import msgspec

from flagstaff.common import clock
from flagstaff.ingest.model import Event
from flagstaff.store.postgres.ingest import RETRYABLE, Request, apply_ingest, without_nul
from flagstaff.store.postgres.store import PostgresStore
from flagstaff.stream.codec import StreamBatch

ATTEMPTS = 20
"""Tries of a transaction that raced another consumer (unique violation, deadlock)."""

_KNOWN = "SELECT uuid::text FROM event_uuids WHERE project_id = $1 AND uuid = ANY($2::uuid[])"
"""Uuids of ``$2`` stored already: read from ``event_uuids``, whose primary key is
``(project_id, uuid)``. The events table itself has no uuid index since it is partitioned by
time (migration 0121): a join on it scanned every stored event in each transaction, which
made the consumer's transactions, and so the ``$set`` to ``/flags`` delay, grow with the
table."""


class Applied(msgspec.Struct):
    """What one call stored."""

    ingested: int = 0
    duplicates: int = 0
    """Events skipped: their uuid was stored already."""
    dropped: int = 0
    retries: int = 0


async def apply_batches(store: PostgresStore, batches: list[StreamBatch]) -> Applied:
    """Apply ``batches`` (one shard's, in stream order) in one transaction; retried on races.

    Raises what PostgreSQL raised otherwise (the caller keeps the batches and tries again).
    """
    by_project: dict[int, list[Request]] = {}
    for batch in batches:
        by_project.setdefault(batch.project_id, []).append(
            Request(without_nul(batch.events), list(batch.drops))
        )
    retries = 0
    for attempt in range(ATTEMPTS):
        try:
            async with store.pool.acquire() as conn, conn.transaction():
                applied = await _apply(conn, by_project)
            applied.retries = retries
            return applied
        except RETRYABLE:
            if attempt == ATTEMPTS - 1:
                raise
            retries += 1
            await asyncio.sleep(random.uniform(0.0, min(0.1, 0.001 * 2**attempt)))
    raise AssertionError("unreachable")


async def _apply(conn: asyncpg.Connection, by_project: dict[int, list[Request]]) -> Applied:
    now_ms = clock.now_ms()
    applied = Applied()
    for project_id in sorted(by_project):
        requests, skipped = await _unseen(conn, project_id, by_project[project_id])
        applied.duplicates += skipped
        if not requests:
            continue
        for result in await apply_ingest(conn, project_id, requests, now_ms):
            applied.ingested += result.ingested
            applied.duplicates += result.duplicates
            applied.dropped += sum(result.dropped.values())
    return applied


async def _unseen(
    conn: asyncpg.Connection, project_id: int, requests: list[Request]
) -> tuple[list[Request], int]:
    """``requests`` without the events whose uuid is stored already; how many were taken out."""
    uuids = [e.uuid for r in requests for e in r.events]
    if not uuids:
        return requests, 0
    known = {row[0] for row in await conn.fetch(_KNOWN, project_id, uuids)}
    if not known:
        return requests, 0
    out: list[Request] = []
    skipped = 0
    for request in requests:
        events: list[Event] = [e for e in request.events if e.uuid not in known]
        skipped += len(request.events) - len(events)
        if events or request.drops:
            out.append(Request(events, request.drops))
    return out, skipped
