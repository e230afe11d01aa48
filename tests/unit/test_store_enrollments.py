"""Early access enrollments kept by ingestion in both stores (``person_enrollments``), driven
through ``Store.ingest``: opt in and out (posthog-js's ``$feature_enrollment_update``),
``$unset``, merges of enrolled identities, a random mix checked against the persons'
properties, and migration 0131's backfill of persons enrolled before it."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from typing import Any

from flagstaff.ingest.persons import ENROLLMENT_PREFIX, enrolled_flags
from flagstaff.store.base import Enrolled, Store
from flagstaff.store.postgres.store import PostgresStore
from flagstaff.store.sqlite.store import SQLiteStore
from tests.events import T0, event, random_person_event, seq_uuid
from tests.unit.test_experiments_store import open_store, run

__all__ = ["open_store"]

UPDATE = "$feature_enrollment_update"
UNDO_0131 = (
    "DROP TABLE person_enrollments; DROP TABLE enrollment_counts; "
    "DELETE FROM schema_migrations WHERE version = 131"
)
"""A database as it was before migration 0131."""


def _opt(distinct_id: str, flag: str, value: Any, ts: int) -> Any:
    """posthog-js's ``updateEarlyAccessFeatureEnrollment``."""
    props = {"$feature_flag": flag, "$feature_enrollment": value}
    return event(UPDATE, distinct_id, props=props, set={ENROLLMENT_PREFIX + flag: value}, ts=ts)


async def _rows(store: Store, project_id: int) -> set[tuple[str, int]]:
    """The stored enrollments (flag key, person id) and, to check them, those the persons'
    properties say."""
    query = "SELECT flag_key, person_id FROM person_enrollments WHERE project_id = "
    if isinstance(store, PostgresStore):
        async with store._pool.acquire() as conn:
            return {(r[0], r[1]) for r in await conn.fetch(query + "$1", project_id)}
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        return set(conn.execute(query + "?", (project_id,)).fetchall())


async def _truth(store: Store, project_id: int) -> set[tuple[str, int]]:
    persons = await store.scan_persons(project_id, 0, 100_000, False)
    return {(key, p.id) for p in persons for key in enrolled_flags(p.properties)}


def test_opting_in_and_out_counts_each_person_once(open_store: Callable[[], Store]) -> None:
    async def scenario(store: Store) -> list[Any]:
        pid = (await store.create_project("p")).id
        seen: list[Any] = []

        async def step(*events: Any) -> None:
            await store.ingest(pid, list(events), [])
            seen.append(await store.enrollment_counts(pid, ["dark", "beta", "none"]))

        await step(event("$pageview", "a", ts=T0))  # a person, not enrolled
        await step(_opt("a", "dark", True, T0 + 1))
        await step(_opt("a", "dark", True, T0 + 2), _opt("b", "dark", "true", T0 + 2))
        await step(_opt("a", "beta", True, T0 + 3))
        seen.append(await store.enrolled_persons(pid, "dark", 10))
        await step(_opt("a", "dark", False, T0 + 4))  # opted out
        await step(event("$set", "b", unset=[ENROLLMENT_PREFIX + "dark"], ts=T0 + 5))
        # an anonymous visitor opts in, then logs in as an existing person: one person
        await step(event("$pageview", "user", ts=T0 + 6), _opt("anon", "dark", True, T0 + 7))
        await step(event("$identify", "user", props={"$anon_distinct_id": "anon"}, ts=T0 + 8))
        seen.append(await store.enrolled_persons(pid, "dark", 10))
        seen.append(await _rows(store, pid) == await _truth(store, pid))
        return seen

    seen = run(open_store, scenario)
    counts = [c for c in seen if isinstance(c, dict)]
    assert [c["dark"] for c in counts] == [0, 1, 2, 2, 1, 0, 1, 1]
    assert [c["beta"] for c in counts] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert all(c["none"] == 0 for c in counts)
    listed = [e for e in seen if isinstance(e, Enrolled)]
    assert listed[0] == Enrolled(2, ["b", "a"])  # newest person first
    assert listed[1] == Enrolled(1, ["anon"])  # the merged person, by its first distinct id
    assert seen[-1] is True


def test_random_persons_enrollments_match_their_properties(
    open_store: Callable[[], Store],
) -> None:
    """Random $set/$unset of enrollment properties over identifies, aliases and merges: the
    kept rows are always those the persons' properties say."""
    rng = random.Random(27)

    def with_enrollment(n: int) -> Any:
        made = random_person_event(rng, n)
        roll = rng.random()
        key = ENROLLMENT_PREFIX + rng.choice(["x", "y"])
        if roll < 0.3:
            made.set = {**(made.set or {}), key: rng.choice([True, True, False, "true", 1])}
        elif roll < 0.4:
            made.unset = [key]
        return made

    async def scenario(store: Store) -> list[int]:
        pid = (await store.create_project("p")).id
        enrolled = []
        n = 0
        for size in (1, 5, 20, 3, 40, 1, 30, 8, 12):
            batch = [with_enrollment(n + i) for i in range(size)]
            n += size
            await store.ingest(pid, batch, [])
            truth = await _truth(store, pid)
            assert await _rows(store, pid) == truth, n
            counted = await store.enrollment_counts(pid, ["x", "y"])
            assert counted == {k: sum(1 for f, _ in truth if f == k) for k in "xy"}, n
            enrolled.append(len(truth))
        return enrolled

    enrolled = run(open_store, scenario)
    assert max(enrolled) > 0 and enrolled != sorted(enrolled), enrolled  # ups and downs


def test_the_migration_enrolls_the_persons_enrolled_before_it(
    open_store: Callable[[], Store],
) -> None:
    async def ingest_then_forget(store: Store) -> tuple[int, set[tuple[str, int]]]:
        pid = (await store.create_project("p")).id
        events = [_opt(f"p{i}", "dark", [True, "true", False][i % 3], T0 + i) for i in range(9)]
        events.append(_opt("p0", "beta", True, T0 + 9))
        events.append(
            event("x", "q", set={ENROLLMENT_PREFIX: True, "plain": True}, uid=seq_uuid(1))
        )
        await store.ingest(pid, events, [])
        before = await _rows(store, pid)
        # as a database before migration 0131: no table, the migration not applied
        if isinstance(store, PostgresStore):
            async with store._pool.acquire() as conn:
                await conn.execute(UNDO_0131 + "; DROP FUNCTION person_enrollments_count()")
        else:
            assert isinstance(store, SQLiteStore)
            with sqlite3.connect(store.path) as conn:
                conn.executescript(UNDO_0131)
        return pid, before

    async def reopened(store: Store) -> tuple[set[tuple[str, int]], dict[str, int]]:
        return await _rows(store, 1), await store.enrollment_counts(1, ["dark", "beta"])

    pid, before = run(open_store, ingest_then_forget)
    assert pid == 1 and len(before) == 7  # six of nine in "dark", one in "beta"
    after, counts = run(open_store, reopened)  # opening migrates
    assert after == before and counts == {"dark": 6, "beta": 1}
