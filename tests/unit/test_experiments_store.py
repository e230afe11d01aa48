"""Experiment aggregates in both stores, driven through ``Store.ingest`` (no HTTP): merges of
exposed identities, retried events, an event that concerns no experiment, and that the
aggregates kept at ingestion equal a recompute from the stored events."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from flagstaff.application.flags import flag_from_input
from flagstaff.common.units import DAY_MS
from flagstaff.experiments.exposure import ExperimentSpec, ExperimentTotals
from flagstaff.experiments.model import experiment_flag, parse_experiment
from flagstaff.ingest.model import Drop, Event
from flagstaff.store.base import IngestResult, Store
from flagstaff.store.experiment_batch import decode_totals, encode_totals
from flagstaff.store.postgres import experiments as postgres_experiments
from flagstaff.store.postgres.store import PostgresStore
from flagstaff.store.records import FlagWrite
from flagstaff.store.sqlite import experiments as sqlite_experiments
from flagstaff.store.sqlite.ingest import apply_ingest
from flagstaff.store.sqlite.person_cache import PersonCache
from flagstaff.store.sqlite.store import SQLiteStore
from tests import pg
from tests.events import T0, event

T = TypeVar("T")
START = "2023-01-01T00:00:00Z"  # before tests.events.T0


class WriterCacheStore(SQLiteStore):
    """Ingests as the ingest writer process does: persons and exposed persons' experiment
    states kept in memory between batches (``PersonCache``)."""

    def __init__(self, path: Path, remembered: int = 300_000) -> None:
        super().__init__(path)
        self.cache = PersonCache()
        self.cache.experiments.max_entries = remembered

    async def ingest(self, project_id: int, events: list[Event], drops: list[Drop]) -> IngestResult:
        now_ms = int(time.time() * 1000)
        cache = self.cache
        return await self._writer.submit(
            lambda conn: apply_ingest(conn, project_id, events, drops, now_ms, cache)
        )


@pytest.fixture(
    params=["sqlite", "sqlite-writer-cache", "sqlite-writer-cache-overflowing", "postgres"]
)
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    if request.param == "sqlite":
        yield lambda: SQLiteStore(tmp_path / "db.sqlite3")
    elif request.param == "sqlite-writer-cache":
        yield lambda: WriterCacheStore(tmp_path / "db.sqlite3")
    elif request.param == "sqlite-writer-cache-overflowing":
        # more persons than it may remember: dropped after each batch, read back from rows
        yield lambda: WriterCacheStore(tmp_path / "db.sqlite3", remembered=1)
    else:
        url = pg.new_database()
        yield lambda: PostgresStore(url)


def run(open_store: Callable[[], Store], fn: Callable[[Store], Awaitable[T]]) -> T:
    async def go() -> T:
        store = open_store()
        await store.open()
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


def _definition(key: str) -> Any:
    return parse_experiment(
        {
            "name": "e",
            "feature_flag_key": key,
            "start_date": START,
            "metrics": [
                {
                    "uuid": "spend",
                    "metric_type": "mean",
                    "source": {"event": "buy", "math": "sum", "math_property": "amount"},
                }
            ],
        }
    )


def flag_write(definition: Any) -> FlagWrite:
    """The new flag an experiment creates, as the use case writes it."""
    return FlagWrite(flag=flag_from_input(experiment_flag(definition)))


def _exposure(distinct_id: str, variant: str, ts: int) -> Any:
    props = {"$feature_flag": "exp", "$feature_flag_response": variant}
    return event("$feature_flag_called", distinct_id, props=props, ts=ts)


def _plain(totals: ExperimentTotals) -> dict[str, Any]:
    return {
        key: (v.exposed, v.metrics[0].sum, v.metrics[0].sum_squares, v.days)
        for key, v in sorted(totals.variants.items())
        if v.exposed or v.metrics[0].sum
    } | {"excluded": totals.multiple_variant_persons}


async def _state_rows(store: Store, experiment_id: int) -> set[str]:
    """The persons with a stored state for the experiment (read from the engine's table)."""
    query = "SELECT person_uuid FROM experiment_person_state WHERE experiment_id = "
    if isinstance(store, PostgresStore):
        async with store._pool.acquire() as conn:
            rows = await conn.fetch(query + "$1", experiment_id)
        return {str(row[0]) for row in rows}
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        return {row[0] for row in conn.execute(query + "?", (experiment_id,))}


def test_merges_retries_and_recompute_agree(open_store: Callable[[], Store]) -> None:
    async def scenario(store: Store) -> tuple[dict[str, Any], dict[str, Any], int]:
        project = await store.create_project("p")
        pid = project.id
        definition = _definition("exp")
        record = await store.create_experiment(pid, definition, flag_write(definition))
        fingerprint = ExperimentSpec(record.id, definition).fingerprint
        retried = event("buy", "a1", props={"amount": 4}, ts=T0 + 50)
        exposed = _exposure("a1", "test", T0)
        batches = [
            # a1 and b1 exposed to different variants, then a2 exposed before its identify
            [exposed, _exposure("b1", "control", T0)],
            [event("buy", "a1", props={"amount": 3}, ts=T0 + 10), retried],
            # retries of the same uuids count once, beside a new buy that counts
            [retried, exposed, event("buy", "a1", props={"amount": 1}, ts=T0 + 55)],
            [_exposure("a2", "test", T0 + 20), event("buy", "a2", props={"amount": 5}, ts=T0 + 30)],
            # a2 (test, spent 5) is a1's anonymous id: one person, spent 13
            [event("$identify", "a1", props={"$anon_distinct_id": "a2"}, ts=T0 + 40)],
            # b2, exposed to test, turns out to be b1 (control): excluded
            [_exposure("b2", "test", T0 + 60)],
            [event("$create_alias", "b1", props={"alias": "b2"}, ts=T0 + 70)],
            # concerns no experiment
            [event("$pageview", "a1", ts=T0 + 80), event("buy", "nobody", props={"amount": 9})],
        ]
        for batch in batches:
            await store.ingest(pid, batch, [])
        kept = _plain(await store.experiment_totals(record.id, fingerprint))
        # the persons merged into another have no state row left: theirs moved to the target
        persons = await _state_rows(store, record.id)
        read = await store.recompute_experiment(pid, record.id)
        again = _plain(await store.experiment_totals(record.id, fingerprint))
        assert persons == await _state_rows(store, record.id)
        assert len(persons) == 2  # a1 (with a2) and b1 (with b2, excluded)
        return kept, again, read

    kept, recomputed, read = run(open_store, scenario)
    # one person exposed (first on a1's day: T0), with its day whatever the lanes
    assert kept == {"test": (1, 13.0, 169.0, {T0 // DAY_MS: 1}), "excluded": 1}
    assert recomputed == kept
    assert read == 9  # four exposures and five buys, the retried ones stored once


async def _strip_days(store: Store, experiment_id: int) -> None:
    """Rewrite the experiment's totals as stored before they had day histograms."""
    query = "SELECT lane, totals FROM experiment_totals WHERE experiment_id = "
    update = "UPDATE experiment_totals SET totals = {0}3 WHERE experiment_id = {0}1 AND lane = {0}2"

    def stripped(data: bytes) -> bytes:
        totals = decode_totals(bytes(data))
        for variant in totals.variants.values():
            variant.days = {}
        return encode_totals(totals)

    if isinstance(store, PostgresStore):
        async with store._pool.acquire() as conn:
            rows = await conn.fetch(query + "$1", experiment_id)
            await conn.executemany(
                update.format("$"), [(experiment_id, r[0], stripped(r[1])) for r in rows]
            )
        return
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        rows = conn.execute(query + "?", (experiment_id,)).fetchall()
        conn.executemany(update.format("?"), [(experiment_id, r[0], stripped(r[1])) for r in rows])


async def _backfill(store: Store) -> None:
    """Migration 0130's data step, run again on the store's database."""
    if isinstance(store, PostgresStore):
        async with store._pool.acquire() as conn, conn.transaction():
            await postgres_experiments.backfill_exposure_days(conn)
        return
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        sqlite_experiments.backfill_exposure_days(conn)


def test_the_migration_dates_exposures_stored_before_the_day_histograms(
    open_store: Callable[[], Store],
) -> None:
    async def scenario(store: Store) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        project = await store.create_project("p")
        definition = _definition("exp")
        record = await store.create_experiment(project.id, definition, flag_write(definition))
        fingerprint = ExperimentSpec(record.id, definition).fingerprint
        day = 86_400_000
        await store.ingest(
            project.id,
            [
                _exposure("a", "test", T0),
                _exposure("b", "test", T0 + day),
                _exposure("c", "control", T0 + day),
                _exposure("c", "control", T0 + 2 * day),  # c again: still its first day
                _exposure("d", "control", T0),
                _exposure("d", "test", T0 + day),  # d: both variants, excluded
            ],
            [],
        )
        kept = _plain(await store.experiment_totals(record.id, fingerprint))
        await _strip_days(store, record.id)
        old = _plain(await store.experiment_totals(record.id, fingerprint))
        await _backfill(store)
        return kept, old, _plain(await store.experiment_totals(record.id, fingerprint))

    kept, old, backfilled = run(open_store, scenario)
    first = T0 // DAY_MS
    assert kept == {
        "control": (1, 0.0, 0.0, {first + 1: 1}),
        "test": (2, 0.0, 0.0, {first: 1, first + 1: 1}),
        "excluded": 1,
    }
    assert old["test"][3] == {}
    assert backfilled == kept


def test_draft_and_deleted_experiments_do_not_count(open_store: Callable[[], Store]) -> None:
    async def scenario(store: Store) -> tuple[int, int]:
        project = await store.create_project("p")
        definition = _definition("exp")
        definition.start_date = None
        record = await store.create_experiment(project.id, definition, flag_write(definition))
        await store.ingest(project.id, [_exposure("x", "test", T0)], [])
        spec = ExperimentSpec(record.id, definition)
        draft = (await store.experiment_totals(record.id, spec.fingerprint)).variants
        launched = _definition("exp")
        await store.update_experiment(project.id, record.id, launched)  # recomputes
        spec = ExperimentSpec(record.id, launched)
        after = await store.experiment_totals(record.id, spec.fingerprint)
        await store.update_experiment(project.id, record.id, launched, deleted=True)
        await store.ingest(project.id, [_exposure("y", "test", T0 + 1)], [])
        deleted = await store.experiment_totals(record.id, spec.fingerprint)
        return sum(v.exposed for v in draft.values()) + 10 * after.variants["test"].exposed, (
            deleted.variants["test"].exposed
        )

    counted, after_delete = run(open_store, scenario)
    assert counted == 10  # nothing while a draft; the launch counted the stored exposure
    assert after_delete == 1


def test_two_stores_in_one_process_keep_their_own_experiments(
    open_store: Callable[[], Store], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Same project id, experiment id and definitions version in two databases: each counts
    its own experiment (the compiled specs are cached per database, not only per project)."""
    other_url = pg.new_database() if "postgres" in request.node.name else None

    def open_other() -> Store:
        if other_url is not None:
            return PostgresStore(other_url)
        return SQLiteStore(tmp_path / "other.sqlite3")

    async def scenario() -> list[int]:
        stores = [open_store(), open_other()]
        exposed = []
        for store in stores:
            await store.open()
        try:
            records = []
            for store, key in zip(stores, ["exp-a", "exp-b"], strict=True):
                project = await store.create_project("p")
                definition = _definition(key)
                record = await store.create_experiment(
                    project.id, definition, flag_write(definition)
                )
                records.append((project.id, record.id, definition))
            assert records[0][:2] == records[1][:2]
            for store, (pid, _, _), key in zip(stores, records, ["exp-a", "exp-b"], strict=True):
                props = {"$feature_flag": key, "$feature_flag_response": "test"}
                await store.ingest(pid, [event("$feature_flag_called", "u", props=props)], [])
            for store, (_, eid, definition) in zip(stores, records, strict=True):
                fingerprint = ExperimentSpec(eid, definition).fingerprint
                totals = await store.experiment_totals(eid, fingerprint)
                exposed.append(sum(v.exposed for v in totals.variants.values()))
        finally:
            for store in stores:
                await store.close()
        return exposed

    assert asyncio.run(scenario()) == [1, 1]


def test_has_experiments_tells_whether_any_is_not_deleted(open_store: Callable[[], Store]) -> None:
    async def scenario(store: Store) -> list[bool]:
        seen = [await store.has_experiments()]
        project = await store.create_project("p")
        definition = _definition("exp")
        record = await store.create_experiment(project.id, definition, flag_write(definition))
        seen.append(await store.has_experiments())
        await store.update_experiment(project.id, record.id, definition, deleted=True)
        seen.append(await store.has_experiments())
        return seen

    assert run(open_store, scenario) == [False, True, False]
