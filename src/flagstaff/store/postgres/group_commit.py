"""Group commit of ingest calls on PostgreSQL: few transactions in flight, each as large as waits.

At most ``lanes`` transactions run at once per store; calls arriving meanwhile queue per
project and are then committed together, in arrival order, in one transaction (up to
:data:`GROUP_EVENTS` events). A group that fails is retried call by call, so one bad call fails
alone. What a transaction does is the store's ``transact`` function (retries included).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

import msgspec

from flagstaff.store.postgres.ingest import Request
from flagstaff.store.records import IngestResult

GROUP_EVENTS = 2000
"""Events one group commit takes at most (a call larger than this goes alone)."""

Transact = Callable[[int, list[Request]], Awaitable[list[IngestResult]]]


class Queued(msgspec.Struct):
    """One ingest call waiting for its group's commit."""

    request: Request
    future: asyncio.Future[IngestResult]


class IngestLanes:
    """The ingest calls of one store, queued per project and committed in groups."""

    def __init__(self, lanes: int, transact: Transact) -> None:
        self.lanes = lanes
        self._transact = transact
        self._queued: dict[int, collections.deque[Queued]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = 0

    async def submit(self, project_id: int, request: Request) -> IngestResult:
        """The call's result, once the transaction that holds it has committed."""
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        waiting = self._queued.get(project_id)
        if waiting is None:
            waiting = self._queued[project_id] = collections.deque()
        waiting.append(Queued(request, future))
        if self._running < self.lanes:
            self._running += 1
            lane = asyncio.create_task(self._lane())
            self._tasks.add(lane)
            lane.add_done_callback(self._tasks.discard)
        return await future

    async def drain(self) -> None:
        """Wait until every lane has finished its queue."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _lane(self) -> None:
        try:
            while self._queued:
                project_id = next(iter(self._queued))
                waiting = self._queued[project_id]
                group = [waiting.popleft()]
                size = len(group[0].request.events)
                while waiting and size + len(waiting[0].request.events) <= GROUP_EVENTS:
                    item = waiting.popleft()
                    group.append(item)
                    size += len(item.request.events)
                if not waiting:
                    del self._queued[project_id]
                await self._commit_group(project_id, group)
        finally:
            # No await between the empty check above and this: a call queued later starts
            # a lane of its own.
            self._running -= 1

    async def _commit_group(self, project_id: int, group: list[Queued]) -> None:
        try:
            results = await self._transact(project_id, [q.request for q in group])
        except Exception as exc:
            if len(group) == 1:
                _settle(group[0].future, None, exc)
                return
            for queued in group:
                try:
                    result = (await self._transact(project_id, [queued.request]))[0]
                except Exception as alone:
                    _settle(queued.future, None, alone)
                else:
                    _settle(queued.future, result, None)
            return
        for queued, result in zip(group, results, strict=True):
            _settle(queued.future, result, None)


def _settle(
    future: asyncio.Future[IngestResult], result: IngestResult | None, exc: Exception | None
) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert result is not None
        future.set_result(result)
