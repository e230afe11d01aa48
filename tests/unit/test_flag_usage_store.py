"""Flag usage and property value suggestions in storage, on SQLite and PostgreSQL: the rollup
ingestion keeps (exact counts, retries not counted twice), the recompute that rebuilds it from
stored events, and the bounded value samples."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest

from flagstaff.common.units import DAY_MS
from flagstaff.ingest.model import Event
from flagstaff.store.base import Store
from flagstaff.store.flag_usage import DailyChecks, ValueChecks
from flagstaff.store.postgres.store import PostgresStore
from flagstaff.store.property_values import SAMPLE_ROWS, ValueCount
from flagstaff.store.sqlite.store import SQLiteStore
from tests import pg
from tests.events import T0, event

T = TypeVar("T")
Factory = Callable[[], Store]
DAY0 = T0 // DAY_MS


async def _reset(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        tables = [
            r[0]
            for r in await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'schema_migrations'"
            )
        ]
        if tables:
            await conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    if request.param == "sqlite":
        yield lambda: SQLiteStore(tmp_path / "flagstaff.sqlite3")
    else:
        url = pg.postgres_url()
        asyncio.run(_reset(url))
        yield lambda: PostgresStore(url)


def run(make: Factory, body: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        store = make()
        await store.open()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


def check(key: Any, response: Any = True, *, ts: int = T0, uid: str | None = None) -> Event:
    props: dict[str, Any] = {"$feature_flag": key}
    if response is not None:
        props["$feature_flag_response"] = response
    return event("$feature_flag_called", "u1", props=props, ts=ts, uid=uid)


def known_events() -> list[Event]:
    """Checks of a boolean and a multivariate flag over three days, plus noise."""
    return [
        check("beta", True, ts=T0),
        check("beta", True, ts=T0 + 5),
        check("beta", False, ts=T0 + 9),
        check("beta", True, ts=T0 + DAY_MS),
        check("exp", "control", ts=T0 + 1),
        check("exp", "test", ts=T0 + 2),
        check("exp", "test", ts=T0 + 3),
        check("exp", "test", ts=T0 + 2 * DAY_MS),
        check("exp", None, ts=T0 + 2 * DAY_MS + 7),
        check("", True),  # no key: not a check
        check(42, True),  # a key that is not a string
        event("$pageview", "u1", props={"$feature_flag": "beta"}),
    ]


EXPECTED_BETA = [
    ValueChecks(DAY0, "false", 1, T0 + 9),
    ValueChecks(DAY0, "true", 2, T0 + 5),
    ValueChecks(DAY0 + 1, "true", 1, T0 + DAY_MS),
]
EXPECTED_EXP = [
    ValueChecks(DAY0, "control", 1, T0 + 1),
    ValueChecks(DAY0, "test", 2, T0 + 3),
    ValueChecks(DAY0 + 2, "", 1, T0 + 2 * DAY_MS + 7),
    ValueChecks(DAY0 + 2, "test", 1, T0 + 2 * DAY_MS),
]


async def _daily(
    store: Store, pid: int, keys: tuple[str, ...] = ("beta", "exp")
) -> list[DailyChecks]:
    rows = await store.flag_daily_checks(pid, DAY0 - 1, list(keys))
    return sorted(rows, key=lambda d: (d.flag_key, d.day))


def test_ingest_keeps_exact_counts_per_day_and_value(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P")).id
        other = (await store.create_project("Q")).id
        events = known_events()
        await store.ingest(pid, events[:5], [])
        await store.ingest(pid, events[5:], [])
        await store.ingest(other, [check("beta", True)], [])
        assert await store.flag_value_checks(pid, "beta", DAY0) == EXPECTED_BETA
        assert await store.flag_value_checks(pid, "exp", DAY0) == EXPECTED_EXP
        assert await store.flag_value_checks(pid, "exp", DAY0 + 1) == EXPECTED_EXP[2:]
        assert await _daily(store, pid) == [
            DailyChecks("beta", DAY0, 3, T0 + 9),
            DailyChecks("beta", DAY0 + 1, 1, T0 + DAY_MS),
            DailyChecks("exp", DAY0, 3, T0 + 3),
            DailyChecks("exp", DAY0 + 2, 2, T0 + 2 * DAY_MS + 7),
        ]
        assert await store.flag_last_seen(pid, ["beta", "exp", "never"]) == {
            "beta": T0 + DAY_MS,
            "exp": T0 + 2 * DAY_MS + 7,
        }
        assert await store.flag_value_checks(other, "beta", DAY0) == [
            ValueChecks(DAY0, "true", 1, T0)
        ]

    run(backend, body)


def test_retried_and_repeated_events_count_once(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P")).id
        first = check("beta", True, uid=str(uuid.uuid4()))
        await store.ingest(pid, [first, check("beta", False)], [])
        # a retry of the first request, with a new check, and a uuid repeated in one batch
        again = str(uuid.uuid4())
        retry = await store.ingest(
            pid,
            [first, check("beta", True, uid=again), check("beta", True, uid=again)],
            [],
        )
        assert (retry.ingested, retry.duplicates) == (1, 2)
        assert await store.flag_value_checks(pid, "beta", DAY0) == [
            ValueChecks(DAY0, "false", 1, T0),
            ValueChecks(DAY0, "true", 2, T0),
        ]
        # a uuid first used by another event is not a check
        taken = str(uuid.uuid4())
        await store.ingest(pid, [event("$pageview", "u1", uid=taken)], [])
        await store.ingest(pid, [check("beta", True, uid=taken)], [])
        assert (await store.flag_value_checks(pid, "beta", DAY0))[-1].checks == 2

    run(backend, body)


def test_recompute_equals_incremental(backend: Factory) -> None:
    rng = random.Random(5)
    keys = ["a", "b", "c", "d\x00nul", "e" * 400]
    values: list[Any] = [True, False, "control", "test", None, 3, "x" * 300]
    events = [
        check(rng.choice(keys), rng.choice(values), ts=T0 + rng.randrange(6 * DAY_MS))
        for _ in range(400)
    ]
    for n in range(0, 400, 37):  # some retried
        events.append(events[n])

    async def body(store: Store) -> None:
        pid = (await store.create_project("P")).id
        for start in range(0, len(events), 50):
            await store.ingest(pid, events[start : start + 50], [])
        incremental = {k: await store.flag_value_checks(pid, k, 0) for k in keys}
        daily = await _daily(store, pid, tuple(keys))
        assert sum(d.checks for d in daily) == 400
        assert await store.recompute_flag_usage(pid) == 400
        assert {k: await store.flag_value_checks(pid, k, 0) for k in keys} == incremental
        assert await _daily(store, pid, tuple(keys)) == daily
        assert await store.recompute_flag_usage(pid) == 400  # idempotent
        assert await _daily(store, pid, tuple(keys)) == daily

    run(backend, body)


def test_recompute_fills_a_rollup_that_missed_events(backend: Factory) -> None:
    """What an upgraded install has: events stored before the rollup existed."""

    async def body(store: Store) -> None:
        pid = (await store.create_project("P")).id
        await store.ingest(pid, known_events(), [])
        assert await store.recompute_flag_usage(pid) == 11  # every $feature_flag_called read
        assert await store.flag_value_checks(pid, "beta", DAY0) == EXPECTED_BETA
        assert await store.flag_value_checks(pid, "exp", DAY0) == EXPECTED_EXP

    run(backend, body)


def _set(distinct_id: str, props: dict[str, Any]) -> Event:
    return event("$set", distinct_id, set=props)


def test_property_values_most_frequent_first(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P")).id
        other = (await store.create_project("Q")).id
        plans = ["pro"] * 5 + ["free"] * 3 + ["team"] * 3
        events = [
            _set(f"u{i}", {"plan": plan, "seats": i % 2, "beta": i % 3 == 0, "a.b": "dotted"})
            for i, plan in enumerate(plans)
        ]
        events.append(_set("odd", {"plan": None, 'we"ird': "q", "list": [1, 2]}))
        await store.ingest(pid, events, [])
        await store.ingest(other, [_set("x", {"plan": "other-project"})], [])
        assert await store.property_values(pid, "plan", None) == [
            ValueCount("pro", 5),
            ValueCount("free", 3),
            ValueCount("team", 3),
        ]
        assert await store.property_values(pid, "seats", None) == [
            ValueCount("0", 6),
            ValueCount("1", 5),
        ]
        assert await store.property_values(pid, "beta", None) == [
            ValueCount("false", 7),
            ValueCount("true", 4),
        ]
        assert await store.property_values(pid, "a.b", None) == [ValueCount("dotted", 11)]
        assert await store.property_values(pid, 'we"ird', None) == [ValueCount("q", 1)]
        assert await store.property_values(pid, "list", None) == []
        assert await store.property_values(pid, "missing", None) == []

        group = event(
            "$groupidentify",
            "u0",
            props={"$group_type": "company", "$group_key": "acme", "$group_set": {"tier": "gold"}},
        )
        await store.ingest(pid, [group], [])
        assert await store.property_values(pid, "tier", 0) == [ValueCount("gold", 1)]
        assert await store.property_values(pid, "tier", 1) == []
        assert await store.property_values(pid, "tier", None) == []

    run(backend, body)


def test_property_values_read_a_bounded_sample_of_the_newest_persons(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P")).id
        old = [_set(f"old{i}", {"v": "old"}) for i in range(50)]
        new = [_set(f"new{i}", {"v": "new"}) for i in range(SAMPLE_ROWS)]
        await store.ingest(pid, old, [])
        for start in range(0, len(new), 2000):
            await store.ingest(pid, new[start : start + 2000], [])
        assert await store.property_values(pid, "v", None) == [ValueCount("new", SAMPLE_ROWS)]

    run(backend, body)
