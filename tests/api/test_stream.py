"""Capture through a replicated NATS JetStream stream, and the consumers (issue 31).

These tests start their own 3-server NATS cluster (tests/nats_cluster.py) and their own
PostgreSQL (tests/pg.py's PrivateServer, which they crash and restart), whatever
FLAGSTAFF_TEST_BACKEND says, so both test runs run them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from flagstaff.stream.client import STREAM_NAME
from flagstaff.stream.shards import shard_of
from tests.nats_cluster import NatsCluster
from tests.pg import PrivateServer
from tests.server import PROJECT_TOKEN, Api, Server
from tests.stream_nodes import ConsumerProcess, stream_env

SHARDS = 8


class Stack:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.nats = NatsCluster(3).start()
        self.pg = PrivateServer()
        self.env = stream_env(self.pg.url, self.nats.url, FLAGSTAFF_STREAM_SHARDS=str(SHARDS))
        self.capture = Server(data_dir=root / "capture", env=dict(self.env)).start(timeout=60)
        self.consumers: list[ConsumerProcess] = []

    def consumer(self) -> ConsumerProcess:
        n = len(self.consumers)
        c = ConsumerProcess(self.root / f"consumer{n}.log", dict(self.env)).start()
        self.consumers.append(c)
        return c

    def close(self) -> None:
        for c in self.consumers:
            c.stop()
        self.capture.stop()
        self.nats.stop()
        self.pg.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("stream"))
    try:
        yield s
    finally:
        s.close()


def _sql(url: str, query: str, *args: Any) -> list[Any]:
    async def run() -> list[Any]:
        conn = await asyncpg.connect(url)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    return asyncio.run(run())


def _until(check: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def _event(name: str, distinct_id: str, **props: Any) -> dict[str, Any]:
    return {
        "event": name,
        "uuid": str(uuid.uuid4()),
        "distinct_id": distinct_id,
        "properties": props,
    }


def _batch(url: str, events: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": events}, timeout=30)


def _stored(url: str, uuids: list[str]) -> int:
    rows = _sql(url, "SELECT count(*) FROM events WHERE uuid = ANY($1::uuid[])", uuids)
    return int(rows[0][0])


def test_capture_queues_and_a_consumer_stores_each_event_once(stack: Stack) -> None:
    consumer = stack.consumer()
    events = [_event("$pageview", f"once-{i}", n=i) for i in range(40)]
    r = _batch(stack.capture.url, events)
    assert r.status_code == 200, r.text
    # an SDK retry of the same batch, and a second copy of one event in another request
    assert _batch(stack.capture.url, events).status_code == 200
    assert _batch(stack.capture.url, events[:1]).status_code == 200
    uuids = [e["uuid"] for e in events]
    _until(lambda: _stored(stack.pg.url, uuids) == 40, 20, "the 40 events stored")
    _until(lambda: consumer.ready()["lag"] == 0, 10, "the consumer caught up")
    time.sleep(0.3)
    assert _stored(stack.pg.url, uuids) == 40
    ready = consumer.ready()
    assert ready["status"] == "ok" and ready["shards"] == list(range(SHARDS))
    metrics = consumer.metrics()
    assert metrics["flagstaff_stream_consumer_lag_messages"] == 0
    assert metrics["flagstaff_stream_events_ingested_total"] == 40

    async def stream_replicas() -> int:
        import nats

        nc = await nats.connect(stack.nats.url.split(","))
        try:
            info = await nc.jetstream().stream_info(STREAM_NAME)
            return int(info.config.num_replicas or 0)
        finally:
            await nc.close()

    assert asyncio.run(stream_replicas()) == 3
