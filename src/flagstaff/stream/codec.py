"""The stream's message: one project's events (and drops) of one shard, as MessagePack."""

from __future__ import annotations

import hashlib

import msgspec

from flagstaff.ingest.model import Drop, Event


class StreamBatch(msgspec.Struct, array_like=True):
    project_id: int
    events: list[Event]
    drops: list[Drop]
    queued_ms: int
    """When capture published it (for the consumers' delay metric)."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(StreamBatch)


def encode(batch: StreamBatch) -> bytes:
    return _encoder.encode(batch)


def decode(data: bytes) -> StreamBatch:
    return _decoder.decode(data)


def message_id(project_id: int, shard: int, events: list[Event], drops: list[Drop]) -> str:
    """JetStream's ``Nats-Msg-Id``: the same for a retried batch (same uuids), so the stream
    keeps one copy of a publish that was retried inside its duplicate window."""
    digest = hashlib.blake2b(digest_size=16)
    for event in events:
        digest.update(event.uuid.encode())
    for drop in drops:
        digest.update(drop.digest.encode())
    return f"{project_id}.{shard}.{digest.hexdigest()}"
