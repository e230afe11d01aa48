"""Capture's side of the stream: publish an accepted batch, per shard, and wait for the acks.

:meth:`StreamPublisher.ingest` takes the place of ``store.ingest`` in the capture handler (the
:attr:`~flagstaff.server.services.Services.ingest` seam). It returns once JetStream has
acknowledged every shard's message, which with 3 replicas means a majority of the servers
wrote it. Anything else within ``publish_timeout`` (no connection, no stream leader during
an election, a timeout) raises :class:`~flagstaff.stream.errors.StreamUnavailable`: capture
answers 503 with ``Retry-After`` and the SDK sends the batch again; parts already stored
are stored once (the message id, then the consumers' uuid check).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import nats
from nats.aio.client import Client

from flagstaff.common import clock
from flagstaff.ingest.model import Drop, Event
from flagstaff.ops import logs
from flagstaff.store.base import IngestResult
from flagstaff.stream import codec
from flagstaff.stream.client import StreamSpec, connect, ensure_stream
from flagstaff.stream.errors import StreamUnavailable
from flagstaff.stream.shards import ShardPart, split, subject

_RETRY_PAUSE = 0.1


class StreamPublisher:
    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self._nc: Client | None = None
        self._js: nats.js.JetStreamContext | None = None
        self._starting: asyncio.Task[None] | None = None
        self.published = 0

    async def start(self) -> None:
        """Connect and declare the stream; if the cluster is unreachable, keep trying in the
        background (capture answers 503 meanwhile) instead of failing the node's start."""
        try:
            await self._connect()
        except Exception as exc:
            logs.log(logging.WARNING, "stream not reachable at start, retrying", error=repr(exc))
            self._starting = asyncio.create_task(self._connect_forever())

    async def _connect(self) -> None:
        nc = await connect(self.spec, "flagstaff-capture")
        try:
            await ensure_stream(nc, self.spec)
        except BaseException:
            await nc.close()
            raise
        self._nc = nc
        self._js = nc.jetstream(timeout=self.spec.publish_timeout)

    async def _connect_forever(self) -> None:
        while self._nc is None:
            await asyncio.sleep(1.0)
            with contextlib.suppress(Exception):
                await self._connect()

    async def stop(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        if self._nc is not None:
            nc, self._nc = self._nc, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.drain(), 5.0)

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    async def ingest(self, project_id: int, events: list[Event], drops: list[Drop]) -> IngestResult:
        """Queue the batch durably; counts are what was queued (the consumers store it)."""
        js = self._js
        if js is None:
            raise StreamUnavailable("the event stream is not reachable")
        now_ms = clock.now_ms()
        parts = split(events, drops, self.spec.shards)
        deadline = asyncio.get_running_loop().time() + self.spec.publish_timeout
        limit = self._message_limit()
        await asyncio.gather(
            *(self._publish_part(js, project_id, p, now_ms, limit, deadline) for p in parts)
        )
        self.published += len(parts)
        dropped: dict[str, int] = {}
        for drop in drops:
            dropped[drop.reason] = dropped.get(drop.reason, 0) + 1
        return IngestResult(len(events), 0, dropped)

    def _message_limit(self) -> int:
        """The largest message body the servers take, less room for the headers."""
        assert self._nc is not None
        return max(1024, self._nc.max_payload - 4096)

    async def _publish_part(
        self,
        js: nats.js.JetStreamContext,
        project_id: int,
        part: ShardPart,
        now_ms: int,
        limit: int,
        deadline: float,
    ) -> None:
        """One shard's part as one message, or, beyond the servers' message size, as several
        published one after another (so they stay in order on the shard)."""
        for events, drops, data in _pieces(project_id, part, now_ms, limit):
            msg_id = codec.message_id(project_id, part.shard, events, drops)
            await self._publish(js, subject(part.shard), data, msg_id, deadline)

    async def _publish(
        self,
        js: nats.js.JetStreamContext,
        to: str,
        data: bytes,
        msg_id: str,
        deadline: float,
    ) -> None:
        """One message, retried (same id) through reconnections and leader elections until
        ``deadline``."""
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise StreamUnavailable("the event stream did not acknowledge the events in time")
            try:
                await js.publish(to, data, timeout=left, headers={"Nats-Msg-Id": msg_id})
                return
            except (nats.errors.Error, OSError) as exc:
                if deadline - loop.time() <= _RETRY_PAUSE:
                    raise StreamUnavailable(
                        f"the event stream refused the events: {exc!r}"
                    ) from None
                await asyncio.sleep(_RETRY_PAUSE)


def _pieces(
    project_id: int, part: ShardPart, now_ms: int, limit: int
) -> list[tuple[list[Event], list[Drop], bytes]]:
    """``part``'s events and drops in encoded pieces that fit ``limit`` bytes (halving until
    they do; one event alone is sent as it is and refused by the servers if too large)."""
    data = codec.encode(codec.StreamBatch(project_id, part.events, part.drops, now_ms))
    if len(data) <= limit or len(part.events) <= 1:
        return [(part.events, part.drops, data)]
    half = len(part.events) // 2
    first = ShardPart(part.shard, part.events[:half], part.drops)
    second = ShardPart(part.shard, part.events[half:], [])
    return _pieces(project_id, first, now_ms, limit) + _pieces(project_id, second, now_ms, limit)
