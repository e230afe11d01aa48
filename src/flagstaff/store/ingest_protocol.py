"""The frames between HTTP workers and the SQLite ingest writer: length-prefixed msgpack.

Request: ``(request id, project id, events, drops)``. Answer: ``(request id, result, error)``,
exactly one of the last two set. msgspec encodes the event structs directly.
"""

from __future__ import annotations

import asyncio
import struct

import msgspec

from flagstaff.ingest.model import Drop, Event
from flagstaff.store.base import IngestResult

HEADER = struct.Struct("!I")
MAX_FRAME = 512 * 1024 * 1024

Request = tuple[int, int, list[Event], list[Drop]]
Answer = tuple[int, IngestResult | None, str | None]

request_encoder = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(Request)
answer_decoder = msgspec.msgpack.Decoder(Answer)


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    header = await reader.readexactly(HEADER.size)
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes is over the limit")
    return await reader.readexactly(size)
