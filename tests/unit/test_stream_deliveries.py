"""A shard reader's fetcher and lost deliveries (``stream/consumer.py``): a delivery that never
arrived stops the fetcher after the messages before it, so nothing after it is acknowledged
(``AckPolicy.ALL`` would acknowledge the lost one too) and the consumer is made again below it.
The NATS objects are stand-ins; the kill -9 test in ``tests/api/test_stream.py`` runs it for
real."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from flagstaff.stream import consumer
from flagstaff.stream.client import StreamSpec
from flagstaff.stream.consumer import ConsumerStats, DeliveryLost, Inbox, ShardReader, unbroken
from flagstaff.stream.leases import Lease


@dataclass
class _Sequence:
    consumer: int
    stream: int


@dataclass
class _Metadata:
    sequence: _Sequence
    num_pending: int = 0


@dataclass
class _Msg:
    number: int
    data: bytes = b"\xc1"  # not a stream batch: the reader keeps why, which is all it needs here

    @property
    def metadata(self) -> _Metadata:
        return _Metadata(_Sequence(self.number, 100 + self.number))


@dataclass
class _Sub:
    """Answers each fetch with the next of ``script`` (a TimeoutError: nothing came), then
    nothing forever."""

    script: list[list[_Msg] | type[TimeoutError]]
    fetches: int = 0

    async def fetch(self, batch: int, timeout: float) -> list[_Msg]:
        self.fetches += 1
        await asyncio.sleep(0)
        step = self.script.pop(0) if self.script else TimeoutError
        if step is TimeoutError:
            raise TimeoutError
        assert isinstance(step, list)
        return step


@dataclass
class _Delivered:
    consumer_seq: int


@dataclass
class _Info:
    delivered: _Delivered


@dataclass
class _Js:
    """``consumer_info`` says the consumer delivered ``delivered[0]``, then the next..."""

    delivered: list[int] = field(default_factory=list)
    asked: int = 0

    async def consumer_info(self, stream: str, name: str) -> _Info:
        self.asked += 1
        n = self.delivered.pop(0) if len(self.delivered) > 1 else self.delivered[0]
        return _Info(_Delivered(n))


class _Nc:
    def __init__(self, js: _Js) -> None:
        self.js = js

    def jetstream(self, timeout: float) -> _Js:
        return self.js


def _reader(js: _Js) -> ShardReader:
    spec = StreamSpec(
        urls=[], shards=1, replicas=1, publish_timeout=1, lease_seconds=10, batch=100,
        fetch_wait=0.01,
    )  # fmt: skip
    return ShardReader(_Nc(js), None, spec, Lease(0, 1), ConsumerStats())  # type: ignore[arg-type]


def _numbers(fetched: list[Any]) -> list[int]:
    return [msg.number for msg, _ in fetched]


def test_unbroken_counts_the_deliveries_that_follow_on() -> None:
    msgs = [_Msg(3), _Msg(4), _Msg(6)]
    assert unbroken(msgs, 2) == 2  # 5 never arrived
    assert unbroken(msgs[:2], 2) == 2
    assert unbroken([_Msg(2)], 0) == 0  # the very first one is missing
    assert unbroken([], 7) == 0


def test_a_lost_delivery_stops_the_fetcher_after_the_messages_before_it() -> None:
    async def run() -> None:
        reader = _reader(_Js([0]))
        inbox = Inbox(100)
        sub = _Sub([[_Msg(1), _Msg(2)], [_Msg(3), _Msg(5), _Msg(6)], [_Msg(7)]])
        fetcher = asyncio.create_task(reader._fetch(sub, inbox))  # type: ignore[arg-type]
        await asyncio.wait_for(fetcher, 5)
        assert _numbers(await inbox.take()) == [1, 2, 3]  # committed and acknowledged: up to 3
        with pytest.raises(DeliveryLost, match="delivery 4 never arrived"):
            await inbox.take()  # then the reader makes its consumer again, from 3
        assert sub.script == [[_Msg(7)]]  # nothing fetched past the loss

    asyncio.run(run())


def test_a_lost_last_delivery_is_found_when_the_shard_is_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer, "GAP_CHECK_SECONDS", 0.0)

    async def run() -> None:
        js = _Js([3])  # the consumer delivered 3; 3 never arrived and nothing follows it
        reader = _reader(js)
        inbox = Inbox(100)
        sub = _Sub([[_Msg(1), _Msg(2)]])
        fetcher = asyncio.create_task(reader._fetch(sub, inbox))  # type: ignore[arg-type]
        await asyncio.wait_for(fetcher, 5)
        assert _numbers(await inbox.take()) == [1, 2]
        with pytest.raises(DeliveryLost, match="1 delivered, none arrived"):
            await inbox.take()
        assert js.asked == 2  # seen short twice in a row, not once

    asyncio.run(run())


def test_a_delivery_still_on_its_way_is_not_taken_for_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer, "GAP_CHECK_SECONDS", 0.0)

    async def run() -> None:
        js = _Js([2, 2])  # the consumer delivered 2 before 2 arrived, then nothing more
        reader = _reader(js)
        inbox = Inbox(100)
        sub = _Sub([[_Msg(1)], TimeoutError, [_Msg(2)]])
        fetcher = asyncio.create_task(reader._fetch(sub, inbox))  # type: ignore[arg-type]
        while sub.fetches < 20:
            await asyncio.sleep(0.001)
        fetcher.cancel()
        await asyncio.gather(fetcher, return_exceptions=True)
        assert _numbers(await inbox.take()) == [1, 2]
        assert js.asked >= 2  # checked while quiet, and found nothing missing

    asyncio.run(run())
