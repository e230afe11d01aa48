"""The thin request/response layer of the hot endpoints (starlette serves the rest).

Measured under granian on this machine, a bare ASGI handler answers about twice the requests
per second of the same handler behind starlette's router, so /flags and the capture routes
take this path; see docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from flagstaff.application.errors import ApiError
from flagstaff.http.limits import LINGER_SECONDS, BodyReaders, BodyTimeout

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

CORS_HEADERS: list[tuple[bytes, bytes]] = [
    (b"access-control-allow-credentials", b"true"),
    (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
    (b"access-control-max-age", b"86400"),
]
_JSON = b"application/json"
_encode = msgspec.json.encode


class RequestBase:
    """What the request types of both interfaces (this ASGI one, ``rsgi.RsgiRequest``) derive
    the same way from their headers."""

    __slots__ = ("_headers", "_query", "body", "method", "path")
    _headers: dict[str, str] | None

    @property
    def headers(self) -> Mapping[str, str]:
        raise NotImplementedError

    @property
    def forwarded_for(self) -> str | None:
        """``X-Forwarded-For``, or the ``http_x_forwarded_for`` header some proxies send."""
        headers: Mapping[str, str] | None = self._headers
        if headers is None:  # parsed already on the hot routes: skip a second property call
            headers = self.headers
        return headers.get("x-forwarded-for") or headers.get("http_x_forwarded_for")


class Request(RequestBase):
    """What a handler needs from one HTTP request; headers and query are parsed on demand."""

    __slots__ = ("scope",)

    def __init__(self, scope: Scope, body: bytes) -> None:
        self.scope = scope
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.body = body
        self._headers: dict[str, str] | None = None
        self._query: Mapping[str, str] | None = None

    @property
    def headers(self) -> Mapping[str, str]:
        if self._headers is None:
            self._headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self.scope["headers"]
            }
        return self._headers

    @property
    def query(self) -> Mapping[str, str]:
        if self._query is None:
            self._query = parse_query(self.scope.get("query_string", b""))
        return self._query

    @property
    def query_string(self) -> str:
        """The raw query string (for parameters that repeat)."""
        return str(self.scope.get("query_string", b"").decode("latin-1"))

    @property
    def peer(self) -> str | None:
        client = self.scope.get("client")
        return client[0] if client else None


_CACHED_QUERY_BYTES = 256
"""Longer query strings are parsed each time: the cache holds at most 1,024 x 256 bytes."""


def parse_query(raw: bytes) -> Mapping[str, str]:
    """A query string's parameters (the short ones memoised); callers must not modify it."""
    if not raw:
        return {}
    if len(raw) <= _CACHED_QUERY_BYTES:
        return _parse_query(raw)
    return _parse_query.__wrapped__(raw)


@functools.lru_cache(maxsize=1024)
def _parse_query(raw: bytes) -> dict[str, str]:
    """Memoised: SDKs send the same few short query strings (``v=2``, ``compression=gzip-js``,
    ``ip=1&_=<ms>&ver=...``). Callers must not modify the returned mapping."""
    return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))


class Response:
    __slots__ = ("body", "content_type", "headers", "linger", "status")

    def __init__(
        self,
        body: bytes,
        status: int = 200,
        content_type: bytes = _JSON,
        headers: list[tuple[bytes, bytes]] | None = None,
        linger: int = 0,
    ) -> None:
        self.body = body
        self.status = status
        self.content_type = content_type
        self.headers = headers
        self.linger = linger
        """Body bytes still to read and discard once this answer is sent (an early answer:
        see :data:`flagstaff.http.limits.LINGER_SECONDS`)."""


def json_response(data: Any, status: int = 200) -> Response:
    return Response(_encode(data), status)


async def read_body(receive: Receive, limit: int, readers: BodyReaders | None = None) -> bytes:
    """The whole request body; 413 as soon as it grows past ``limit``.

    With ``readers``, every wait for body bytes has their timeout (408 when it passes) and an
    idle upload can be shed to make room for others (see :mod:`flagstaff.http.limits`).
    """
    if readers is None:
        return await _read_chunks(receive, limit, None)
    guard = BodyTimeout(readers, id(receive))
    async with guard:
        return await _read_chunks(receive, limit, guard)


async def _read_chunks(receive: Receive, limit: int, guard: BodyTimeout | None) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "client_disconnected", "the client went away mid-request")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise ApiError(
                    413, "payload_too_large", f"the request body is larger than {limit} bytes"
                )
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
        if guard is not None:
            guard.readers.progress(guard.id, guard.reader)
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


async def discard_body(receive: Receive, max_bytes: int) -> int:
    """Read and drop what is left of a request's body after an early answer, for at most
    :data:`~flagstaff.http.limits.LINGER_SECONDS` and ``max_bytes``; returns the bytes read."""
    read = 0

    async def drain() -> None:
        nonlocal read
        while read < max_bytes:
            message = await receive()
            if message["type"] != "http.request":
                return
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError, OSError):
        await asyncio.wait_for(drain(), LINGER_SECONDS)
    return read


def cors_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """Permissive CORS: echo the origin (credentials allowed) and the requested headers."""
    origin = b"*"
    requested = b"*"
    for name, value in scope["headers"]:
        if name == b"origin":
            origin = value
        elif name == b"access-control-request-headers":
            requested = value
    return [
        (b"access-control-allow-origin", origin),
        (b"access-control-allow-headers", requested),
        (b"vary", b"origin"),
        *CORS_HEADERS,
    ]


async def send_response(
    send: Send, response: Response, extra: list[tuple[bytes, bytes]] | None
) -> None:
    headers = [(b"content-type", response.content_type)]
    if extra:
        headers.extend(extra)
    if response.headers:
        headers.extend(response.headers)
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
