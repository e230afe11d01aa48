"""The stream's pure parts: shards, the message codec and id, the lease share, settings."""

from __future__ import annotations

import pytest

from flagstaff.ingest.model import Drop, Event
from flagstaff.server.config import ConfigError, Settings
from flagstaff.stream import codec
from flagstaff.stream.client import StreamSpec, replicas_for
from flagstaff.stream.leases import target_share
from flagstaff.stream.shards import shard_of, split


def _event(uuid: str, distinct_id: str) -> Event:
    return Event(
        uuid=uuid,
        event="$pageview",
        distinct_id=distinct_id,
        properties={"$set": {"a": 1}},
        timestamp_ms=1,
        received_ms=2,
        set={"a": 1},
        set_once=None,
        unset=None,
        process_person=True,
        historical=False,
    )


def _drop() -> Drop:
    return Drop("invalid_event", "no event name", None, "abcd", None, None)


def test_shard_of_is_stable_and_spreads() -> None:
    assert shard_of("user-1", 8) == shard_of("user-1", 8)
    assert shard_of("user-1", 8) == 4  # CRC-32: the same in every process and release
    used = {shard_of(f"user-{i}", 8) for i in range(200)}
    assert used == set(range(8))


def test_split_keeps_each_persons_order_and_rides_drops_with_the_first_part() -> None:
    events = [_event(f"u{i}", f"p{i % 5}") for i in range(20)]
    parts = split(events, [_drop()], 4)
    assert sum(len(p.events) for p in parts) == 20
    assert [len(p.drops) for p in parts] == [1] + [0] * (len(parts) - 1)
    for part in parts:
        assert all(shard_of(e.distinct_id, 4) == part.shard for e in part.events)
        positions = [events.index(e) for e in part.events]
        assert positions == sorted(positions)
    assert split([], [_drop()], 4)[0].shard == 0
    assert split([], [], 4) == []


def test_codec_round_trip_and_message_id() -> None:
    batch = codec.StreamBatch(7, [_event("u1", "p1")], [_drop()], 123)
    assert codec.decode(codec.encode(batch)) == batch
    a = codec.message_id(7, 1, batch.events, batch.drops)
    assert a == codec.message_id(7, 1, [_event("u1", "p1")], [_drop()])
    assert a != codec.message_id(7, 1, [_event("u2", "p1")], [_drop()])
    assert a != codec.message_id(8, 1, batch.events, batch.drops)


def test_lease_share_and_replicas() -> None:
    assert [target_share(8, n) for n in (1, 2, 3, 8, 9)] == [8, 4, 3, 1, 1]
    spec = StreamSpec(["nats://a:4222"], 8, 0, 5.0, 6.0, 100)
    assert [replicas_for(spec, n) for n in (1, 2, 3, 5)] == [1, 1, 3, 3]
    assert replicas_for(StreamSpec(["nats://a:4222"], 8, 2, 5.0, 6.0, 100), 5) == 2


def test_stream_settings_are_checked() -> None:
    pg = "postgresql://u@h/db"
    s = Settings.from_env({}, database_url=pg, stream_url="nats://a:4222, nats://b:4222")
    assert s.stream_urls == ["nats://a:4222", "nats://b:4222"]
    with pytest.raises(ConfigError, match="PostgreSQL"):
        Settings.from_env({}, stream_url="nats://a:4222")
    with pytest.raises(ConfigError, match="nats://"):
        Settings.from_env({}, database_url=pg, stream_url="http://a:4222")
    with pytest.raises(ConfigError, match="shards"):
        Settings.from_env({"FLAGSTAFF_STREAM_SHARDS": "0"}, database_url=pg, stream_url="nats://a")
    with pytest.raises(ConfigError, match="fetch wait"):
        Settings.from_env(
            {"FLAGSTAFF_STREAM_FETCH_WAIT": "61"}, database_url=pg, stream_url="nats://a"
        )
    wait = {"FLAGSTAFF_STREAM_FETCH_WAIT": "10"}
    assert Settings.from_env(wait, database_url=pg, stream_url="nats://a").stream_fetch_wait == 10
    assert Settings.from_env({}).stream_url is None


def test_a_part_larger_than_a_message_is_cut_in_order() -> None:
    from flagstaff.stream.publisher import _pieces
    from flagstaff.stream.shards import ShardPart

    events = [_event(f"{i:032x}", "p1") for i in range(64)]
    part = ShardPart(3, events, [_drop()])
    whole = _pieces(1, part, 0, 10**9)
    assert len(whole) == 1 and whole[0][0] == events
    pieces = _pieces(1, part, 0, len(whole[0][2]) // 5)
    assert len(pieces) > 4
    assert [e for p in pieces for e in p[0]] == events
    assert [len(p[1]) for p in pieces] == [1] + [0] * (len(pieces) - 1)
    assert all(len(p[2]) <= len(whole[0][2]) // 5 for p in pieces)
    assert codec.decode(pieces[1][2]).events == pieces[1][0]
