"""The pieces behind fault handling, alone: which errors are outages, one log line per outage,
the readiness registry, the supervisor's restarts and backoff, the lingering-read bound."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import time
from pathlib import Path

import asyncpg
import pytest

from flagstaff.http.limits import LINGER_LIMITS, linger_bytes
from flagstaff.server import supervisor
from flagstaff.server.outage import QUIET_AFTER_SECONDS, Outage
from flagstaff.server.readiness import Readiness
from flagstaff.store.base import Conflict, NotFound, StoreError
from flagstaff.store.faults import is_unavailable
from flagstaff.store.sqlite.client import IngestUnavailable


def _sqlite_error(message: str, code: int | None) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    if code is not None:
        exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(),
        OSError(5, "Input/output error"),
        TimeoutError(),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.DiskFullError("could not extend file"),
        asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"),
        asyncpg.InterfaceError("connection is closed"),
        asyncpg.exceptions.InternalClientError("cannot switch to state 15"),
        _sqlite_error("disk I/O error", 10),
        _sqlite_error("database or disk is full", 13),
        _sqlite_error("database is locked", 5),
        _sqlite_error("attempt to write a readonly database", 8),
        _sqlite_error("disk I/O error", None),
        IngestUnavailable("the ingest writer is not reachable"),
        StoreError("database or disk is full"),
    ],
    ids=repr,
)
def test_unavailable_storage_is_recognised(exc: BaseException) -> None:
    assert is_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("a bug"),
        KeyError("x"),
        Conflict.flag_key_taken("k"),
        NotFound("no such flag"),
        asyncpg.UniqueViolationError("duplicate key"),
        asyncpg.UndefinedTableError("relation does not exist"),
        _sqlite_error("no such table: flags", 1),
        sqlite3.IntegrityError("UNIQUE constraint failed"),
    ],
    ids=repr,
)
def test_other_errors_are_not_outages(exc: BaseException) -> None:
    assert not is_unavailable(exc)


def test_an_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    outage = Outage(clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="flagstaff"):
        assert outage.failed(ConnectionRefusedError(), "/batch/")
        for _ in range(50):
            now[0] += 0.1
            assert not outage.failed(ConnectionRefusedError(), "/batch/")
            outage.recovered()  # successes amid failures do not end it
        now[0] += 1.0
        outage.recovered()
        outage.recovered()
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("storage available again") == 1
    assert sum("storage unavailable" in m for m in messages) == 1
    ended = next(r for r in caplog.records if r.getMessage() == "storage available again")
    assert ended.fields == {"seconds": 6.0, "refused": 51}  # type: ignore[attr-defined]


def test_a_failure_long_after_the_last_is_a_new_outage() -> None:
    now = [0.0]
    outage = Outage(clock=lambda: now[0])
    assert outage.failed(OSError(), "/e/")
    now[0] += QUIET_AFTER_SECONDS / 2
    assert not outage.failed(OSError(), "/e/")
    now[0] += QUIET_AFTER_SECONDS + 1
    assert outage.failed(OSError(), "/e/")
    assert outage.outages == 2


def test_readiness_lists_every_failing_check() -> None:
    readiness = Readiness()

    async def fine() -> str | None:
        return None

    async def down() -> str | None:
        return "the ingest writer is not reachable"

    async def broken() -> str | None:
        raise RuntimeError("boom")

    readiness.add("database", fine)
    assert asyncio.run(readiness.reasons()) == []
    readiness.add("ingest_writer", down)
    readiness.add("disk", broken)
    reasons = asyncio.run(readiness.reasons())
    assert [(r.check, r.detail) for r in reasons] == [
        ("ingest_writer", "the ingest writer is not reachable"),
        ("disk", "the check failed: RuntimeError: boom"),
    ]


def test_linger_discards_the_declared_body_within_a_bound() -> None:
    limit = 20 * 1024 * 1024
    assert linger_bytes(0, limit) == limit
    assert linger_bytes(21 * 1024 * 1024, limit) == 21 * 1024 * 1024
    assert linger_bytes(10**12, limit) == LINGER_LIMITS * limit


_CHILD = """
import sys, time
sys.stdout.write("ready\\n"); sys.stdout.flush()
time.sleep(float(sys.argv[1]))
"""


def _wait(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_supervisor_restarts_a_dead_child_with_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    restarts: list[int] = []
    children = supervisor.Supervisor(on_restart=lambda name, n: restarts.append(n))
    spec = supervisor.ChildSpec("sleeper", [sys.executable, str(script), "60"])
    first = children.start(spec)
    try:
        first.kill()
        _wait(lambda: children.restarts("sleeper") == 1)
        second = children.process("sleeper")
        assert second is not None and second.pid != first.pid and second.poll() is None
        # Dying again soon after its start: the next delay doubles.
        with children._lock:
            delay = children._children["sleeper"].delay
        assert delay == 2 * supervisor.FIRST_DELAY_SECONDS
        second.kill()
        _wait(lambda: children.restarts("sleeper") == 2)
        assert restarts == [1, 2]
    finally:
        children.stop()
    assert children.process("sleeper") is None


def test_a_child_that_never_gets_ready_fails_its_first_start(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("import sys; sys.stdout.write('nope\\n')")
    children = supervisor.Supervisor()
    with pytest.raises(supervisor.ChildFailed):
        children.start(supervisor.ChildSpec("bad", [sys.executable, str(script)]))
    children.stop()
