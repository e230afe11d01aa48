"""Experiments on PostgreSQL: aggregates kept current by ingestion, and recompute.

:func:`update` runs in the ingest transaction after the persons are locked and written and
before the events are inserted, so the aggregates commit with the events or not at all. Person
states are locked (``FOR UPDATE``) before they are read; each process adds its increments to
its own totals row (:data:`LANE`), so nodes never wait on each other's totals. A batch of a
project without running experiments costs one indexed read of its definitions version.
"""

from __future__ import annotations

import secrets

import asyncpg
import orjson

from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    PersonState,
)
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.model import Event
from flagstaff.store.experiment_batch import (
    Running,
    SpecCache,
    add_increment,
    apply_work,
    batch_work,
    decode_person,
    encode_person,
    encode_totals,
    running_specs,
    select_events,
    spec_events,
)

LANE = secrets.randbits(62)
"""This process's totals row of every experiment (reads add the rows of every lane)."""
_specs = SpecCache()

_VERSION = (
    "SELECT d.oid, pg_postmaster_start_time(), "
    "(SELECT version FROM definitions_version WHERE project_id = $1) "
    "FROM pg_database d WHERE d.datname = current_database()"
)
"""The database's identity (its oid in this server's run) and the project's definitions
version, in one statement."""
_LOCK_STATES = (
    "SELECT s.experiment_id, s.person_uuid::text, s.state FROM experiment_person_state s "
    "JOIN unnest($1::bigint[], $2::uuid[]) AS x(e, u) "
    "ON s.experiment_id = x.e AND s.person_uuid = x.u "
    "ORDER BY s.experiment_id, s.person_uuid FOR UPDATE OF s"
)
_STORED = (
    "SELECT e.uuid::text FROM events e JOIN unnest($2::uuid[]) AS x(u) "
    "ON e.project_id = $1 AND e.uuid = x.u"
)
_UPSERT_STATES = (
    "INSERT INTO experiment_person_state (experiment_id, person_uuid, state) "
    "SELECT e, u, s FROM unnest($1::bigint[], $2::uuid[], $3::bytea[]) AS x(e, u, s) "
    "ON CONFLICT (experiment_id, person_uuid) DO UPDATE SET state = excluded.state"
)
_DELETE_STATES = (
    "DELETE FROM experiment_person_state s USING unnest($1::bigint[], $2::uuid[]) AS x(e, u) "
    "WHERE s.experiment_id = x.e AND s.person_uuid = x.u"
)
_LOCK_TOTALS = (
    "SELECT experiment_id, fingerprint, totals FROM experiment_totals "
    "WHERE experiment_id = ANY($1::bigint[]) AND lane = $2 ORDER BY experiment_id FOR UPDATE"
)
_UPSERT_TOTALS = (
    "INSERT INTO experiment_totals (experiment_id, lane, fingerprint, totals) "
    "SELECT e, $2, f, t FROM unnest($1::bigint[], $3::text[], $4::bytea[]) AS x(e, f, t) "
    "ON CONFLICT (experiment_id, lane) "
    "DO UPDATE SET fingerprint = excluded.fingerprint, totals = excluded.totals"
)


async def running(conn: asyncpg.Connection, project_id: int) -> Running:
    """The project's running experiments as of this transaction."""
    oid, started, version = await conn.fetchrow(_VERSION, project_id)
    database = (oid, started)
    version = int(version or 0)
    cached = _specs.get(database, project_id, version)
    if cached is None:
        rows = await conn.fetch(
            "SELECT id, definition FROM experiments WHERE project_id = $1 AND NOT deleted",
            project_id,
        )
        cached = _specs.put(database, project_id, version, running_specs(rows))
    return cached


async def update(
    conn: asyncpg.Connection,
    project_id: int,
    book: person_rules.PersonBook,
    kept: list[Event],
) -> None:
    """Update the running experiments' aggregates for one batch (in its transaction): a fixed
    number of statements whatever the number of experiments and persons involved."""
    current = await running(conn, project_id)
    if not current.specs:
        return
    work = batch_work(current, project_id, book.by_distinct_id, book.ops, kept)
    if work is None:
        return
    pairs = sorted((eid, uuid) for eid, uuids in work.wanted.items() for uuid in uuids)
    loaded: dict[int, dict[str, PersonState]] = {eid: {} for eid in work.wanted}
    if pairs:
        rows = await conn.fetch(
            _LOCK_STATES, [eid for eid, _ in pairs], [uuid for _, uuid in pairs]
        )
        for eid, uuid, state in rows:
            loaded[eid][uuid] = decode_person(state)
    selected = select_events(work, loaded)
    uuids = [work.sources[i].uuid for i in selected]
    duplicates = {r[0] for r in await conn.fetch(_STORED, project_id, uuids)} if uuids else set()
    changes = sorted(apply_work(work, loaded, selected, duplicates), key=lambda c: c.experiment_id)
    if not changes:
        return
    upserts = [
        (change.experiment_id, uuid, encode_person(state))
        for change in changes
        for uuid, state in change.persons.items()
    ]
    if upserts:
        await conn.execute(_UPSERT_STATES, *map(list, zip(*upserts, strict=True)))
    merged = {source for source, _ in work.merges}
    gone = [
        (change.experiment_id, uuid)
        for change in changes
        for uuid in work.wanted.get(change.experiment_id, ())
        if uuid in merged and uuid not in change.persons
    ]
    if gone:
        await conn.execute(_DELETE_STATES, *map(list, zip(*gone, strict=True)))
    eids = [change.experiment_id for change in changes]
    stored = {eid: (fp, totals) for eid, fp, totals in await conn.fetch(_LOCK_TOTALS, eids, LANE)}
    fingerprints: list[str] = []
    totals: list[bytes] = []
    for change in changes:
        fingerprint = work.accumulator.spec(change.experiment_id).fingerprint
        row = stored.get(change.experiment_id)
        before = row[1] if row is not None and row[0] == fingerprint else None
        fingerprints.append(fingerprint)
        totals.append(add_increment(before, change))
    await conn.execute(_UPSERT_TOTALS, eids, LANE, fingerprints, totals)


async def recompute_experiment(
    conn: asyncpg.Connection, project_id: int, spec: ExperimentSpec
) -> int:
    """Rebuild one experiment's persons and totals from its stored events, in the caller's
    transaction; returns how many events were read (see the SQLite twin)."""
    names = spec_events(spec)
    start = spec.start_ms if spec.start_ms is not None else 0
    eid = spec.experiment_id
    count = 0
    await conn.execute("SELECT 1 FROM experiments WHERE id = $1 FOR UPDATE", eid)
    accumulator = ExperimentAccumulator([spec])
    cursor = conn.cursor(
        "SELECT e.distinct_id, e.event, e.timestamp_ms, e.properties, p.uuid::text "
        "FROM events e LEFT JOIN person_distinct_ids d ON d.project_id = e.project_id "
        "AND d.distinct_id = e.distinct_id LEFT JOIN persons p ON p.id = d.person_id "
        "WHERE e.project_id = $1 AND e.timestamp_ms >= $2 AND e.event = ANY($3::text[]) "
        "ORDER BY e.timestamp_ms, e.seq",
        project_id,
        start,
        names,
        prefetch=5000,
    )
    async for distinct_id, name, timestamp_ms, properties, person in cursor:
        count += 1
        accumulator.add(
            ExperimentEvent(
                person or person_rules.person_uuid(project_id, distinct_id),
                distinct_id,
                name,
                timestamp_ms,
                orjson.loads(properties),
            )
        )
    state = accumulator.state(eid)
    await conn.execute("DELETE FROM experiment_person_state WHERE experiment_id = $1", eid)
    await conn.execute("DELETE FROM experiment_totals WHERE experiment_id = $1", eid)
    persons = list(state.persons.items())
    for start_at in range(0, len(persons), 10000):
        chunk = persons[start_at : start_at + 10000]
        await conn.execute(
            _UPSERT_STATES,
            [eid] * len(chunk),
            [u for u, _ in chunk],
            [encode_person(p) for _, p in chunk],
        )
    await conn.execute(
        _UPSERT_TOTALS, [eid], LANE, [spec.fingerprint], [encode_totals(state.totals)]
    )
    return count
