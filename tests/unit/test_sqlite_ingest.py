"""The SQLite ingestion writer: the person cache never changes what is stored."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flagstaff.ingest.model import Event
from flagstaff.store.sqlite.ingest import apply_ingest
from flagstaff.store.sqlite.person_cache import PersonCache
from flagstaff.store.sqlite.schema import migrate
from flagstaff.store.sqlite.writer import connect
from tests.events import T0, event, random_person_event, seq_uuid
from tests.memory import held_after, stored_persons


def _state(conn: sqlite3.Connection) -> list[Any]:
    persons = conn.execute(
        "SELECT p.uuid, p.properties, p.is_identified, p.created_at_ms, "
        "group_concat(d.distinct_id) FROM persons p "
        "JOIN (SELECT * FROM person_distinct_ids ORDER BY distinct_id) d ON d.person_id = p.id "
        "GROUP BY p.id ORDER BY p.uuid"
    ).fetchall()
    return [
        (u, msgspec.json.decode(props), ident, created, ids)
        for u, props, ident, created, ids in persons
    ]


@pytest.mark.parametrize("cache_size", [5_000, 100_000_000])
@pytest.mark.parametrize("seed", range(6))
def test_cached_and_uncached_writers_store_the_same_persons(
    tmp_path: Path, seed: int, cache_size: int
) -> None:
    rng = random.Random(seed)
    batches = [
        [random_person_event(rng, b * 50 + i) for i in range(rng.randint(1, 50))] for b in range(40)
    ]
    results = []
    for name, cache in (("plain", None), ("cached", PersonCache(limit_bytes=cache_size))):
        path = tmp_path / f"{name}.sqlite3"
        migrate(path)
        conn = connect(path)
        for start in range(0, len(batches), 5):
            conn.execute("BEGIN IMMEDIATE")
            for batch in batches[start : start + 5]:
                apply_ingest(conn, 1, [msgspec.structs.replace(e) for e in batch], [], 0, cache)
            conn.execute("COMMIT")
        results.append(_state(conn))
        conn.close()
    plain, cached = results
    assert plain == cached
    assert plain, "the stream created no persons"


def test_failed_transaction_clears_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    migrate(path)
    conn = connect(path)
    cache = PersonCache()
    rng = random.Random(1)
    conn.execute("BEGIN IMMEDIATE")
    apply_ingest(conn, 1, [random_person_event(rng, i) for i in range(20)], [], 0, cache)
    conn.execute("COMMIT")
    assert len(cache) > 0
    bad = random_person_event(rng, 99)
    bad.properties = {"x": object()}  # cannot be encoded: the write fails
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(TypeError):
        apply_ingest(conn, 1, [bad], [], 0, cache)
    conn.execute("ROLLBACK")
    assert len(cache) == 0


def _named(n: int, name: str, did: str, **props: Any) -> Event:
    return event(name, did, props=props, ts=T0 + n, uid=seq_uuid(n, lane=1), set={"x": n})


def test_distinct_id_of_a_merged_person_outside_the_batch_follows_the_merge(
    tmp_path: Path,
) -> None:
    """b's person is merged away in a batch that names only a; b must then reach the survivor."""
    batches = [
        [_named(1, "$create_alias", "a", alias="b")],
        [_named(2, "$pageview", "c")],
        [_named(3, "$merge_dangerously", "c", alias="a")],
        [_named(4, "$pageview", "b")],
    ]
    results = []
    for name, cache in (("plain", None), ("cached", PersonCache())):
        path = tmp_path / f"{name}.sqlite3"
        migrate(path)
        conn = connect(path)
        for batch in batches:
            conn.execute("BEGIN IMMEDIATE")
            apply_ingest(conn, 1, [msgspec.structs.replace(e) for e in batch], [], 0, cache)
            conn.execute("COMMIT")
        results.append(_state(conn))
        conn.close()
    assert results[0] == results[1]
    [(_, props, _, _, ids)] = results[0]
    assert ids == "a,b,c" and props["x"] == 4


def test_apply_many_isolates_a_failing_request(tmp_path: Path) -> None:
    from flagstaff.store.sqlite.ingest import apply_many

    path = tmp_path / "db.sqlite3"
    migrate(path)
    conn = connect(path)
    rng = random.Random(3)
    good = [random_person_event(rng, i) for i in range(5)]
    bad = random_person_event(rng, 50)
    bad.properties = {"x": object()}
    other_project = [random_person_event(rng, 60)]
    conn.execute("BEGIN IMMEDIATE")
    results = apply_many(conn, [(1, good, []), (1, [bad], []), (2, other_project, [])], 0)
    conn.execute("COMMIT")
    assert isinstance(results[1], TypeError)
    assert not isinstance(results[0], Exception) and results[0].ingested == 5
    assert not isinstance(results[2], Exception) and results[2].ingested == 1
    stored = conn.execute("SELECT project_id, COUNT(*) FROM events GROUP BY 1").fetchall()
    assert stored == [(1, 5), (2, 1)]


def test_the_person_cache_starts_over_past_its_bytes() -> None:
    from flagstaff.ingest.persons import PersonState
    from flagstaff.store.sqlite.person_cache import DISTINCT_ID_BYTES, person_size

    def state(n: int) -> PersonState:
        return PersonState(n, f"uuid-{n}", {"plan": "pro", "n": n}, True, 0)

    one = person_size(state(1)) + DISTINCT_ID_BYTES
    cache = PersonCache(limit_bytes=one * 3)
    cache.remember(1, {f"d{n}": state(n) for n in range(1, 4)})
    assert len(cache) == 3 and cache.bytes == one * 3
    cache.remember(1, {"d1": state(1)})  # known: costs nothing more
    assert cache.bytes == one * 3 and cache.get(1, "d1") is not None
    cache.remember(1, {"d4": state(4)})  # past the bound: starts over with the new batch
    assert len(cache) == 1 and cache.get(1, "d4") is not None and cache.get(1, "d1") is None
    assert cache.bytes == one


def test_the_person_cache_estimate_bounds_what_persons_take() -> None:
    """What the ingest writer's cached persons hold (tracemalloc, with their distinct ids)
    never passes the bytes counted against the bound, nor the count the bound."""
    from flagstaff.ingest.persons import PersonState, person_uuid

    stored = stored_persons(3000, seed=3)
    cache = PersonCache(limit_bytes=2 << 20)

    def remember(n: int, did: str, text: bytes) -> None:
        state = PersonState(n + 1, person_uuid(1, did), msgspec.json.decode(text), False, 0)
        cache.remember(1, {did: state})

    def fill() -> None:
        for n, person in enumerate(stored[:1000]):
            remember(n, *person)

    held = held_after(fill)
    assert len(cache) == 1000 and held <= cache.bytes
    for n, person in enumerate(stored):
        remember(n, *person)
        assert cache.bytes <= cache.limit
    assert len(cache) < len(stored)
