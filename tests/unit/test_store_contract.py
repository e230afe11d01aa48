"""The storage contract, run against both backends: SQLite (a file in tmp_path) and PostgreSQL
(tests/pg.py: FLAGSTAFF_TEST_DATABASE_URL or a private server). PostgreSQL-only tests at the end
cover several nodes at once: concurrent migrations, NOTIFY, and concurrent person updates."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import msgspec
import pytest
from msgspec.structs import replace

from flagstaff.flags.records import FlagDefinition
from flagstaff.ingest.model import Drop, Event
from flagstaff.store import schema_files
from flagstaff.store.base import Conflict, IngestResult, NotFound, Store
from flagstaff.store.postgres.pool import split_url
from flagstaff.store.postgres.store import PostgresStore
from flagstaff.store.records import CohortDefinition, EventQuery
from flagstaff.store.sqlite.store import SQLiteStore
from tests import pg
from tests.events import T0, event

T = TypeVar("T")
TOKEN = "phc_contract_token"
_TABLES = (
    "projects, personal_api_keys, definitions_version, feature_flags, cohorts, persons, "
    "person_distinct_ids, cohort_members, hash_key_overrides, group_types, groups, events, "
    "event_uuids, "
    "ingestion_warnings, surveys, early_access_features, survey_aggregates, "
    "experiment_holdouts, experiments, experiment_person_state, experiment_totals"
)

Factory = Callable[[], Store]


async def _reset(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        if await conn.fetchval("SELECT to_regclass('projects') IS NOT NULL"):
            await conn.execute(f"TRUNCATE {_TABLES} RESTART IDENTITY CASCADE")
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


def ev(name: str, distinct_id: str, *, ts: int = T0, **kw: Any) -> Event:
    """The contract's events reach the server 5 ms after they happen."""
    return event(name, distinct_id, ts=ts, received_ms=ts + 5, **kw)


def identify(distinct_id: str, anon: str, **kw: Any) -> Event:
    return ev("$identify", distinct_id, props={"$anon_distinct_id": anon}, **kw)


def alias(distinct_id: str, other: str, **kw: Any) -> Event:
    return ev("$create_alias", distinct_id, props={"alias": other}, **kw)


def group_identify(group_type: str, key: str, props: dict[str, Any], ts: int = T0) -> Event:
    return ev(
        "$groupidentify",
        "someone",
        props={"$group_type": group_type, "$group_key": key, "$group_set": props},
        ts=ts,
    )


def drop(reason: str, n: int = 0) -> Drop:
    return Drop(reason, f"detail {n}", None, f"{n:016x}", None, None)


FLAG = FlagDefinition(
    key="beta",
    name="Beta",
    active=True,
    filters={"groups": [{"properties": [], "rollout_percentage": 50}]},
    ensure_experience_continuity=False,
)


# projects and keys ------------------------------------------------------------------------


def test_projects_and_personal_keys(backend: Factory) -> None:
    async def body(store: Store) -> None:
        first = await store.create_project("First", TOKEN)
        second = await store.create_project("Second")
        assert first.api_token == TOKEN and second.api_token.startswith("phc_")
        assert second.id > first.id and first.uuid != second.uuid
        with pytest.raises(Conflict) as err:
            await store.create_project("Again", TOKEN)
        assert err.value.field == "api_token"
        assert [p.id for p in await store.list_projects()] == [first.id, second.id]
        assert await store.get_project(first.id) == first
        assert await store.get_project(999) is None
        assert await store.get_project_by_token(TOKEN) == first
        assert await store.get_project_by_token("phc_nothing") is None
        assert await store.definitions_version(first.id) == 1

        key, secret = await store.create_personal_key(first.id, "ci")
        assert secret.startswith("phx_") and key.mask == f"{secret[:4]}...{secret[-4:]}"
        assert await store.find_personal_key(secret) == key
        assert await store.find_personal_key(secret + "x") is None
        own, value = await store.create_personal_key(second.id, "mine", "phx_" + "a" * 30)
        assert value == "phx_" + "a" * 30 and own.project_id == second.id
        with pytest.raises(Conflict):
            await store.create_personal_key(first.id, "dup", value)
        assert (await store.find_personal_key(value)) == own
        assert await store.ping()

    run(backend, body)


# feature flags ----------------------------------------------------------------------------


def test_flags_crud_conflicts_and_versions(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        v0 = await store.definitions_version(pid)
        flag = await store.create_flag(pid, FLAG)
        assert flag.key == "beta" and flag.version == 1 and flag.deleted is False
        assert flag.filters == FLAG.filters and flag.name == "Beta"
        assert flag.created_at == flag.updated_at
        assert await store.definitions_version(pid) == v0 + 1
        assert await store.get_flag(pid, flag.id) == flag
        assert await store.get_flag_by_key(pid, "beta") == flag
        assert await store.get_flag(pid + 1, flag.id) is None

        with pytest.raises(Conflict) as err:
            await store.create_flag(pid, FLAG)
        assert err.value.field == "key"
        assert await store.definitions_version(pid) == v0 + 1

        updated = await store.update_flag(pid, flag.id, replace(flag, name="Beta 2"), 1)
        assert updated.version == 2 and updated.name == "Beta 2"
        assert await store.definitions_version(pid) == v0 + 2
        with pytest.raises(Conflict) as err:
            await store.update_flag(pid, flag.id, flag, 1)
        assert err.value.field == "version"
        with pytest.raises(NotFound):
            await store.update_flag(pid, 12345, flag, None)

        other = await store.create_flag(pid, replace(FLAG, key="alpha"))
        with pytest.raises(Conflict) as err:
            await store.update_flag(pid, other.id, replace(other, key="beta"), other.version)
        assert err.value.field == "key"
        assert (await store.get_flag(pid, other.id) or FLAG).key == "alpha"

        gone = await store.update_flag(pid, flag.id, replace(updated, deleted=True), None)
        assert gone.deleted is True and gone.version == 3
        assert await store.get_flag_by_key(pid, "beta") is None
        again = await store.create_flag(pid, FLAG)
        assert again.id not in (flag.id, other.id)

        page = await store.list_flags(pid, 10, 0)
        assert page.count == 2 and [f.id for f in page.results] == [again.id, other.id]
        assert (await store.list_flags(pid, 10, 0, include_deleted=True)).count == 3
        assert [f.id for f in (await store.list_flags(pid, 1, 1)).results] == [other.id]

        definitions = await store.definitions(pid)
        assert definitions.version == await store.definitions_version(pid)
        assert [f["key"] for f in definitions.flags] == ["alpha", "beta"]
        assert definitions.group_type_mapping == {} and definitions.cohorts == {}

    run(backend, body)


def test_definitions_sort_flag_keys_bytewise(backend: Factory) -> None:
    async def body(store: Store) -> list[str]:
        pid = (await store.create_project("P", TOKEN)).id
        for key in ["b", "B", "a-1", "a_1", "é", "Z"]:
            await store.create_flag(pid, replace(FLAG, key=key))
        return [f["key"] for f in (await store.definitions(pid)).flags]

    assert run(backend, body) == ["B", "Z", "a-1", "a_1", "b", "é"]


# cohorts -----------------------------------------------------------------------------------


def test_cohorts_and_static_members(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        v0 = await store.definitions_version(pid)
        filters = {"properties": {"type": "AND", "values": []}}
        dynamic = await store.create_cohort(
            pid, CohortDefinition(name="Dyn", description="", filters=filters)
        )
        assert dynamic.is_static is False and dynamic.count == 0
        assert dynamic.version == 1 and dynamic.name == "Dyn" and dynamic.filters == filters
        static = await store.create_cohort(
            pid,
            CohortDefinition(
                name="S", description=None, filters=None, is_static=True,
                distinct_ids=["b", "a", "a"],
            ),
        )  # fmt: skip
        assert static.is_static is True and static.count == 2 and static.description is None
        assert await store.definitions_version(pid) == v0 + 2
        assert await store.list_static_members(pid, static.id) == ["a", "b"]

        changed = await store.change_static_members(pid, static.id, ["c", "a"], ["b", "zz"])
        assert changed.count == 2 and changed.version == 2
        assert await store.list_static_members(pid, static.id) == ["a", "c"]
        assert await store.definitions_version(pid) == v0 + 2
        with pytest.raises(Conflict):
            await store.change_static_members(pid, dynamic.id, ["x"], [])
        with pytest.raises(NotFound):
            await store.change_static_members(pid, 999, ["x"], [])

        rename = CohortDefinition(name="Dyn 2", description="", filters=filters)
        renamed = await store.update_cohort(pid, dynamic.id, rename)
        assert renamed.name == "Dyn 2" and renamed.version == 2
        assert await store.definitions_version(pid) == v0 + 3
        with pytest.raises(NotFound):
            await store.update_cohort(pid, 999, rename)
        assert await store.get_cohort(pid, dynamic.id) == renamed
        assert await store.get_cohort(pid + 1, dynamic.id) is None

        page = await store.list_cohorts(pid, 10, 0)
        assert page.count == 2 and [c.id for c in page.results] == [static.id, dynamic.id]
        deleted = msgspec.structs.replace(rename, deleted=True)
        assert (await store.update_cohort(pid, dynamic.id, deleted)).deleted is True
        assert (await store.list_cohorts(pid, 10, 0)).count == 1
        with pytest.raises(NotFound):
            await store.change_static_members(pid, dynamic.id, ["x"], [])
        definitions = await store.definitions(pid)
        assert list(definitions.cohorts) == [str(static.id)]
        assert definitions.cohorts[str(static.id)]["count"] == 2

    run(backend, body)


def _static_cohort(name: str, distinct_ids: list[str]) -> CohortDefinition:
    return CohortDefinition(
        name=name, description="", filters=None, is_static=True, distinct_ids=distinct_ids
    )


# what /flags reads --------------------------------------------------------------------------


def test_flag_context_reads_person_overrides_cohorts_and_groups(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        empty = await store.flag_context(pid, "nobody", {0: "acme"}, overrides=True)
        assert empty.person_id is None and empty.person_properties == {}
        assert empty.group_properties == {} and empty.hash_key_overrides == {}
        await store.add_hash_key_overrides(pid, "nobody", "anon", ["beta"])

        static = await store.create_cohort(pid, _static_cohort("S", ["anon-1", "loner"]))
        other = await store.create_cohort(pid, _static_cohort("T", ["user-1"]))
        await store.ingest(
            pid,
            [
                ev("$pageview", "anon-1", set={"plan": "free"}),
                identify("user-1", "anon-1", set={"email": "u@x.io"}),
                group_identify("company", "acme", {"size": 10}),
                group_identify("team", "red", {"color": "red"}),
            ],
            [],
        )
        await store.add_hash_key_overrides(pid, "anon-1", "anon-1", ["beta", "gamma"])
        await store.add_hash_key_overrides(pid, "user-1", "other", ["beta", "delta"])

        ctx = await store.flag_context(
            pid, "user-1", {0: "acme", 1: "red", 2: "none"}, overrides=True, static_cohorts=True
        )
        person = await store.get_person(pid, "user-1")
        assert person is not None and ctx.person_id == person.id
        assert ctx.person_properties == {"plan": "free", "email": "u@x.io"}
        assert ctx.hash_key_overrides == {"beta": "anon-1", "gamma": "anon-1", "delta": "other"}
        assert ctx.static_cohort_ids == frozenset({static.id, other.id})
        assert ctx.group_properties == {"0": {"size": 10}, "1": {"color": "red"}}

        plain = await store.flag_context(pid, "anon-1", {})
        assert plain.person_id == person.id and plain.hash_key_overrides == {}
        assert plain.static_cohort_ids == frozenset() and plain.group_properties == {}
        lone = await store.flag_context(pid, "loner", {}, static_cohorts=True)
        assert lone.person_id is None and lone.static_cohort_ids == frozenset({static.id})
        assert (await store.flag_context(pid + 1, "user-1", {})).person_id is None

    run(backend, body)


# ingestion: persons -------------------------------------------------------------------------


def test_ingest_creates_and_updates_persons(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        result = await store.ingest(
            pid,
            [
                ev("$pageview", "u1", set={"a": 1, "b": 1}, set_once={"first": "x"}, ts=T0 + 10),
                ev("$pageview", "u1", set={"a": 2}, set_once={"first": "y"}, ts=T0 + 5),
                ev("$pageview", "u1", props={"$browser": "Firefox"}, unset=["b"]),
            ],
            [],
        )
        assert (result.ingested, result.duplicates, result.dropped) == (3, 0, {})
        person = await store.get_person(pid, "u1")
        assert person is not None
        assert person.properties == {
            "a": 2,
            "first": "x",
            "$browser": "Firefox",
            "$initial_browser": "Firefox",
        }
        assert person.is_identified is False and person.created_at_ms == T0 + 10
        assert person.distinct_ids == ["u1"]
        assert await store.get_person(pid, "u2") is None
        assert await store.get_person(pid + 1, "u1") is None

        await store.ingest(pid, [ev("x", "u1", set={"a": 3}, set_once={"a": 9, "c": 1})], [])
        again = await store.get_person(pid, "u1")
        assert again is not None and again.id == person.id and again.uuid == person.uuid
        assert again.properties["a"] == 3 and again.properties["c"] == 1

        await store.ingest(pid, [ev("anon", "u3", set={"a": 1}, process_person=False)], [])
        assert await store.get_person(pid, "u3") is None

    run(backend, body)


def test_identify_and_alias_merge_persons(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        await store.ingest(
            pid,
            [
                ev("$pageview", "anon", set={"shared": "anon", "only_anon": 1}, ts=T0 - 100),
                ev("$pageview", "user", set={"shared": "user"}, ts=T0),
            ],
            [],
        )
        user_before = await store.get_person(pid, "user")
        assert user_before is not None
        await store.add_hash_key_overrides(pid, "anon", "anon", ["beta"])
        await store.add_hash_key_overrides(pid, "user", "user", ["gamma"])
        await store.ingest(pid, [identify("user", "anon", set={"after": True})], [])
        person = await store.get_person(pid, "anon")
        assert person is not None and person.id == user_before.id
        assert person.distinct_ids == ["anon", "user"]
        assert person.properties == {"shared": "user", "only_anon": 1, "after": True}
        assert person.is_identified is True and person.created_at_ms == T0 - 100
        ctx = await store.flag_context(pid, "user", {}, overrides=True)
        assert ctx.hash_key_overrides == {"beta": "anon", "gamma": "user"}

        # an alias to a new id joins the person; one to an identified person does not merge
        await store.ingest(pid, [alias("user", "mail@x.io")], [])
        assert (await store.get_person(pid, "mail@x.io") or person).id == person.id
        await store.ingest(pid, [identify("other", "x1"), ev("e", "loner")], [])
        await store.ingest(pid, [alias("loner", "other")], [])
        assert (await store.get_person(pid, "loner") or person).id != (
            await store.get_person(pid, "other") or person
        ).id
        warnings = (await store.list_warnings(pid, 10, 0)).results
        assert [w.type for w in warnings] == ["cannot_merge_already_identified"]
        assert warnings[0].details["sourcePersonDistinctId"] == "other"

        # $merge_dangerously merges even an identified person
        await store.ingest(pid, [ev("$merge_dangerously", "loner", props={"alias": "other"})], [])
        merged = await store.get_person(pid, "other")
        assert merged is not None and merged.distinct_ids == ["loner", "other", "x1"]

    run(backend, body)


def test_illegal_ids_are_not_merged(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        await store.ingest(pid, [ev("e", "anonymous"), identify("user", "anonymous")], [])
        await store.ingest(pid, [alias("null", "user2")], [])
        user = await store.get_person(pid, "user")
        anonymous = await store.get_person(pid, "anonymous")
        assert user is not None and anonymous is not None and user.id != anonymous.id
        assert await store.get_person(pid, "user2") is None
        warnings = (await store.list_warnings(pid, 10, 0)).results
        assert [w.type for w in warnings] == ["cannot_merge_with_illegal_distinct_id"] * 2
        assert {w.details["illegalDistinctId"] for w in warnings} == {"anonymous", "null"}

    run(backend, body)


def test_merge_inside_one_batch_and_chained(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        await store.ingest(pid, [ev("e", "c", set={"c": 1}, ts=T0 - 50)], [])
        await store.ingest(
            pid,
            [
                ev("e", "a", set={"a": 1}),
                ev("e", "b", set={"b": 1}),
                identify("b", "a"),
                alias("b", "c"),
                ev("e", "a", set={"late": 1}),
            ],
            [],
        )
        person = await store.get_person(pid, "a")
        assert person is not None and person.distinct_ids == ["a", "b", "c"]
        assert person.properties == {"a": 1, "b": 1, "c": 1, "late": 1}
        assert person.created_at_ms == T0 - 50

    run(backend, body)


# ingestion: groups, dedup, warnings ----------------------------------------------------------


def test_groups_and_the_five_type_limit(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        v0 = await store.definitions_version(pid)
        await store.ingest(pid, [group_identify("company", "acme", {"a": 1}, ts=T0)], [])
        assert await store.definitions_version(pid) == v0 + 1
        await store.ingest(
            pid, [group_identify("company", "acme", {"b": 2, "a": 3}, ts=T0 + 9)], []
        )
        assert await store.definitions_version(pid) == v0 + 1
        group = await store.get_group(pid, 0, "acme")
        assert group is not None and group.group_type == "company"
        assert group.properties == {"a": 3, "b": 2} and group.created_at_ms == T0
        assert await store.get_group(pid, 0, "other") is None
        assert await store.get_person(pid, "someone") is None

        batch = [group_identify(f"type{i}", "k", {}) for i in range(1, 6)]
        batch.append(ev("$groupidentify", "x", props={"$group_type": 5}))
        result = await store.ingest(pid, batch, [])
        assert result.ingested == 4
        assert result.dropped == {"group_type_limit_reached": 1, "invalid_group_identify": 1}
        types = await store.list_group_types(pid)
        assert types == {0: "company", 1: "type1", 2: "type2", 3: "type3", 4: "type4"}
        assert (await store.definitions(pid)).group_type_mapping == {
            str(i): name for i, name in types.items()
        }
        kinds = sorted(w.type for w in (await store.list_warnings(pid, 10, 0)).results)
        assert kinds == ["group_type_limit_reached", "invalid_group_identify"]

    run(backend, body)


def test_dedup_by_uuid_and_warnings(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        other = (await store.create_project("Q")).id
        uid = str(uuid.uuid4())
        first = await store.ingest(
            pid, [ev("a", "u", uid=uid), ev("b", "u", uid=uid)], [drop("missing_event_name")]
        )
        assert (first.ingested, first.duplicates) == (1, 1)
        assert first.dropped == {"missing_event_name": 1}
        second = await store.ingest(pid, [ev("c", "u", uid=uid), ev("d", "u")], [])
        assert (second.ingested, second.duplicates) == (1, 1)
        assert (await store.ingest(other, [ev("a", "u", uid=uid)], [])).ingested == 1
        assert len(await store.list_events(other, EventQuery())) == 1
        names = {e.event for e in await store.list_events(pid, EventQuery())}
        assert names == {"a", "d"}

        await store.ingest(pid, [], [drop("invalid_distinct_id", 1), drop("x", 2)])
        await store.ingest(pid, [], [])
        page = await store.list_warnings(pid, 2, 0)
        assert page.count == 3 and [w.type for w in page.results] == ["x", "invalid_distinct_id"]
        oldest = (await store.list_warnings(pid, 2, 2)).results[0]
        assert oldest.type == "missing_event_name"
        assert oldest.details == {
            "reason": "missing_event_name",
            "detail": "detail 0",
            "eventUuid": None,
            "digest": "0000000000000000",
            "event": None,
            "distinct_id": None,
        }
        assert oldest.created_at_ms > T0
        assert (await store.list_warnings(other, 10, 0)).count == 0

    run(backend, body)


def test_events_listing_cursor_and_iteration(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        events = [
            ev("$pageview" if i % 2 else "click", f"u{i % 3}", props={"i": i}, ts=T0 + (i // 2))
            for i in range(10)
        ]
        await store.ingest(pid, events, [])
        await store.ingest(pid, [identify("u0", "u1", ts=T0 + 10)], [])
        listed = await store.list_events(pid, EventQuery())
        assert len(listed) == 11
        keys = [(e.timestamp_ms, e.seq) for e in listed]
        assert keys == sorted(keys, reverse=True)
        newest = listed[1]
        assert newest.properties == {"i": 9} and newest.received_ms == newest.timestamp_ms + 5
        assert newest.historical is False and newest.uuid == events[9].uuid

        person = await store.get_person(pid, "u0")
        assert person is not None
        for e in listed:
            if e.distinct_id in ("u0", "u1"):
                assert (e.person_id, e.person_uuid) == (person.id, person.uuid)

        pages: list[int] = []
        cursor: tuple[int, int] | None = None
        while True:
            page = await store.list_events(pid, EventQuery(cursor=cursor, limit=3))
            if not page:
                break
            pages.extend(e.seq for e in page)
            cursor = (page[-1].timestamp_ms, page[-1].seq)
        assert pages == [e.seq for e in listed]

        only = await store.list_events(pid, EventQuery(distinct_id="u2", event="$pageview"))
        assert [e.properties["i"] for e in only] == [5]
        window = await store.list_events(pid, EventQuery(after_ms=T0 + 1, before_ms=T0 + 4))
        assert sorted(e.properties["i"] for e in window) == [4, 5, 6, 7]

        batches = [b async for b in store.iter_events(pid, T0 + 2, batch=2)]
        assert [len(b) for b in batches] == [2, 2, 2, 1]
        flat = [e for b in batches for e in b]
        assert [e.seq for e in flat] == sorted(e.seq for e in flat)
        assert {e.properties.get("i") for e in flat} == {4, 5, 6, 7, 8, 9, None}
        assert sum([len(b) async for b in store.iter_events(pid, None)]) == 11

    run(backend, body)


# both backends reach the same state ----------------------------------------------------------


def _stream(seed: int) -> list[list[Event]]:
    rng = random.Random(seed)
    ids = [f"d{i}" for i in range(8)] + ["anonymous"]
    batches: list[list[Event]] = []
    ts = T0
    for _ in range(30):
        batch: list[Event] = []
        for _ in range(rng.randint(1, 6)):
            ts += rng.randint(0, 3)
            a, b = rng.sample(ids, 2)
            kind = rng.random()
            if kind < 0.15:
                batch.append(
                    identify(a, b, set={f"k{rng.randint(0, 5)}": rng.randint(0, 9)}, ts=ts)
                )
            elif kind < 0.25:
                batch.append(alias(a, b, ts=ts))
            elif kind < 0.3:
                batch.append(group_identify("org", f"o{rng.randint(0, 2)}", {"n": ts}, ts=ts))
            else:
                batch.append(
                    ev(
                        "e",
                        a,
                        set={f"k{rng.randint(0, 5)}": rng.randint(0, 9)},
                        set_once={f"o{rng.randint(0, 3)}": ts},
                        unset=[f"k{rng.randint(0, 5)}"] if rng.random() < 0.2 else None,
                        ts=ts,
                    )
                )
        batches.append(batch)
    return batches


def test_both_backends_agree_on_a_random_stream(tmp_path: Path) -> None:
    url = pg.postgres_url()
    asyncio.run(_reset(url))
    stream = _stream(7)

    async def body(store: Store) -> Any:
        pid = (await store.create_project("P", TOKEN)).id
        results = [await store.ingest(pid, batch, []) for batch in stream]
        people = {}
        for i in [*range(8), "anonymous"]:
            did = f"d{i}" if isinstance(i, int) else i
            person = await store.get_person(pid, did)
            if person is not None:
                people[did] = (
                    person.properties,
                    person.is_identified,
                    person.created_at_ms,
                    person.distinct_ids,
                )
        groups = [await store.get_group(pid, 0, f"o{i}") for i in range(3)]
        warnings = [(w.type, w.details) for w in (await store.list_warnings(pid, 100, 0)).results]
        events = [(e.uuid, e.distinct_id) for e in await store.list_events(pid, EventQuery())]
        return results, people, groups, warnings, events

    on_sqlite = run(lambda: SQLiteStore(tmp_path / "s.sqlite3"), body)
    on_postgres = run(lambda: PostgresStore(url), body)
    assert on_sqlite[1]
    assert on_postgres == on_sqlite


# PostgreSQL only: several nodes on one database ----------------------------------------------


def test_postgres_nodes_migrate_concurrently_and_share_a_schema() -> None:
    url = pg.new_database()

    async def main() -> None:
        stores = [PostgresStore(url + "?pool_size=2") for _ in range(4)]
        await asyncio.gather(*(s.open() for s in stores))
        try:
            conn = await asyncpg.connect(url)
            try:
                rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
            finally:
                await conn.close()
            shipped = schema_files.pending("flagstaff.store.postgres", set())
            assert [r[0] for r in rows] == [m.number for m in shipped]  # each applied once
            project = await stores[0].create_project("P", TOKEN)
            assert await stores[3].get_project_by_token(TOKEN) == project
            assert stores[0].pool_size == 2
        finally:
            await asyncio.gather(*(s.close() for s in stores))

    asyncio.run(main())


def test_postgres_notifies_definitions_changes_to_other_nodes() -> None:
    url = pg.postgres_url()
    asyncio.run(_reset(url))

    async def main() -> None:
        writer, reader = PostgresStore(url), PostgresStore(url)
        await writer.open()
        await reader.open()
        seen: asyncio.Queue[int | None] = asyncio.Queue()
        try:
            await reader.listen_definitions(seen.put_nowait)
            pid = (await writer.create_project("P", TOKEN)).id
            assert await asyncio.wait_for(seen.get(), 5) == pid
            await writer.create_flag(pid, FLAG)
            assert await asyncio.wait_for(seen.get(), 5) == pid
            await writer.ingest(pid, [group_identify("company", "acme", {})], [])
            assert await asyncio.wait_for(seen.get(), 5) == pid
            await writer.ingest(pid, [ev("e", "u")], [])
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(seen.get(), 0.3)
            with pytest.raises(RuntimeError):
                await reader.listen_definitions(seen.put_nowait)

            # a lost listening connection is re-established and reported as None
            admin = await asyncpg.connect(url)
            try:
                killed = await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
            finally:
                await admin.close()
            assert killed == 1
            assert await asyncio.wait_for(seen.get(), 35) is None
            await writer.create_flag(pid, replace(FLAG, key="after-reconnect"))
            assert await asyncio.wait_for(seen.get(), 5) == pid
        finally:
            await reader.close()
            await writer.close()

    asyncio.run(main())


def test_postgres_keeps_text_with_nul_characters() -> None:
    url = pg.postgres_url()
    asyncio.run(_reset(url))

    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        result = await store.ingest(
            pid,
            [
                ev("bad\x00name", "u\x00", props={"v": "\x00"}, set={"k": "\x00"}),
                identify("u\x00", "a\x00"),
                group_identify("t\x00", "k\x00", {"x": "\x00"}),
            ],
            [],
        )
        assert result.ingested == 3
        person = await store.get_person(pid, "u\x00")
        assert person is not None and person.properties == {"k": "\x00"}
        assert person.distinct_ids == ["a\ufffd", "u\ufffd"]
        assert (await store.get_group(pid, 0, "k\x00") or person).properties == {"x": "\x00"}
        listed = await store.list_events(pid, EventQuery(event="bad\x00name"))
        assert [e.properties for e in listed] == [{"v": "\x00"}]

    run(lambda: PostgresStore(url), body)


def test_postgres_concurrent_nodes_lose_no_person_update() -> None:
    """Several pools (nodes) ingest $set of different keys, identifies and aliases of the
    same persons at once; the end state is one person holding every update."""
    url = pg.postgres_url()
    asyncio.run(_reset(url))
    n = 24
    rng = random.Random(3)
    batches: list[list[Event]] = []
    for i in range(n):
        batches.append([ev("$pageview", f"anon-{i}", set={f"anon{i}": i})])
        batches.append([identify("user", f"anon-{i}", set={f"ident{i}": i})])
        batches.append([alias("user", f"alias-{i}", set={f"alias{i}": i})])
        batches.append([ev("e", "user", set={f"direct{i}": i}), ev("e", f"anon-{i}", set={"x": i})])
        batches.append(
            [
                ev("e", f"anon-{(i + 1) % n}", set={f"late{i}": i}),
                ev("e", f"alias-{i}", set={f"via_alias{i}": i}),
                ev("e", f"anon-{i}", set={f"late_b{i}": i}),
            ]
        )
    rng.shuffle(batches)
    delays = [rng.random() * 0.2 for _ in batches]

    async def main() -> None:
        nodes = [PostgresStore(url + "?pool_size=3&ingest_lanes=3") for _ in range(4)]
        for node in nodes:
            await node.open()

        async def send(i: int, batch: list[Event]) -> IngestResult:
            await asyncio.sleep(delays[i])
            return await nodes[i % len(nodes)].ingest(pid, batch, [])

        try:
            pid = (await nodes[0].create_project("P", TOKEN)).id
            results = await asyncio.gather(*(send(i, b) for i, b in enumerate(batches)))
            assert sum(r.ingested for r in results) == sum(len(b) for b in batches)
            person = await nodes[1].get_person(pid, "user")
            assert person is not None
            expected_ids = (
                {"user"} | {f"anon-{i}" for i in range(n)} | {f"alias-{i}" for i in range(n)}
            )
            assert set(person.distinct_ids) == expected_ids
            for prefix in ("anon", "ident", "alias", "direct", "late", "via_alias", "late_b"):
                for i in range(n):
                    assert person.properties.get(f"{prefix}{i}") == i, (prefix, i)
            assert person.is_identified is True
            conn = await asyncpg.connect(url)
            try:
                assert await conn.fetchval("SELECT count(*) FROM persons") == 1
            finally:
                await conn.close()
            assert (await nodes[2].list_warnings(pid, 10, 0)).count == 0
        finally:
            for node in nodes:
                await node.close()

    asyncio.run(main())


def test_postgres_group_commit_combines_calls_and_isolates_failures() -> None:
    url = pg.postgres_url()
    asyncio.run(_reset(url))

    async def body(store: Store) -> None:
        assert isinstance(store, PostgresStore) and store.ingest_lanes == 1
        pid = (await store.create_project("P", TOKEN)).id
        shared = str(uuid.uuid4())
        before = store.ingest_transactions
        first, second, third = await asyncio.gather(
            store.ingest(pid, [ev("a", "u", set={"a": 1}), ev("b", "u", uid=shared)], []),
            store.ingest(pid, [ev("c", "u", uid=shared), identify("u", "v")], [drop("x")]),
            store.ingest(pid, [ev("d", "v", set={"d": 1})], []),
        )
        assert store.ingest_transactions == before + 1
        assert (first.ingested, first.duplicates) == (2, 0)
        assert (second.ingested, second.duplicates, second.dropped) == (1, 1, {"x": 1})
        assert (third.ingested, third.duplicates) == (1, 0)
        person = await store.get_person(pid, "v")
        assert person is not None and person.distinct_ids == ["u", "v"]
        assert person.properties == {"a": 1, "d": 1}

        broken = ev("e", "w", ts=2**70)
        ok, failed = await asyncio.gather(
            store.ingest(pid, [ev("f", "w")], []),
            store.ingest(pid, [broken], []),
            return_exceptions=True,
        )
        assert not isinstance(ok, BaseException) and ok.ingested == 1
        assert isinstance(failed, Exception)
        assert len(await store.list_events(pid, EventQuery())) == 5

    run(lambda: PostgresStore(url + "?ingest_lanes=1"), body)


def test_postgres_url_options_default_to_one_ingest_lane() -> None:
    dsn, options = split_url("postgresql://u@h:5432/db?sslmode=disable")
    assert dsn == "postgresql://u@h:5432/db?sslmode=disable"
    assert options == {"pool_size": 10, "ingest_lanes": 1}
    _, options = split_url("postgresql://u@h/db?pool_size=4&ingest_lanes=3")
    assert options == {"pool_size": 4, "ingest_lanes": 3}


def test_postgres_pool_plans_generically_and_rolls_back_a_transaction_left_open() -> None:
    """The pool skips asyncpg's reset query; what it must still undo, it undoes."""
    url = pg.postgres_url()
    asyncio.run(_reset(url))

    async def body(store: Store) -> None:
        assert isinstance(store, PostgresStore)
        pool = store.pool
        assert await pool.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
        conn = await pool.acquire()
        await conn.execute("BEGIN")
        await conn.execute(
            "INSERT INTO projects (uuid, name, api_token, created_at) "
            "VALUES ('u-left-open', 'left open', $1, 'now')",
            TOKEN,
        )
        await pool.release(conn)
        async with pool.acquire() as again:
            assert not again.is_in_transaction()
            assert await again.fetchval("SELECT count(*) FROM projects") == 0

    run(lambda: PostgresStore(url + "?pool_size=1"), body)
