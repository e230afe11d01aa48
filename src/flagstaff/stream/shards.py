"""Which shard an event goes to, and a capture batch split per shard (pure).

A person's events must stay in order, so the shard is a stable hash (CRC-32) of the distinct
id: the same in every process and release. A merge whose two ids hash to different shards is
applied by whichever consumer reads it; the PostgreSQL transaction's locks order it against
the other shard's writes (see :mod:`flagstaff.store.postgres.ingest`).
"""

from __future__ import annotations

import zlib

import msgspec

from flagstaff.ingest.model import Drop, Event

SUBJECT_PREFIX = "flagstaff.events"
DEAD_LETTER_SUBJECT = f"{SUBJECT_PREFIX}.dead"
"""Messages the consumers could not apply (in the same stream, read by no shard consumer)."""


def shard_of(distinct_id: str, shards: int) -> int:
    return zlib.crc32(distinct_id.encode("utf-8", "surrogatepass")) % shards


def subject(shard: int) -> str:
    return f"{SUBJECT_PREFIX}.{shard}"


class ShardPart(msgspec.Struct):
    """The events of one capture batch that fall on one shard, in their order in the batch."""

    shard: int
    events: list[Event]
    drops: list[Drop]


def split(events: list[Event], drops: list[Drop], shards: int) -> list[ShardPart]:
    """``events`` per shard, keeping their relative order; the drops (warnings only) ride
    with the first part, or alone on shard 0 when no event was accepted."""
    if shards == 1 or not events:
        return [ShardPart(0, events, drops)] if events or drops else []
    parts: dict[int, ShardPart] = {}
    for event in events:
        n = shard_of(event.distinct_id, shards)
        part = parts.get(n)
        if part is None:
            part = parts[n] = ShardPart(n, [], [])
        part.events.append(event)
    out = list(parts.values())
    out[0].drops.extend(drops)
    return out
