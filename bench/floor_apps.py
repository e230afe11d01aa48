"""Bare granian apps that do no work of their own, for ``bench.floor``: what any Python
endpoint of each shape costs on this machine before a line of Flagstaff runs.

Paths (the same in the ASGI and the RSGI app):

- ``GET /get``: a constant 15-byte JSON answer (the shape of ``/_health``);
- ``POST /post``: reads the body, answers a constant JSON object of 11 KB (the size of a
  50-flag ``/flags?v=2`` answer) or of ``FLOOR_ANSWER_BYTES`` when set;
- ``POST /status``: reads the body, answers ``{"status":1}`` (the single-event floor);
- ``POST /roundtrip``: reads the body, sends 8 bytes to an echo process over a Unix socket
  and awaits them back, then answers ``{"status":1}`` (the shape of a single event handed
  to the ingest writer, without decoding, rules, SQLite or fsync).

The echo process (``python -m bench.floor_apps SOCKET_PATH``) sends back what it receives; the
apps find its socket path in ``FLOOR_ECHO_SOCKET``.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
from typing import Any

SMALL = b'{"status":"ok"}'
LARGE = b'{"flags":{' + b",".join(b'"flag-%02d":{"enabled":true}' % i for i in range(50))
LARGE += b"," + b'"x":' + b'"'
LARGE += b"." * (int(os.environ.get("FLOOR_ANSWER_BYTES", "11000")) - len(LARGE) - 3) + b'"}}'
CAPTURED = b'{"status":1}'
_JSON = [(b"content-type", b"application/json")]


class _Echo(asyncio.Protocol):
    """One pipelined connection to the echo process: replies come back in order."""

    def __init__(self) -> None:
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self._inbox = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._inbox += len(data)
        while self._inbox >= 8 and self.waiting:
            self._inbox -= 8
            self.waiting.popleft().set_result(None)


_echo: _Echo | None = None


async def _round_trip() -> None:
    global _echo
    if _echo is None:
        loop = asyncio.get_running_loop()
        _, _echo = await loop.create_unix_connection(_Echo, os.environ["FLOOR_ECHO_SOCKET"])
    future = asyncio.get_running_loop().create_future()
    _echo.waiting.append(future)
    assert _echo.transport is not None
    _echo.transport.write(b"12345678")
    await future


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[-1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    path = scope["path"]
    if path == "/get":
        body = SMALL
    else:
        while True:
            message = await receive()
            if not message.get("more_body"):
                break
        if path == "/roundtrip":
            await _round_trip()
            body = CAPTURED
        elif path == "/status":
            body = CAPTURED
        else:
            body = LARGE
    await send({"type": "http.response.start", "status": 200, "headers": _JSON})
    await send({"type": "http.response.body", "body": body})


_RSGI_JSON = [("content-type", "application/json")]


class RSGIApp:
    async def __call__(self, scope: Any, protocol: Any) -> None:
        path = scope.path
        if path == "/get":
            protocol.response_bytes(200, _RSGI_JSON, SMALL)
            return
        await protocol()
        if path == "/roundtrip":
            await _round_trip()
            protocol.response_bytes(200, _RSGI_JSON, CAPTURED)
        elif path == "/status":
            protocol.response_bytes(200, _RSGI_JSON, CAPTURED)
        else:
            protocol.response_bytes(200, _RSGI_JSON, LARGE)


rsgi_app = RSGIApp()


class _EchoServer(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def _serve_echo(socket_path: str) -> None:
    server = await asyncio.get_running_loop().create_unix_server(_EchoServer, socket_path)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve_echo(sys.argv[1]))
