"""The NATS connection and the stream's definition, shared by capture nodes and consumers."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js import errors as js_errors

from flagstaff.ops import logs
from flagstaff.stream.shards import SUBJECT_PREFIX

STREAM_NAME = "FLAGSTAFF_EVENTS"
LEASES_BUCKET = "flagstaff_shard_leases"
MAX_AGE_SECONDS = 7 * 24 * 3600
"""How long an event waits in the stream for a consumer before it is discarded."""
DUPLICATE_WINDOW_SECONDS = 120
"""Republished batches (same ``Nats-Msg-Id``) inside this window are stored once."""


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """What the stream and its consumers are (``Settings.stream_spec`` builds it)."""

    urls: list[str]
    shards: int
    replicas: int
    """0: automatic (3 with 3 or more servers, else 1)."""
    publish_timeout: float
    lease_seconds: float
    batch: int
    fetch_wait: float = 0.5
    """Seconds one open pull of a reader lasts before it is renewed (a message published
    meanwhile is delivered at once, whatever this is)."""


async def connect(spec: StreamSpec, name: str) -> Client:
    """A connection that reconnects forever (any server of the list, or one it learned of)."""

    async def on_error(exc: Exception) -> None:
        logs.log(logging.WARNING, "stream connection error", error=repr(exc))

    async def on_disconnect() -> None:
        logs.log(logging.WARNING, "stream disconnected, reconnecting")

    return await nats.connect(
        servers=spec.urls,
        name=name,
        connect_timeout=2,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        error_cb=on_error,
        disconnected_cb=on_disconnect,
    )


def server_count(nc: Client, spec: StreamSpec) -> int:
    """Servers of the cluster this connection knows: those configured and those announced."""
    known = {u.netloc for u in nc.servers}
    known.update(u.netloc for u in nc.discovered_servers)
    return max(len(known), len(spec.urls))


def replicas_for(spec: StreamSpec, servers: int) -> int:
    if spec.replicas:
        return spec.replicas
    return 3 if servers >= 3 else 1


async def ensure_stream(nc: Client, spec: StreamSpec, timeout: float = 30.0) -> int:
    """Create the stream, or update it to this configuration; wait for its leader. Returns the
    number of replicas."""
    js = nc.jetstream(timeout=5)
    replicas = replicas_for(spec, server_count(nc, spec))
    config = js_api.StreamConfig(
        name=STREAM_NAME,
        subjects=[f"{SUBJECT_PREFIX}.*"],
        retention=js_api.RetentionPolicy.LIMITS,
        storage=js_api.StorageType.FILE,
        num_replicas=replicas,
        max_age=MAX_AGE_SECONDS,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
    )
    await _retry(lambda: _add_or_update(js, config), timeout)
    await _retry(lambda: _leader(js, STREAM_NAME), timeout)
    return replicas


async def ensure_leases(nc: Client, spec: StreamSpec, timeout: float = 30.0) -> Any:
    """The key-value bucket of the consumers' shard leases (entries expire after the lease)."""
    js = nc.jetstream(timeout=5)
    config = js_api.KeyValueConfig(
        bucket=LEASES_BUCKET,
        history=1,
        ttl=spec.lease_seconds,
        replicas=replicas_for(spec, server_count(nc, spec)),
    )

    async def create() -> Any:
        return await js.create_key_value(config)

    kv = await _retry(create, timeout)
    await _retry(lambda: _leader(js, "KV_" + LEASES_BUCKET), timeout)
    return kv


async def _add_or_update(js: JetStreamContext, config: js_api.StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except js_errors.BadRequestError as exc:
        if exc.err_code != 10058:  # stream name already in use (with another configuration)
            raise
        await js.update_stream(config)


async def _leader(js: JetStreamContext, stream: str) -> None:
    info = await js.stream_info(stream)
    if info.cluster is not None and info.cluster.name and not info.cluster.leader:
        raise _NotYet()


class _NotYet(Exception):
    pass


async def _retry(fn: Any, timeout: float) -> Any:
    """``fn()`` until it succeeds or ``timeout`` passed (a new cluster elects leaders first)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await fn()
        except (_NotYet, nats.errors.Error):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)
