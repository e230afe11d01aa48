"""A worker's connection to the SQLite ingest writer process (see ``sqlite_ingestd``).

One Unix socket per worker, requests pipelined: each gets a request id, and a reader task
resolves the matching future when the writer answers (after its commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from flagstaff.ingest.model import Drop, Event
from flagstaff.store.base import IngestResult, StoreError
from flagstaff.store.ingest_protocol import (
    Outbox,
    answer_decoder,
    for_writer,
    read_frame,
    request_encoder,
)


class IngestUnavailable(StoreError):
    """The ingest writer cannot be reached; nothing of the request was committed."""


class IngestClient:
    def __init__(self, socket_path: str) -> None:
        self._socket_path = socket_path
        self._writer: asyncio.StreamWriter | None = None
        self._outbox: Outbox | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[IngestResult]] = {}
        self._ids = itertools.count(1)
        self._connecting = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                reader, writer = await asyncio.open_unix_connection(self._socket_path)
            except OSError as exc:
                raise IngestUnavailable(f"the ingest writer is not reachable: {exc}") from None
            self._writer = writer
            self._outbox = Outbox(writer)
            self._reader_task = asyncio.create_task(self._read_answers(reader))
            return writer

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                request_id, result, error = answer_decoder.decode(await read_frame(reader))
                future = self._pending.pop(request_id, None)
                if future is None or future.done():
                    continue
                if error is not None:
                    future.set_exception(StoreError(error))
                else:
                    future.set_result(result)  # type: ignore[arg-type]
        except (asyncio.IncompleteReadError, OSError, ValueError):
            pass
        finally:
            self._fail_pending("the ingest writer closed the connection")
            if self._writer is not None:
                self._writer.close()
            self._writer = None

    def _fail_pending(self, message: str) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(IngestUnavailable(message))

    async def ingest(self, project_id: int, events: list[Event], drops: list[Drop]) -> IngestResult:
        writer = self._writer
        if writer is None or writer.is_closing():
            writer = await self._connect()
        assert self._outbox is not None
        request_id = next(self._ids)
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._outbox.send(
            request_encoder.encode((request_id, project_id, for_writer(events), drops))
        )
        await writer.drain()
        return await future

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
