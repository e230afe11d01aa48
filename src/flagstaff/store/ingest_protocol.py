"""The frames between HTTP workers and the SQLite ingest writer: length-prefixed msgpack.

Request: ``(request id, project id, events, drops)``. Answer: ``(request id, result, error)``,
exactly one of the last two set. msgspec encodes the event structs directly.
"""

from __future__ import annotations

import asyncio
import struct

import msgspec
import orjson

from flagstaff.ingest.model import Drop, Event
from flagstaff.ingest.persons import RULE_PROPERTY_KEYS
from flagstaff.store.base import IngestResult

HEADER = struct.Struct("!I")
MAX_FRAME = 512 * 1024 * 1024

Request = tuple[int, int, list[Event], list[Drop]]
Answer = tuple[int, IngestResult | None, str | None]

request_encoder = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(Request)
answer_decoder = msgspec.msgpack.Decoder(Answer)


def for_writer(events: list[Event]) -> list[Event]:
    """The events as the writer needs them: properties as JSON bytes, plus the few keys the
    person and group rules read, so the writer never decodes whole property dicts."""
    out = []
    for e in events:
        props = e.properties
        out.append(
            Event(
                e.uuid,
                e.event,
                e.distinct_id,
                {k: props[k] for k in props if k in RULE_PROPERTY_KEYS},
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


class Outbox:
    """Frames written during one event loop tick leave in one write (one syscall)."""

    __slots__ = ("_frames", "_writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._frames: list[bytes] = []

    def send(self, payload: bytes) -> None:
        if not self._frames:
            asyncio.get_running_loop().call_soon(self._flush)
        self._frames.append(HEADER.pack(len(payload)))
        self._frames.append(payload)

    def _flush(self) -> None:
        frames, self._frames = self._frames, []
        if not self._writer.is_closing():
            self._writer.write(b"".join(frames))


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    header = await reader.readexactly(HEADER.size)
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes is over the limit")
    return await reader.readexactly(size)
