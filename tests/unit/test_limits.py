"""Body reads under a deadline: the reaper's 408, shedding the idlest, nothing else cancelled;
the connection bound under the open-files limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flagstaff.application.errors import ApiError
from flagstaff.http import limits
from flagstaff.http.asgi import read_body
from flagstaff.server import process


def _receiver(chunks: list[bytes], stall_after: int | None = None) -> Any:
    """An ASGI ``receive`` giving ``chunks``; it never answers again after ``stall_after``."""
    sent = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if stall_after is not None and sent >= stall_after:
            await asyncio.Event().wait()
        chunk = chunks[sent]
        sent += 1
        return {"type": "http.request", "body": chunk, "more_body": sent < len(chunks)}

    return receive


@pytest.fixture(autouse=True)
def fast_reaper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "REAP_INTERVAL_SECONDS", 0.01)


def test_a_whole_body_is_read_and_leaves_no_reader() -> None:
    async def run() -> bytes:
        readers = limits.BodyReaders(timeout=0.05, max_waiting=4)
        body = await read_body(_receiver([b"ab", b"cd"]), 100, readers)
        assert len(readers) == 0
        await asyncio.sleep(0.1)  # past the deadline: the finished request is not touched
        return body

    assert asyncio.run(run()) == b"abcd"


def test_a_stalled_body_ends_in_408() -> None:
    async def run() -> None:
        readers = limits.BodyReaders(timeout=0.05, max_waiting=4)
        with pytest.raises(ApiError) as raised:
            await read_body(_receiver([b"ab", b"cd"], stall_after=1), 100, readers)
        assert raised.value.status == 408
        assert len(readers) == 0
        await asyncio.sleep(0)  # the task goes on normally after its 408 (uncancelled)

    asyncio.run(run())


def test_progress_restarts_the_clock() -> None:
    async def run() -> bytes:
        readers = limits.BodyReaders(timeout=0.08, max_waiting=4)
        chunks = [b"a", b"b", b"c", b"d"]
        sent = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            await asyncio.sleep(0.05)  # each chunk inside the timeout, all of them beyond it
            sent += 1
            return {"type": "http.request", "body": chunks[sent - 1], "more_body": sent < 4}

        return await read_body(receive, 100, readers)

    assert asyncio.run(run()) == b"abcd"


def test_too_many_waiting_sheds_the_idlest_first() -> None:
    async def run() -> list[Any]:
        readers = limits.BodyReaders(timeout=60, max_waiting=2, min_idle=0)
        first = asyncio.ensure_future(read_body(_receiver([b"a", b"b"], 1), 100, readers))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(read_body(_receiver([b"a", b"b"], 1), 100, readers))
        await asyncio.sleep(0)
        third = await read_body(_receiver([b"x", b"y"]), 100, readers)
        outcome = await asyncio.gather(first, return_exceptions=True)
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
        return [*outcome, third]

    shed, third = asyncio.run(run())
    assert isinstance(shed, ApiError) and shed.status == 408
    assert third == b"xy"


def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    async def run() -> None:
        readers = limits.BodyReaders(timeout=60, max_waiting=4)
        task = asyncio.ensure_future(read_body(_receiver([b"a", b"b"], 1), 100, readers))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(readers) == 0

    asyncio.run(run())


def test_uploads_idle_under_min_idle_are_not_shed_for_a_newcomer() -> None:
    """A flood of new uploads: the newcomer is admitted beyond the limit, nobody is shed."""

    async def run() -> None:
        readers = limits.BodyReaders(timeout=60, max_waiting=2, min_idle=60)
        stalled = [
            asyncio.ensure_future(read_body(_receiver([b"a", b"b"], 1), 100, readers))
            for _ in range(2)
        ]
        await asyncio.sleep(0)
        assert await read_body(_receiver([b"x", b"y"]), 100, readers) == b"xy"
        await asyncio.sleep(0.05)  # several reaper rounds
        assert readers.shed == 0 and not any(task.done() for task in stalled)
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)

    asyncio.run(run())


def test_the_reaper_sheds_the_excess_once_idle() -> None:
    async def run() -> list[Any]:
        readers = limits.BodyReaders(timeout=60, max_waiting=2, min_idle=0.05)
        stalled = []
        for _ in range(3):
            stalled.append(
                asyncio.ensure_future(read_body(_receiver([b"a", b"b"], 1), 100, readers))
            )
            await asyncio.sleep(0)
        assert len(readers) == 3  # all younger than min_idle: over the limit for now
        outcome = await asyncio.wait_for(asyncio.gather(stalled[0], return_exceptions=True), 5)
        assert len(readers) == 2 and readers.shed == 1
        for task in stalled[1:]:
            task.cancel()
        await asyncio.gather(*stalled[1:], return_exceptions=True)
        return outcome

    (shed,) = asyncio.run(run())
    assert isinstance(shed, ApiError) and shed.status == 408


def test_the_connection_bound_leaves_room_under_the_open_files_limit() -> None:
    assert process.connection_bound(10_000, None) == 10_000
    assert process.connection_bound(10_000, 1_048_576) == 10_000
    assert process.connection_bound(10_000, 1024) == 1024 - process.FILES_RESERVE
    assert process.connection_bound(10_000, 100) == 16
