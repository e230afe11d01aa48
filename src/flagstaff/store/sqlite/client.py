"""A worker's connection to the SQLite ingest writer process (see ``ingestd``).

One Unix socket per worker, requests pipelined: each gets a request id, and the connection's
protocol resolves the matching future when the writer answers (after its commit). Frames
queued during one event loop turn leave in one write. A protocol rather than streams: the
round trip is most of a single event's cost in the worker.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import cast

from flagstaff.ingest.model import Drop, Event
from flagstaff.store.records import IngestResult, StoreError
from flagstaff.store.sqlite.protocol import (
    HEADER,
    answer_decoder,
    for_writer,
    request_encoder,
    take_frames,
)


class IngestUnavailable(StoreError):
    """The ingest writer cannot be reached; nothing of the request was committed."""


class _WriterConnection(asyncio.Protocol):
    def __init__(self, pending: dict[int, asyncio.Future[IngestResult]]) -> None:
        self.pending = pending
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._inbox = bytearray()
        self._outbox: list[bytes] = []
        self._resumed: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's transport

    def send(self, payload: bytes) -> None:
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(HEADER.pack(len(payload)))
        self._outbox.append(payload)

    def _flush(self) -> None:
        frames, self._outbox = self._outbox, []
        if self.transport is not None and not self.closed:
            self.transport.write(b"".join(frames))

    async def writable(self) -> None:
        """Wait while the writer is not keeping up with what this worker sends."""
        if self._resumed is not None:
            await asyncio.shield(self._resumed)

    def pause_writing(self) -> None:
        if self._resumed is None:
            self._resumed = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._resumed is not None:
            if not self._resumed.done():
                self._resumed.set_result(None)
            self._resumed = None

    def data_received(self, data: bytes) -> None:
        self._inbox += data
        try:
            frames = take_frames(self._inbox)
        except ValueError:
            self._close()
            return
        for frame in frames:
            try:
                request_id, result, error = answer_decoder.decode(frame)
            except ValueError:
                self._close()
                return
            future = self.pending.pop(request_id, None)
            if future is None or future.done():
                continue
            if error is not None:
                future.set_exception(StoreError(error))
            else:
                future.set_result(result)

    def _close(self) -> None:
        """A frame that cannot be read: the stream is lost; pending requests fail."""
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()
        pending = dict(self.pending)
        self.pending.clear()
        for future in pending.values():
            if not future.done():
                future.set_exception(IngestUnavailable("the ingest writer closed the connection"))


class IngestClient:
    def __init__(self, socket_path: str) -> None:
        self._socket_path = socket_path
        self._connection: _WriterConnection | None = None
        self._ids = itertools.count(1)
        self._connecting = asyncio.Lock()

    async def _connect(self) -> _WriterConnection:
        async with self._connecting:
            if self._connection is not None and not self._connection.closed:
                return self._connection
            pending: dict[int, asyncio.Future[IngestResult]] = {}
            try:
                _, connection = await asyncio.get_running_loop().create_unix_connection(
                    lambda: _WriterConnection(pending), self._socket_path
                )
            except OSError as exc:
                raise IngestUnavailable(f"the ingest writer is not reachable: {exc}") from None
            self._connection = connection
            return connection

    async def ingest(self, project_id: int, events: list[Event], drops: list[Drop]) -> IngestResult:
        connection = self._connection
        if connection is None or connection.closed:
            connection = await self._connect()
        request_id = next(self._ids)
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        connection.pending[request_id] = future
        connection.send(request_encoder.encode((request_id, project_id, for_writer(events), drops)))
        await connection.writable()
        return await future

    async def unreachable(self) -> str | None:
        """Why the writer cannot take events now (None when it can): an open connection, or
        a new one made now (kept for the next request)."""
        connection = self._connection
        if connection is not None and not connection.closed:
            return None
        try:
            await self._connect()
        except IngestUnavailable as exc:
            return str(exc)
        return None

    async def close(self) -> None:
        connection = self._connection
        self._connection = None
        if connection is not None and connection.transport is not None:
            connection.transport.close()
