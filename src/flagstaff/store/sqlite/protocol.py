"""The frames between HTTP workers and the SQLite ingest writer: length-prefixed msgpack.

Request: ``(request id, project id, events, drops)``. Answer: ``(request id, result, error)``,
exactly one of the last two set. msgspec encodes the event structs directly.
"""

from __future__ import annotations

import struct

import msgspec
import orjson

from flagstaff.ingest.flag_usage import USAGE_PROPERTY_KEYS
from flagstaff.ingest.model import Drop, Event
from flagstaff.ingest.persons import RULE_PROPERTY_KEYS
from flagstaff.store.records import IngestResult

HEADER = struct.Struct("!I")
MAX_FRAME = 512 * 1024 * 1024

Request = tuple[int, int, list[Event], list[Drop]]
Answer = tuple[int, IngestResult | None, str | None]

request_encoder = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(Request)
answer_decoder = msgspec.msgpack.Decoder(Answer)

WRITER_PROPERTY_KEYS = RULE_PROPERTY_KEYS | USAGE_PROPERTY_KEYS
"""The event properties the writer reads: the person and group rules', flag usage's."""


def take_frames(inbox: bytearray) -> list[bytes]:
    """Remove the complete frames at the start of ``inbox`` and return their payloads.

    Raises ValueError for a frame announced over :data:`MAX_FRAME`.
    """
    frames: list[bytes] = []
    offset, size, end = 0, HEADER.size, len(inbox)
    while end - offset >= size:
        (length,) = HEADER.unpack_from(inbox, offset)
        if length > MAX_FRAME:
            raise ValueError(f"frame of {length} bytes is over the limit")
        if end - offset - size < length:
            break
        frames.append(bytes(inbox[offset + size : offset + size + length]))
        offset += size + length
    if offset:
        del inbox[:offset]
    return frames


def for_writer(events: list[Event]) -> list[Event]:
    """The events as the writer needs them: properties as JSON bytes, plus the few keys the
    person and group rules and flag usage read, so the writer never decodes whole property
    dicts."""
    out = []
    for e in events:
        props = e.properties
        out.append(
            Event(
                e.uuid,
                e.event,
                e.distinct_id,
                {k: props[k] for k in props if k in WRITER_PROPERTY_KEYS},
                e.timestamp_ms,
                e.received_ms,
                e.set,
                e.set_once,
                e.unset,
                e.process_person,
                e.historical,
                e.properties_json if e.properties_json is not None else orjson.dumps(props),
            )
        )
    return out
