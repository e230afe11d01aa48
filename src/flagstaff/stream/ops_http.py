"""The consume process's small HTTP port: ``/_health``, ``/_ready`` and ``/metrics``.

``/_ready`` answers 200 when the stream and PostgreSQL are reachable, 503 otherwise, with
the lag (messages not yet applied, all shards) and the shards this process reads in both.
The readers apply large transactions on the same event loop, so an answer can take a moment
while one is being prepared.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import msgspec

from flagstaff.ops.metrics import render_consumer
from flagstaff.stream.consumer import ConsumerStats

Ping = Callable[[], Awaitable[bool]]


class OpsServer:
    def __init__(
        self, host: str, port: int, stats: ConsumerStats, stream_ok: Callable[[], bool], db_ok: Ping
    ) -> None:
        self.host = host
        self.port = port
        self.stats = stats
        self.stream_ok = stream_ok
        self.db_ok = db_ok
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0].rstrip("/") if len(parts) > 1 else ""
            status, body, kind = await self._answer(path)
            head = (
                f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                f"content-type: {kind}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _db_ok(self) -> bool:
        """PostgreSQL answers: a commit just worked, else a ping (the readers may hold every
        pooled connection for a while: a ping that waits that long counts as an answer)."""
        stats = self.stats
        if stats.store_failing:
            return False
        if time.monotonic() - stats.last_commit < 5.0:
            return True
        try:
            return await asyncio.wait_for(self.db_ok(), 3.0)
        except TimeoutError:
            return not stats.store_failing

    async def _answer(self, path: str) -> tuple[int, bytes, str]:
        json = "application/json"
        if path == "/_health":
            return 200, b'{"status":"ok"}', json
        if path == "/metrics":
            text = render_consumer(msgspec.to_builtins(self.stats))
            return 200, text.encode(), "text/plain; version=0.0.4; charset=utf-8"
        if path == "/_ready":
            stream = self.stream_ok()
            db = await self._db_ok()
            ok = stream and db
            body = {
                "status": "ok" if ok else "unavailable",
                "stream": "ok" if stream else "unavailable",
                "store": "ok" if db else "unavailable",
                "lag": self.stats.lag,
                "shards": self.stats.shards,
            }
            return (200 if ok else 503), msgspec.json.encode(body), json
        return 404, b'{"type":"invalid_request","code":"not_found","detail":"no such path"}', json
