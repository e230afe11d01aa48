"""What ``/_ready`` checks: a registry of named checks, each giving a reason or None.

``/_ready`` answers 503 with every reason while any check fails, so a load balancer stops
sending traffic this node cannot serve; ``/_health`` stays a liveness check (the process
answers). A part of the service that can make ingestion impossible registers a check here
(``services.readiness.add(name, check)``): the database (every store), the SQLite ingest
writer, and any later one (a disk reserve, say).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgspec

ReadinessCheck = Callable[[], Awaitable[str | None]]
"""Returns why the node cannot serve now, or None when it can."""

CHECK_TIMEOUT_SECONDS = 2.0
"""A check that takes longer fails: a readiness probe must answer quickly."""


class NotReady(msgspec.Struct, frozen=True):
    check: str
    detail: str


class Readiness:
    def __init__(self) -> None:
        self._checks: dict[str, ReadinessCheck] = {}

    def add(self, name: str, check: ReadinessCheck) -> None:
        """Register (or replace) the check called ``name``."""
        self._checks[name] = check

    @property
    def names(self) -> list[str]:
        return list(self._checks)

    async def reasons(self) -> list[NotReady]:
        """Every failing check with its reason (all checks run concurrently)."""
        names = list(self._checks)
        results = await asyncio.gather(*(_run(self._checks[name]) for name in names))
        return [
            NotReady(name, reason) for name, reason in zip(names, results, strict=True) if reason
        ]


async def _run(check: ReadinessCheck) -> str | None:
    try:
        return await asyncio.wait_for(check(), CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return f"the check did not answer within {CHECK_TIMEOUT_SECONDS:g} s"
    except Exception as exc:  # a failing check is a reason, never a 500
        return f"the check failed: {type(exc).__name__}: {exc}"
