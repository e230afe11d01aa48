"""The ``flagstaff consume`` process: connect, keep leases and readers, serve the ops port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from flagstaff.ops import logs
from flagstaff.store.postgres.store import PostgresStore
from flagstaff.stream.client import StreamSpec, connect, ensure_leases, ensure_stream
from flagstaff.stream.consumer import Consumers
from flagstaff.stream.ops_http import OpsServer


async def _open_store(url: str, stop: asyncio.Event) -> PostgresStore | None:
    """The store, once PostgreSQL answers (a consumer may start before it)."""
    while not stop.is_set():
        store = PostgresStore(url)
        try:
            await store.open()
            return store
        except (OSError, Exception) as exc:
            logs.log(logging.WARNING, "PostgreSQL not reachable, retrying", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    return None


async def run(spec: StreamSpec, database_url: str, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    store = await _open_store(database_url, stop)
    if store is None:
        return
    nc = None
    ops: OpsServer | None = None
    try:
        while nc is None and not stop.is_set():
            try:
                nc = await connect(spec, "flagstaff-consume")
                replicas = await ensure_stream(nc, spec)
                kv = await ensure_leases(nc, spec)
            except Exception as exc:
                logs.log(logging.WARNING, "stream not reachable, retrying", error=repr(exc))
                if nc is not None:
                    with contextlib.suppress(Exception):
                        await nc.close()
                nc = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        if nc is None:
            return
        consumers = Consumers(nc, kv, store, spec)
        ops = OpsServer(host, port, consumers.stats, lambda: nc.is_connected, store.ping)
        await ops.start()
        logs.log(
            logging.INFO,
            "consuming",
            shards=spec.shards,
            replicas=replicas,
            member=consumers.member,
            port=port,
        )
        await consumers.run(stop)
    finally:
        if ops is not None:
            await ops.stop()
        if nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 5.0)
        await store.close()
