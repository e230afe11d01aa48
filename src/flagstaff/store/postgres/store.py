"""The shared store for several nodes: PostgreSQL through an asyncpg pool.

``PostgresStore(url)`` takes ``postgresql://user:password@host:port/database``; the extra
query parameters ``pool_size`` (default 10) and ``ingest_lanes`` (default 1) are read by
:func:`~flagstaff.store.postgres.pool.split_url`. :meth:`PostgresStore.open` runs the
migrations (:mod:`~flagstaff.store.postgres.schema`) under an advisory lock, so nodes may
start together. Every flag, cohort and group type change bumps the project's definitions
version in the same transaction and sends ``NOTIFY flagstaff_definitions, '<project id>'``;
:meth:`PostgresStore.listen_definitions` delivers those to a callback.

Ingestion is group-committed (:mod:`~flagstaff.store.postgres.group_commit`): at most
``ingest_lanes`` transactions run at once, and calls arriving meanwhile are applied together
in the next one (:func:`~flagstaff.store.postgres.ingest.apply_ingest`), retried whole when
it raced another node.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import msgspec

from flagstaff.common import clock
from flagstaff.experiments.exposure import ExperimentSpec
from flagstaff.ingest.model import Drop, Event
from flagstaff.ops import logs
from flagstaff.store.postgres.dialect import PostgresConnection, PostgresDb
from flagstaff.store.postgres.enrollment import EnrollmentMixin
from flagstaff.store.postgres.experiments import recompute_experiment
from flagstaff.store.postgres.group_commit import IngestLanes
from flagstaff.store.postgres.ingest import (
    RETRYABLE,
    Request,
    apply_ingest,
    pg_text,
    without_nul,
)
from flagstaff.store.postgres.pool import POOL_SETTINGS, keep_session, split_url
from flagstaff.store.postgres.retention import RetentionMixin
from flagstaff.store.postgres.schema import migrate
from flagstaff.store.postgres.team_store import TeamStoreMixin
from flagstaff.store.postgres.usage_store import UsageMixin
from flagstaff.store.records import EventQuery, FlagContext, IngestResult, Person, StoredEvent
from flagstaff.store.rows import event_record
from flagstaff.store.sql.db import Db, Tx
from flagstaff.store.sql.methods import ManagementMethods

_decode = msgspec.json.decode

CHANNEL = "flagstaff_definitions"
_INGEST_ATTEMPTS = 20
_LISTEN_CHECK_SECONDS = 30.0

DefinitionsCallback = Callable[[int | None], None]


_EVENT_COLUMNS = (
    "e.seq, e.uuid::text, e.event, e.distinct_id, e.properties, e.timestamp_ms, e.received_ms, "
    "e.historical, p.id, p.uuid::text FROM events e "
    "LEFT JOIN person_distinct_ids d ON d.project_id = e.project_id "
    "AND d.distinct_id = e.distinct_id LEFT JOIN persons p ON p.id = d.person_id"
)

# Everything /flags reads, in one round trip. The CTE is materialised once; the overrides,
# cohorts and groups subqueries run only when asked for.
_FLAG_CONTEXT = """
WITH person AS (
    SELECT p.id, p.properties FROM person_distinct_ids d JOIN persons p ON p.id = d.person_id
    WHERE d.project_id = $1 AND d.distinct_id = $2
)
SELECT
    (SELECT id FROM person),
    (SELECT properties FROM person),
    CASE WHEN $3 THEN (
        SELECT json_object_agg(h.feature_flag_key, h.hash_key) FROM hash_key_overrides h
        WHERE h.project_id = $1 AND h.person_id = (SELECT id FROM person)
    ) END,
    CASE WHEN NOT $4 THEN NULL
         WHEN (SELECT id FROM person) IS NULL THEN ARRAY(
            SELECT m.cohort_id FROM cohort_members m
            WHERE m.project_id = $1 AND m.distinct_id = $2)
         ELSE ARRAY(
            SELECT DISTINCT m.cohort_id FROM person_distinct_ids o
            JOIN cohort_members m ON m.project_id = o.project_id AND m.distinct_id = o.distinct_id
            WHERE o.project_id = $1 AND o.person_id = (SELECT id FROM person))
    END,
    CASE WHEN cardinality($5::int[]) > 0 THEN (
        SELECT json_object_agg(g.group_type_index, g.properties)
        FROM unnest($5::int[], $6::text[]) AS q(i, k)
        JOIN groups g ON g.project_id = $1 AND g.group_type_index = q.i AND g.group_key = q.k
    ) END
"""


def _conn(tx: Tx) -> asyncpg.Connection:
    """The connection behind a shared write's transaction."""
    assert isinstance(tx, PostgresConnection)
    return tx.conn


class PostgresStore(ManagementMethods, TeamStoreMixin, UsageMixin, RetentionMixin, EnrollmentMixin):
    """The :class:`~flagstaff.store.base.Store` on PostgreSQL."""

    def __init__(self, url: str) -> None:
        self.dsn, options = split_url(url)
        self.pool_size = options["pool_size"]
        self.ingest_lanes = min(options["ingest_lanes"], self.pool_size)
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncio.Task[None] | None = None
        self._lanes = IngestLanes(self.ingest_lanes, self._transact)
        self.ingest_retries = 0
        self.ingest_transactions = 0
        self.sql: Db = PostgresDb(lambda: self.pool)

    # lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=min(2, self.pool_size),
            max_size=self.pool_size,
            reset=keep_session,
            server_settings=POOL_SETTINGS,
        )

    async def close(self) -> None:
        await self._lanes.drain()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), 10.0)
            except TimeoutError:
                pool.terminate()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool

    # what the shared management code leaves to the engine ----------------------------

    async def recompute_in(self, tx: Tx, project_id: int, spec: ExperimentSpec) -> int:
        return await recompute_experiment(_conn(tx), project_id, spec)

    async def add_members_in(
        self, tx: Tx, project_id: int, cohort_id: int, members: list[str]
    ) -> None:
        await _add_members(_conn(tx), project_id, cohort_id, [pg_text(d) for d in members])

    async def listen_definitions(self, callback: DefinitionsCallback) -> None:
        """Call ``callback(project_id)`` whenever any node commits a definitions change.

        Returns once listening. A dedicated connection is kept and re-established when lost;
        after a reconnection ``callback(None)`` says changes may have been missed (refresh all).
        The callback runs in the event loop and must not block. Stopped by :meth:`close`.
        """
        if self._listener is not None:
            raise RuntimeError("already listening for definitions changes")
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._listener = asyncio.create_task(self._listen(callback, ready))
        try:
            await ready
        except BaseException:
            self._listener = None
            raise

    async def _listen(self, callback: DefinitionsCallback, ready: asyncio.Future[None]) -> None:
        def notified(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            _deliver(callback, int(payload) if payload.isdigit() else None)

        delay = 0.5
        while True:
            try:
                conn = await asyncpg.connect(self.dsn)
            except (OSError, asyncpg.PostgresError) as exc:
                if not ready.done():
                    ready.set_exception(exc)
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            try:
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, ev=lost: ev.set())
                await conn.add_listener(CHANNEL, notified)
                delay = 0.5
                if ready.done():
                    _deliver(callback, None)
                else:
                    ready.set_result(None)
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), _LISTEN_CHECK_SECONDS)
                    if not lost.is_set():
                        await asyncio.wait_for(conn.execute("SELECT 1"), 10.0)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                logs.logger.warning("definitions listener lost its connection; reconnecting")
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 5.0)

    # what /flags reads -----------------------------------------------------------------

    def answers_version(self) -> int | None:
        return None  # other nodes write persons; nothing here learns of it

    async def flag_context(
        self, project_id: int, distinct_id: str, groups: dict[int, str], *,
        overrides: bool = False, static_cohorts: bool = False,
    ) -> FlagContext:  # fmt: skip
        row = await self.pool.fetchrow(
            _FLAG_CONTEXT,
            project_id,
            pg_text(distinct_id),
            overrides,
            static_cohorts,
            list(groups),
            [pg_text(k) for k in groups.values()],
        )
        person_id, properties, hash_keys, cohort_ids, group_props = row
        return FlagContext(
            _decode(properties) if properties is not None else {},
            _decode(group_props) if group_props is not None else {},
            _decode(hash_keys) if hash_keys is not None else {},
            frozenset(cohort_ids) if cohort_ids else frozenset(),
            person_id,
        )

    async def add_hash_key_overrides(
        self, project_id: int, distinct_id: str, hash_key: str, flag_keys: list[str]
    ) -> None:
        """Store ``hash_key`` for each flag the person has no override for yet."""
        distinct_id = pg_text(distinct_id)
        async with self.pool.acquire() as conn, conn.transaction():
            for _ in range(50):
                person_id = await conn.fetchval(
                    "SELECT person_id FROM person_distinct_ids WHERE project_id = $1 "
                    "AND distinct_id = $2",
                    project_id,
                    distinct_id,
                )
                if person_id is None:
                    return
                # The person row lock keeps a concurrent merge from moving it away meanwhile.
                if await conn.fetchval(
                    "SELECT id FROM persons WHERE id = $1 FOR KEY SHARE", person_id
                ):
                    break
            else:
                return
            await conn.execute(
                "INSERT INTO hash_key_overrides (project_id, person_id, feature_flag_key, "
                "hash_key) SELECT $1, $2, k, $3 FROM unnest($4::text[]) AS k "
                "ON CONFLICT DO NOTHING",
                project_id,
                person_id,
                pg_text(hash_key),
                [pg_text(k) for k in flag_keys],
            )

    # ingestion -------------------------------------------------------------------------

    async def ingest(self, project_id: int, events: list[Event], drops: list[Drop]) -> IngestResult:
        """Store events, person and group changes and warnings in one durable transaction.

        At most ``ingest_lanes`` ingest transactions run at once per store; calls arriving
        meanwhile wait and are then committed together, in arrival order, in one transaction
        (group commit). A group that raced another node is retried whole; a group that fails
        otherwise is retried call by call, so one bad call fails alone.
        """
        return await self._lanes.submit(project_id, Request(without_nul(events), list(drops)))

    async def _transact(self, project_id: int, requests: list[Request]) -> list[IngestResult]:
        for attempt in range(_INGEST_ATTEMPTS):
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    now_ms = clock.now_ms()
                    results = await apply_ingest(conn, project_id, requests, now_ms)
                self.ingest_transactions += 1
                return results
            except RETRYABLE:
                if attempt == _INGEST_ATTEMPTS - 1:
                    raise
                self.ingest_retries += 1
                await asyncio.sleep(random.uniform(0.0, min(0.1, 0.001 * 2**attempt)))
        raise AssertionError("unreachable")

    # read views ------------------------------------------------------------------------

    async def get_person(self, project_id: int, distinct_id: str) -> Person | None:
        row = await self.pool.fetchrow(
            "SELECT p.id, p.uuid::text, p.properties, p.is_identified, p.created_at_ms, "
            "ARRAY(SELECT o.distinct_id FROM person_distinct_ids o WHERE o.person_id = p.id "
            "ORDER BY o.distinct_id) "
            "FROM person_distinct_ids d JOIN persons p ON p.id = d.person_id "
            "WHERE d.project_id = $1 AND d.distinct_id = $2",
            project_id,
            pg_text(distinct_id),
        )
        if row is None:
            return None
        return Person(row[0], row[1], _decode(row[2]), row[3], row[4], list(row[5]))

    async def list_events(self, project_id: int, query: EventQuery) -> list[StoredEvent]:
        """Newest first by timestamp (see :class:`~flagstaff.store.records.EventQuery`)."""
        where = ["e.project_id = $1"]
        args: list[Any] = [project_id]

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if query.distinct_id is not None:
            where.append(f"e.distinct_id = {arg(pg_text(query.distinct_id))}")
        if query.event is not None:
            where.append(f"e.event = {arg(pg_text(query.event))}")
        if query.after_ms is not None:
            where.append(f"e.timestamp_ms > {arg(query.after_ms)}")
        if query.before_ms is not None:
            where.append(f"e.timestamp_ms < {arg(query.before_ms)}")
        if query.cursor is not None:
            where.append(
                f"(e.timestamp_ms, e.seq) < ({arg(query.cursor[0])}, {arg(query.cursor[1])})"
            )
        rows = await self.pool.fetch(
            f"SELECT {_EVENT_COLUMNS} WHERE {' AND '.join(where)} "
            f"ORDER BY e.timestamp_ms DESC, e.seq DESC LIMIT {arg(query.limit)}",
            *args,
        )
        return [event_record(r) for r in rows]

    async def iter_events(
        self, project_id: int, since_ms: int | None, batch: int = 1000
    ) -> AsyncIterator[list[StoredEvent]]:
        """All events with a timestamp at or after ``since_ms``, in storage order, in batches."""
        last_seq = 0
        since = since_ms if since_ms is not None else -(2**62)
        while True:
            rows = await self.pool.fetch(
                f"SELECT {_EVENT_COLUMNS} WHERE e.project_id = $1 AND e.seq > $2 "
                "AND e.timestamp_ms >= $3 ORDER BY e.seq LIMIT $4",
                project_id,
                last_seq,
                since,
                batch,
            )
            if not rows:
                return
            last_seq = rows[-1][0]
            yield [event_record(r) for r in rows]


async def _add_members(
    conn: asyncpg.Connection, project_id: int, cohort_id: int, members: list[str]
) -> None:
    if members:
        await conn.execute(
            "INSERT INTO cohort_members (project_id, cohort_id, distinct_id) "
            "SELECT $1, $2, d FROM unnest($3::text[]) AS d ON CONFLICT DO NOTHING",
            project_id,
            cohort_id,
            members,
        )


def _deliver(callback: DefinitionsCallback, project_id: int | None) -> None:
    try:
        callback(project_id)
    except Exception:
        logs.logger.exception("definitions change callback failed")
