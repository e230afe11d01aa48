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
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import msgspec

from flagstaff.accounts import keys
from flagstaff.accounts.api_keys import key_prefix
from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.ingest.model import Drop, Event
from flagstaff.ops import logs
from flagstaff.store.base import (
    Conflict,
    Definitions,
    FlagContext,
    Group,
    IngestResult,
    NotFound,
    Page,
    Person,
    PersonalKey,
    Project,
    StoredEvent,
)
from flagstaff.store.postgres.accounts import PostgresAccounts, write_change
from flagstaff.store.postgres.approvals import ApprovalMethods
from flagstaff.store.postgres.enrollment import EnrollmentMixin
from flagstaff.store.postgres.experiment_reads import ExperimentReadsMixin
from flagstaff.store.postgres.experiment_store import ExperimentsMixin
from flagstaff.store.postgres.flag_writes import write_flag
from flagstaff.store.postgres.group_commit import IngestLanes
from flagstaff.store.postgres.ingest import (
    BUMP_DEFINITIONS,
    RETRYABLE,
    Request,
    apply_ingest,
    pg_text,
    without_nul,
)
from flagstaff.store.postgres.pool import POOL_SETTINGS, keep_session, split_url
from flagstaff.store.postgres.schema import migrate
from flagstaff.store.postgres.surveys import SurveyMethods
from flagstaff.store.postgres.team_store import TeamStoreMixin
from flagstaff.store.postgres.usage_store import UsageMixin
from flagstaff.store.postgres.webhooks import WebhookMethods
from flagstaff.store.rows import (
    COHORT_COLUMNS,
    FLAG_COLUMNS,
    GROUP_COLUMNS,
    PERSONAL_KEY_COLUMNS,
    PROJECT_COLUMNS,
    WARNING_COLUMNS,
    cohort_body,
    cohort_record,
    definitions_record,
    event_record,
    flag_record,
    group_record,
    group_type_change,
    json_text,
    now_iso,
    warning_record,
)

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


async def _flag_in(conn: asyncpg.Connection, flag_id: int) -> dict[str, Any]:
    return flag_record(
        await conn.fetchrow(f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE id = $1", flag_id)
    )


async def _cohort_in(conn: asyncpg.Connection, cohort_id: int) -> dict[str, Any]:
    return cohort_record(
        await conn.fetchrow(f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE id = $1", cohort_id)
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _log_cohort(
    conn: asyncpg.Connection,
    project_id: int,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    source: ChangeSource | None,
) -> None:
    await write_change(
        conn,
        project_id=project_id,
        scope=Scope.COHORT,
        item_id=after["id"],
        source=source,
        before=before,
        after=after,
        now_ms=_now_ms(),
    )


class PostgresStore(
    PostgresAccounts,
    SurveyMethods,
    ExperimentsMixin,
    TeamStoreMixin,
    EnrollmentMixin,
    ExperimentReadsMixin,
    ApprovalMethods,
    WebhookMethods,
    UsageMixin,
):
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

    async def ping(self) -> bool:
        try:
            return await self.pool.fetchval("SELECT 1") == 1
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return False

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

    # projects and keys -----------------------------------------------------------------

    async def create_project(self, name: str, api_token: str | None = None) -> Project:
        token = api_token or keys.new_project_token()
        project_uuid = str(uuid.uuid4())
        created = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            try:
                project_id = await conn.fetchval(
                    "INSERT INTO projects (uuid, name, api_token, created_at) "
                    "VALUES ($1, $2, $3, $4) RETURNING id",
                    project_uuid,
                    pg_text(name),
                    token,
                    created,
                )
            except asyncpg.UniqueViolationError:
                raise Conflict.project_token_taken() from None
            await conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))
        return Project(project_id, project_uuid, name, token, created)

    async def list_projects(self) -> list[Project]:
        rows = await self.pool.fetch(f"SELECT {PROJECT_COLUMNS} FROM projects ORDER BY id")
        return [Project(*row) for row in rows]

    async def get_project(self, project_id: int) -> Project | None:
        row = await self.pool.fetchrow(
            f"SELECT {PROJECT_COLUMNS} FROM projects WHERE id = $1", project_id
        )
        return Project(*row) if row else None

    async def get_project_by_token(self, api_token: str) -> Project | None:
        row = await self.pool.fetchrow(
            f"SELECT {PROJECT_COLUMNS} FROM projects WHERE api_token = $1", pg_text(api_token)
        )
        return Project(*row) if row else None

    async def create_personal_key(
        self, project_id: int, label: str, value: str | None = None
    ) -> tuple[PersonalKey, str]:
        secret = value or keys.new_personal_key()
        created = now_iso()
        mask = keys.mask_key(secret)
        try:
            key_id = await self.pool.fetchval(
                "INSERT INTO personal_api_keys (project_id, label, secure_value, mask, "
                "created_at, prefix, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                "RETURNING id",
                project_id,
                pg_text(label),
                keys.hash_key(secret),
                pg_text(mask),
                created,
                pg_text(key_prefix(secret)),
                _now_ms(),
            )
        except asyncpg.UniqueViolationError:
            raise Conflict.personal_key_taken() from None
        return PersonalKey(key_id, project_id, label, mask, created), secret

    async def find_personal_key(self, value: str) -> PersonalKey | None:
        row = await self.pool.fetchrow(
            f"SELECT {PERSONAL_KEY_COLUMNS} FROM personal_api_keys WHERE secure_value = $1 "
            "AND revoked_at_ms IS NULL",
            keys.hash_key(value),
        )
        return PersonalKey(*row) if row else None

    # feature flags ---------------------------------------------------------------------

    async def list_flags(
        self, project_id: int, limit: int, offset: int, include_deleted: bool = False
    ) -> Page:
        where = "project_id = $1" + ("" if include_deleted else " AND NOT deleted")
        async with self.pool.acquire() as conn:
            count = await conn.fetchval(
                f"SELECT count(*) FROM feature_flags WHERE {where}", project_id
            )
            rows = await conn.fetch(
                f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE {where} ORDER BY id DESC "
                "LIMIT $2 OFFSET $3",
                project_id,
                limit,
                offset,
            )
        return Page(int(count), [flag_record(r) for r in rows])

    async def get_flag(self, project_id: int, flag_id: int) -> dict[str, Any] | None:
        row = await self.pool.fetchrow(
            f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE project_id = $1 AND id = $2",
            project_id,
            flag_id,
        )
        return flag_record(row) if row else None

    async def get_flag_by_key(self, project_id: int, key: str) -> dict[str, Any] | None:
        row = await self.pool.fetchrow(
            f"SELECT {FLAG_COLUMNS} FROM feature_flags "
            "WHERE project_id = $1 AND key = $2 AND NOT deleted",
            project_id,
            pg_text(key),
        )
        return flag_record(row) if row else None

    async def create_flag(
        self, project_id: int, data: dict[str, Any], source: ChangeSource | None = None
    ) -> dict[str, Any]:
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            return await write_flag(conn, project_id, data, now, source)

    async def update_flag(
        self,
        project_id: int,
        flag_id: int,
        data: dict[str, Any],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]:
        """Replace the flag with ``data``; ``data["version"]`` must be the current version."""
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            return await write_flag(conn, project_id, data, now, source, flag_id)

    # cohorts ---------------------------------------------------------------------------

    async def list_cohorts(self, project_id: int, limit: int, offset: int) -> Page:
        async with self.pool.acquire() as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM cohorts WHERE project_id = $1 AND NOT deleted", project_id
            )
            rows = await conn.fetch(
                f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE project_id = $1 AND NOT deleted "
                "ORDER BY id DESC LIMIT $2 OFFSET $3",
                project_id,
                limit,
                offset,
            )
        return Page(int(count), [cohort_record(r) for r in rows])

    async def get_cohort(self, project_id: int, cohort_id: int) -> dict[str, Any] | None:
        row = await self.pool.fetchrow(
            f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE project_id = $1 AND id = $2",
            project_id,
            cohort_id,
        )
        return cohort_record(row) if row else None

    async def create_cohort(
        self, project_id: int, data: dict[str, Any], source: ChangeSource | None = None
    ) -> dict[str, Any]:
        cohort = cohort_body(data)
        members = [pg_text(d) for d in cohort.members]
        now = now_iso()
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                cohort_id = await conn.fetchval(
                    "INSERT INTO cohorts (project_id, is_static, deleted, version, data, "
                    "created_at, updated_at) VALUES ($1, $2, false, 1, $3, $4, $5) RETURNING id",
                    project_id,
                    cohort.is_static,
                    json_text(cohort.body),
                    now,
                    now,
                )
                await _add_members(conn, project_id, cohort_id, members)
                await conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))
                await _log_cohort(conn, project_id, None, await _cohort_in(conn, cohort_id), source)
            row = await conn.fetchrow(
                f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE id = $1", cohort_id
            )
        return cohort_record(row)

    async def update_cohort(
        self,
        project_id: int,
        cohort_id: int,
        data: dict[str, Any],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]:
        body = cohort_body(data).body
        deleted = bool(data.get("deleted"))
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                exists = await conn.fetchval(
                    "SELECT 1 FROM cohorts WHERE project_id = $1 AND id = $2 FOR UPDATE",
                    project_id,
                    cohort_id,
                )
                before = await _cohort_in(conn, cohort_id) if exists else None
                status = await conn.execute(
                    "UPDATE cohorts SET data = $1, deleted = $2, version = version + 1, "
                    "updated_at = $3 WHERE project_id = $4 AND id = $5",
                    json_text(body),
                    deleted,
                    now_iso(),
                    project_id,
                    cohort_id,
                )
                if status == "UPDATE 0":
                    raise NotFound(f"cohort {cohort_id}")
                await conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))
                await _log_cohort(
                    conn, project_id, before, await _cohort_in(conn, cohort_id), source
                )
            row = await conn.fetchrow(
                f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE id = $1", cohort_id
            )
        return cohort_record(row)

    async def change_static_members(
        self,
        project_id: int,
        cohort_id: int,
        add: list[str],
        remove: list[str],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]:
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                is_static = await conn.fetchval(
                    "SELECT is_static FROM cohorts WHERE project_id = $1 AND id = $2 "
                    "AND NOT deleted FOR UPDATE",
                    project_id,
                    cohort_id,
                )
                if is_static is None:
                    raise NotFound(f"cohort {cohort_id}")
                if not is_static:
                    raise Conflict.cohort_not_static()
                before = await _cohort_in(conn, cohort_id)
                await _add_members(conn, project_id, cohort_id, [pg_text(d) for d in add])
                if remove:
                    await conn.execute(
                        "DELETE FROM cohort_members m USING unnest($2::text[]) AS x(d) "
                        "WHERE m.cohort_id = $1 AND m.distinct_id = x.d",
                        cohort_id,
                        [pg_text(d) for d in remove],
                    )
                await conn.execute(
                    "UPDATE cohorts SET version = version + 1, updated_at = $1 WHERE id = $2",
                    now_iso(),
                    cohort_id,
                )
                await _log_cohort(
                    conn, project_id, before, await _cohort_in(conn, cohort_id), source
                )
            row = await conn.fetchrow(
                f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE id = $1", cohort_id
            )
        return cohort_record(row)

    async def list_static_members(self, project_id: int, cohort_id: int) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT m.distinct_id FROM cohort_members m JOIN cohorts c ON c.id = m.cohort_id "
            "WHERE c.project_id = $1 AND c.id = $2 ORDER BY m.distinct_id",
            project_id,
            cohort_id,
        )
        return [r[0] for r in rows]

    # what /flags reads -----------------------------------------------------------------

    async def definitions_version(self, project_id: int) -> int:
        version = await self.pool.fetchval(
            "SELECT version FROM definitions_version WHERE project_id = $1", project_id
        )
        return int(version) if version is not None else 0

    async def definitions(self, project_id: int) -> Definitions:
        async with (
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            version = await conn.fetchval(
                "SELECT version FROM definitions_version WHERE project_id = $1", project_id
            )
            flag_rows = await conn.fetch(
                f"SELECT {FLAG_COLUMNS} FROM feature_flags "
                "WHERE project_id = $1 AND NOT deleted ORDER BY key",
                project_id,
            )
            cohort_rows = await conn.fetch(
                f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE project_id = $1 AND NOT deleted",
                project_id,
            )
            type_rows = await conn.fetch(
                "SELECT group_type_index, group_type FROM group_types WHERE project_id = $1",
                project_id,
            )
        return definitions_record(version, flag_rows, cohort_rows, type_rows)

    async def flag_context(
        self,
        project_id: int,
        distinct_id: str,
        groups: dict[int, str],
        *,
        overrides: bool = False,
        static_cohorts: bool = False,
    ) -> FlagContext:
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
                    now_ms = int(time.time() * 1000)
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

    async def get_group(
        self, project_id: int, group_type_index: int, group_key: str
    ) -> Group | None:
        row = await self.pool.fetchrow(
            f"SELECT {GROUP_COLUMNS} "
            "WHERE g.project_id = $1 AND g.group_type_index = $2 AND g.group_key = $3",
            project_id,
            group_type_index,
            pg_text(group_key),
        )
        return group_record(row) if row is not None else None

    async def list_group_types(self, project_id: int) -> dict[int, str]:
        rows = await self.pool.fetch(
            "SELECT group_type_index, group_type FROM group_types WHERE project_id = $1 "
            "ORDER BY group_type_index",
            project_id,
        )
        return {index: name for index, name in rows}

    async def create_group_type(self, project_id: int, index: int, name: str) -> bool:
        """Map group type ``index`` to ``name``; False when it is so already (see
        :func:`~flagstaff.store.rows.group_type_change`)."""
        for _ in range(2):
            if not group_type_change(await self.list_group_types(project_id), index, name):
                return False
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    await conn.execute(
                        "INSERT INTO group_types (project_id, group_type_index, group_type) "
                        "VALUES ($1, $2, $3)",
                        project_id,
                        index,
                        pg_text(name),
                    )
                    await conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))
                return True
            except asyncpg.UniqueViolationError:
                continue  # ingestion added a type meanwhile: judge again against it
        raise Conflict("group_type", "group types changed meanwhile; retry")

    async def list_events(
        self,
        project_id: int,
        *,
        distinct_id: str | None = None,
        event: str | None = None,
        after_ms: int | None = None,
        before_ms: int | None = None,
        cursor: tuple[int, int] | None = None,
        limit: int = 100,
    ) -> list[StoredEvent]:
        """Newest first by timestamp; ``cursor`` is the (timestamp, seq) of the last row seen."""
        where = ["e.project_id = $1"]
        args: list[Any] = [project_id]

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if distinct_id is not None:
            where.append(f"e.distinct_id = {arg(pg_text(distinct_id))}")
        if event is not None:
            where.append(f"e.event = {arg(pg_text(event))}")
        if after_ms is not None:
            where.append(f"e.timestamp_ms > {arg(after_ms)}")
        if before_ms is not None:
            where.append(f"e.timestamp_ms < {arg(before_ms)}")
        if cursor is not None:
            where.append(f"(e.timestamp_ms, e.seq) < ({arg(cursor[0])}, {arg(cursor[1])})")
        rows = await self.pool.fetch(
            f"SELECT {_EVENT_COLUMNS} WHERE {' AND '.join(where)} "
            f"ORDER BY e.timestamp_ms DESC, e.seq DESC LIMIT {arg(limit)}",
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

    async def list_warnings(self, project_id: int, limit: int, offset: int) -> Page:
        async with self.pool.acquire() as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM ingestion_warnings WHERE project_id = $1", project_id
            )
            rows = await conn.fetch(
                f"SELECT {WARNING_COLUMNS} FROM ingestion_warnings "
                "WHERE project_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3",
                project_id,
                limit,
                offset,
            )
        return Page(int(count), [warning_record(r) for r in rows])


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
