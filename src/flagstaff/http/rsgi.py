"""granian's native interface (RSGI) in front of the same handlers, and ASGI apps behind it.

Under RSGI granian hands the application its request as a Rust object and takes the answer
as one call (``protocol.response_bytes``): no ASGI message dictionaries per request. Measured
by ``python -m bench.floor``, a bare RSGI app answers an 11 KB POST about 1.3-1.8x as often as
the same bare ASGI app here, and the hot public routes are exactly that shape. The management
API stays a starlette (ASGI) app: ``call_asgi`` runs it behind RSGI with the whole body read
first (within the limit), so nothing in it had to change.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from granian.rsgi import ProtocolClosed, ProtocolError

from flagstaff.application.errors import ApiError
from flagstaff.http.asgi import RequestBase, Response, parse_query
from flagstaff.http.limits import LINGER_SECONDS, BodyReaders, BodyTimeout
from flagstaff.ops import logs

JSON_HEADERS = [("content-type", "application/json")]
CLOSE_HEADERS = [*JSON_HEADERS, ("connection", "close")]
"""An answer given before the body was read: the connection is closed after it."""
_TYPES = {b"application/json": "application/json", b"text/plain": "text/plain"}
"""The usual content types, already as text (RSGI takes ``str`` headers)."""


class RsgiRequest(RequestBase):
    """The ``Request`` of the hot handlers, read from an RSGI scope (same attributes); it
    holds the protocol object its body is read from."""

    __slots__ = ("_scope", "protocol")

    def __init__(self, scope: Any, protocol: Any) -> None:
        self._scope = scope
        self.protocol = protocol
        self.method: str = scope.method
        self.path: str = scope.path
        self.body = b""
        self._headers: dict[str, str] | None = None
        self._query: Mapping[str, str] | None = None

    @property
    def headers(self) -> Mapping[str, str]:
        if self._headers is None:
            self._headers = {k.lower(): v for k, v in self._scope.headers.items()}
        return self._headers

    @property
    def query(self) -> Mapping[str, str]:
        if self._query is None:
            self._query = parse_query(self._scope.query_string.encode("latin-1"))
        return self._query

    @property
    def query_string(self) -> str:
        """The raw query string (for parameters that repeat)."""
        return str(self._scope.query_string)

    @property
    def peer(self) -> str | None:
        client = self._scope.client
        if not client:
            return None
        host = client.rsplit(":", 1)[0]
        return host[1:-1] if host.startswith("[") else host


async def read_body(request: RsgiRequest, limit: int, readers: BodyReaders | None = None) -> bytes:
    """The whole request body; 413 as soon as it is known to be larger than ``limit``.

    With ``readers``, as on ASGI (``asgi.read_body``): a wait for body bytes that passes their
    timeout answers 408, and an idle upload can be shed to make room for others. A body of up
    to :data:`ONE_READ` bytes with a declared length is read in one call, so its whole read
    has the timeout; longer ones are read in chunks, each restarting the clock.
    """
    if readers is None:
        return await _read(request, limit, None)
    # granian runs RSGI handlers on its own scheduler, whose task ignores cancel(): the read
    # runs as an asyncio task of its own, which the timeout can cancel.
    return await asyncio.get_running_loop().create_task(_timed_read(request, limit, readers))


async def _timed_read(request: RsgiRequest, limit: int, readers: BodyReaders) -> bytes:
    guard = BodyTimeout(readers, id(request))
    async with guard:
        return await _read(request, limit, guard)


ONE_READ = 64 * 1024


async def _read(request: RsgiRequest, limit: int, guard: BodyTimeout | None) -> bytes:
    protocol = request.protocol
    declared = request._scope.headers.get("content-length")
    try:
        if declared is not None and declared.isdigit():
            size = int(declared)
            if size > limit:
                raise _too_large(limit)
            if size <= ONE_READ:
                return await protocol()
        chunks: list[bytes] = []
        size = 0
        async for chunk in protocol:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if guard is not None:
                guard.readers.progress(guard.id, guard.reader)
    except (ProtocolClosed, ProtocolError):
        raise ApiError(400, "client_disconnected", "the client went away mid-request") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def discard_body(request: RsgiRequest, max_bytes: int) -> int:
    """Read and drop what is left of a request's body after an early answer (the answer is
    on its way meanwhile), for at most :data:`~flagstaff.http.limits.LINGER_SECONDS` and
    ``max_bytes``; returns the bytes read.

    granian keeps reading the request body after the answer was handed over for as long as
    the handler holds the body stream: when the handler returns, the body is dropped and
    hyper closes the connection after one more read, resetting a client still sending.
    """
    protocol = request.protocol
    read = 0

    async def drain() -> None:
        nonlocal read
        with contextlib.suppress(ProtocolError):
            protocol.__aiter__()  # the body was not read at all; else it is streaming already
        while read < max_bytes:
            try:
                chunk = await protocol.__anext__()
            except (StopAsyncIteration, ProtocolClosed, ProtocolError):
                return
            if not chunk:
                return
            read += len(chunk)

    # As for reads (see read_body): a task of its own, which the deadline can cancel.
    task = asyncio.get_running_loop().create_task(drain())
    with contextlib.suppress(TimeoutError, OSError):
        await asyncio.wait_for(task, LINGER_SECONDS)
    return read


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "payload_too_large", f"the request body is larger than {limit} bytes")


def cors_headers(scope: Any) -> list[tuple[str, str]]:
    """Permissive CORS (the RSGI spelling of ``asgi.cors_headers``)."""
    headers = scope.headers
    return [
        ("access-control-allow-origin", headers.get("origin", "*")),
        ("access-control-allow-headers", headers.get("access-control-request-headers", "*")),
        ("vary", "origin"),
        ("access-control-allow-credentials", "true"),
        ("access-control-allow-methods", "GET, POST, OPTIONS"),
        ("access-control-max-age", "86400"),
    ]


def send_response(protocol: Any, response: Response, extra: list[tuple[str, str]] | None) -> None:
    """The answer in one call (the RSGI spelling of ``asgi.send_response``)."""
    content_type = response.content_type
    headers = [("content-type", _TYPES.get(content_type) or content_type.decode("latin-1"))]
    if extra:
        headers.extend(extra)
    if response.headers:
        headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers)
    protocol.response_bytes(response.status, headers, response.body)


def _address(text: str) -> tuple[str, int] | None:
    if not text:
        return None
    host, _, port = text.rpartition(":")
    return (host.strip("[]"), int(port) if port.isdigit() else 0)


async def call_asgi(app: Any, scope: Any, protocol: Any, body: bytes) -> int:
    """Run an ASGI app for one RSGI request whose body was already read; returns the status."""
    asgi_scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": scope.http_version,
        "method": scope.method,
        "scheme": scope.scheme,
        "path": scope.path,
        "raw_path": scope.path.encode("latin-1", "replace"),
        "query_string": scope.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in scope.headers.items()],
        "client": _address(scope.client),
        "server": _address(scope.server),
    }
    sent_body = False
    started = False
    status = 500
    headers: list[tuple[str, str]] = []
    stream: Any = None

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await protocol.client_disconnect()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, headers, stream, started
        if message["type"] == "http.response.start":
            started = True
            status = message["status"]
            headers = [
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])
            ]
            return
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        if stream is None and not more:
            protocol.response_bytes(status, headers, chunk)
            return
        if stream is None:
            stream = protocol.response_stream(status, headers)
        if chunk:
            await stream.send_bytes(chunk)

    try:
        await app(asgi_scope, receive, send)
    except Exception:
        # Starlette re-raises after its error handler has answered; answer only if it did not.
        if not started:
            logs.logger.exception("unhandled error on %s", scope.path)
            body = ApiError(500, "server_error", "the server failed to answer").body()
            protocol.response_bytes(500, JSON_HEADERS, body)
            return 500
    return status
