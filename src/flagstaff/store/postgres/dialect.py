"""PostgreSQL's side of :mod:`flagstaff.store.sql.db`: asyncpg connections as they are, with
the differences stated once: text parameters lose NUL (PostgreSQL text cannot hold it) and
JSON parameters their ``\\u0000`` escapes (``jsonb`` refuses them); a unique violation is
:class:`~flagstaff.store.sql.db.UniqueViolation`; ``execute`` answers the rows changed; a
statement allowed to fail runs in a savepoint; a definitions bump also NOTIFYs the other nodes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import asyncpg

from flagstaff.store.postgres.sql import BUMP_DEFINITIONS
from flagstaff.store.sql.db import JsonText, Reader, Row, Tx, UniqueViolation

T = TypeVar("T")


def _arg(value: Any) -> Any:
    if type(value) is JsonText:
        return value.replace("\\u0000", "\\ufffd")
    if type(value) is str and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    if type(value) is list:
        return [_arg(v) for v in value]
    return value


def _args(args: Sequence[Any]) -> Sequence[Any]:
    return [_arg(a) for a in args]


def _count(status: str) -> int:
    """The rows an ``INSERT 0 3`` / ``UPDATE 2`` / ``DELETE 1`` status names."""
    tail = status.rpartition(" ")[2]
    return int(tail) if tail.isdigit() else 0


class PostgresConnection:
    """The :class:`~flagstaff.store.sql.db.Reader` of one asyncpg connection (or the pool)."""

    def __init__(self, conn: asyncpg.Connection | asyncpg.Pool) -> None:
        self.conn = conn

    async def execute(self, sql: str, *args: Any) -> int:
        try:
            return _count(await self.conn.execute(sql, *_args(args)))
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(str(exc)) from exc

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        try:
            await self.conn.executemany(sql, [_args(a) for a in args])
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(str(exc)) from exc

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        try:
            return await self.conn.fetch(sql, *_args(args))
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(str(exc)) from exc

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        try:
            return await self.conn.fetchrow(sql, *_args(args))
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(str(exc)) from exc

    async def fetchval(self, sql: str, *args: Any) -> Any:
        try:
            return await self.conn.fetchval(sql, *_args(args))
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(str(exc)) from exc

    async def fetchrow_guarded(self, sql: str, *args: Any) -> Row | None:
        # A failed statement aborts a PostgreSQL transaction: run it in a savepoint.
        try:
            async with self.conn.transaction():
                return await self.conn.fetchrow(sql, *_args(args))
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(str(exc)) from exc

    async def bump_definitions(self, project_id: int) -> None:
        await self.conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))


class PostgresDb(PostgresConnection):
    """Reads on the pool; each write in a transaction on a connection of its own."""

    def __init__(self, pool: Callable[[], asyncpg.Pool]) -> None:
        self._pool = pool

    @property
    def conn(self) -> asyncpg.Pool:
        return self._pool()

    async def ping(self) -> bool:
        try:
            return await self._pool().fetchval("SELECT 1") == 1
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return False

    async def snapshot(self, fn: Callable[[Reader], Awaitable[T]]) -> T:
        async with (
            self._pool().acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            return await fn(PostgresConnection(conn))

    async def write(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        async with self._pool().acquire() as conn, conn.transaction():
            return await fn(PostgresConnection(conn))


async def in_transaction(conn: asyncpg.Connection, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
    """Run a shared write in a transaction the caller holds (a write of the engine's own)."""
    return await fn(PostgresConnection(conn))
