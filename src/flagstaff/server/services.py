"""What one worker's handlers share: settings, the store (chosen by :func:`make_store`), the
change counter, caches, quotas, metrics and GeoIP."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from flagstaff.experiments.warm import warm_results
from flagstaff.ingest.model import Drop, Event
from flagstaff.ops import logs
from flagstaff.ops.metrics import Metrics, MetricsFiles
from flagstaff.server.answers import AnswerCache
from flagstaff.server.caches import DefinitionsCache, ProjectCache, SurveysCache
from flagstaff.server.config import Settings
from flagstaff.server.disk import data_volume, reserve_reason
from flagstaff.server.draining import DRAINING
from flagstaff.server.flag_reads import FlagReads
from flagstaff.server.geoip import GeoIP, open_geoip
from flagstaff.server.guardrail_watch import guardrail_loop
from flagstaff.server.jobs import scheduled_changes_loop
from flagstaff.server.quotas import Quotas
from flagstaff.server.readiness import Readiness
from flagstaff.server.retention import retention_loop
from flagstaff.server.webhook_delivery import deliveries_loop
from flagstaff.store.base import IngestResult, Store
from flagstaff.store.changes import ChangeCounter


def sqlite_path(settings: Settings) -> Path | None:
    """The SQLite store's file, or None on PostgreSQL."""
    url = settings.database_url
    if url is not None and url.startswith(("postgres://", "postgresql://")):
        return None
    if url is not None and url.startswith("sqlite://"):
        return Path(url.removeprefix("sqlite://"))
    return settings.sqlite_path


if TYPE_CHECKING:
    from flagstaff.stream.publisher import StreamPublisher

Ingest = Callable[[int, list[Event], list[Drop]], Awaitable[IngestResult]]


def make_store(settings: Settings) -> Store:
    path = sqlite_path(settings)
    if path is None:
        from flagstaff.store.postgres.store import PostgresStore

        return PostgresStore(settings.database_url or "")
    from flagstaff.store.sqlite.store import SQLiteStore

    return SQLiteStore(
        path,
        ingest_socket=settings.ingest_socket,
        mmap_mb=settings.sqlite_mmap_mb,
        context_cache_mb=settings.flag_context_cache_mb,
    )


class Services:
    def __init__(self, settings: Settings, store: Store | None = None) -> None:
        self.settings = settings
        self.store: Store = store or make_store(settings)
        self.metrics = Metrics()
        self.metrics_files = MetricsFiles(settings.data_dir / "metrics")
        self.changes = ChangeCounter(settings.data_dir)
        """Bumped by every management write; read by the caches on every request."""
        self.projects = ProjectCache(self.store, self.changes)
        self.definitions = DefinitionsCache(
            self.store, settings.definitions_refresh_seconds, self.changes
        )
        self.answers: AnswerCache | None = (
            AnswerCache(settings.flags_answer_cache_mb * 1024 * 1024)
            if settings.flags_answer_cache_mb
            else None
        )
        """Whole /flags answers for repeated requests (``server/answers.py``)."""
        self.surveys = SurveysCache(self.store, settings.definitions_refresh_seconds, self.changes)
        self.quotas = Quotas(
            settings.flag_quota_per_minute, settings.event_quota_per_minute, settings.workers
        )
        self.flag_reads = FlagReads(self.store)
        """OFREP's reads of one flag, recorded as $feature_flag_called."""
        self.readiness = Readiness()
        """What ``/_ready`` checks; see :mod:`flagstaff.server.readiness`."""
        if settings.stream_url is None:  # capture through a stream goes on without the database
            self.readiness.add("database", self._database_ready)
        self.readiness.add("shutdown", DRAINING.check)
        ingest_client = getattr(self.store, "ingest_client", None)
        if ingest_client is not None:
            self.readiness.add("ingest_writer", ingest_client.unreachable)
        self.disk = data_volume(sqlite_path(settings), settings.disk_reserve_mb)
        """The free-space reserve of the store's volume (none on PostgreSQL)."""
        self.readiness.add("disk_reserve", self._disk_ready)
        self.geoip: GeoIP | None = None
        self.stream: StreamPublisher | None = None
        self.ingest: Ingest = self.store.ingest
        """Where capture hands accepted events: the store, or the stream's publisher."""
        if settings.stream_url is not None:
            from flagstaff.stream.publisher import StreamPublisher

            self.stream = StreamPublisher(settings.stream_spec())
            self.ingest = self.stream.ingest
            self.readiness.add("stream", self._stream_ready)
        self._flusher: asyncio.Task[Any] | None = None
        self._metrics_write: asyncio.Future[None] | None = None
        self._jobs: asyncio.Task[Any] | None = None
        self._webhooks: asyncio.Task[Any] | None = None
        self._warm: asyncio.Task[Any] | None = None
        self._retention: asyncio.Task[Any] | None = None
        self._guardrails: asyncio.Task[Any] | None = None

    async def _disk_ready(self) -> str | None:
        return reserve_reason(self.disk)

    async def _stream_ready(self) -> str | None:
        assert self.stream is not None
        return None if self.stream.connected else "the event stream is not reachable"

    async def _database_ready(self) -> str | None:
        if await self.store.ping():
            return None
        return "the database is not reachable"

    def geoip_lookup(self, ip: str) -> dict[str, Any]:
        if self.geoip is None:
            return {}
        return self.geoip.lookup(ip)

    async def start(self) -> None:
        await self.store.open()
        await self.store.listen_definitions(self._changed_elsewhere)
        if self.stream is not None:
            await self.stream.start()
        if not self.settings.geoip_disable:
            self.geoip = open_geoip(self.settings.geoip_path)
        self._flusher = asyncio.create_task(self._flush_metrics())
        self._jobs = asyncio.create_task(scheduled_changes_loop(self.store, self.changes.bump))
        self._webhooks = asyncio.create_task(
            deliveries_loop(self.store, self.settings.retry_delays_s)
        )
        self._warm = asyncio.create_task(self._warm_experiments())
        self._retention = asyncio.create_task(
            retention_loop(self.store, self.settings.retention_check_seconds)
        )
        self._guardrails = asyncio.create_task(
            guardrail_loop(self.store, self.changes.bump, self.settings.guardrail_check_seconds)
        )
        # What start-up built (modules, routes, the app) lives as long as the worker: leave it
        # out of the cyclic collector's full passes, which the caches' turnover sets off every
        # few thousand cold /flags requests (a pass over ~50,000 objects stalls the worker for
        # tens of milliseconds; see docs/benchmarks.md, issue 39).
        gc.freeze()

    async def _warm_experiments(self) -> None:
        """If the server has experiments, import the results module in a thread now, so that
        the worker's first results request does not wait for it (nor the event loop)."""
        try:
            if await self.store.has_experiments():
                warm_results()
        except Exception:
            logs.logger.warning("could not check for experiments", exc_info=True)

    def _changed_elsewhere(self, project_id: int | None) -> None:
        """Another node changed definitions (or the listener reconnected and may have missed
        some): every worker of this node re-checks on its next request."""
        self.changes.bump()

    async def stop(self) -> None:
        for job in (self._jobs, self._webhooks, self._warm, self._retention, self._guardrails):
            if job is not None:
                job.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await job
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if self._metrics_write is not None:
            # A snapshot still being written must not replace the final one written below.
            await asyncio.wait([self._metrics_write])
        if self.stream is not None:
            await self.stream.stop()
        await self.store.close()
        with contextlib.suppress(OSError):
            self.metrics_files.write(self.metrics, force=True)
        if self.geoip is not None:
            self.geoip.close()
        self.changes.close()

    async def _flush_metrics(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            # The snapshot is taken here; the file calls, which can wait on a busy disk, run
            # on a thread so that they never hold up the requests on the event loop.
            snapshot = msgspec.json.encode(self.metrics.snapshot())
            self._metrics_write = asyncio.ensure_future(
                asyncio.to_thread(self.metrics_files.write_encoded, snapshot)
            )
            with contextlib.suppress(OSError):
                await asyncio.shield(self._metrics_write)
