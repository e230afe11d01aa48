"""Experiments on PostgreSQL: aggregates kept current by ingestion, and recompute.

:func:`update` runs in the ingest transaction after the persons are locked and written and
the events inserted, so the aggregates commit with the events or not at all. Person
states are locked (``FOR UPDATE``) before they are read; each process adds its increments to
its own totals row (:data:`LANE`), so nodes never wait on each other's totals. A batch of a
project without running experiments costs one indexed read of its definitions version.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

import asyncpg
import msgspec
import orjson

from flagstaff.experiments.exposure import (
    CovariateRequests,
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    PersonState,
)
from flagstaff.experiments.model import ExperimentDefinition
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.model import Event
from flagstaff.store.experiment_batch import (
    BatchWork,
    Running,
    SpecCache,
    add_increment,
    apply_events,
    backfill_days,
    batch_work,
    covariate_span,
    days_complete,
    decode_person,
    decode_totals,
    encode_person,
    encode_totals,
    identities,
    merged_away,
    resolved_event,
    retry_candidates,
    running_specs,
    spec_events,
)

LANE = secrets.randbits(62)
"""This process's totals row of every experiment (reads add the rows of every lane)."""
_specs = SpecCache()

_DATABASE = (
    "SELECT d.oid::text || ' ' || pg_postmaster_start_time()::text "
    "FROM pg_database d WHERE d.datname = current_database()"
)
"""The database's identity: its oid in this server's run."""
_READ = (
    "WITH locked AS (SELECT s.experiment_id, s.person_uuid, s.state "
    "FROM experiment_person_state s JOIN unnest(string_to_array($2, ',')::bigint[], "
    "string_to_array($3, ',')::uuid[]) AS x(e, u) "
    "ON s.experiment_id = x.e AND s.person_uuid = x.u "
    "ORDER BY s.experiment_id, s.person_uuid FOR UPDATE OF s), "
    "totals AS (SELECT experiment_id, fingerprint, totals FROM experiment_totals "
    "WHERE experiment_id = ANY($4::bigint[]) AND lane = $5 ORDER BY experiment_id FOR UPDATE) "
    "SELECT 0, (SELECT version FROM definitions_version WHERE project_id = $1), "
    f"({_DATABASE}), NULL::bytea "
    "UNION ALL SELECT 1, experiment_id, person_uuid::text, state FROM locked "
    "UNION ALL SELECT 2, experiment_id, fingerprint, totals FROM totals"
)
"""In one round trip: the definitions version and the database, the persons' states (locked)
and this lane's totals rows (locked), as rows ``(kind, number, text, bytes)``. The persons
wanted come as two comma-separated texts (:func:`_as_text`)."""
_STORED_BEFORE = (
    "SELECT e.uuid::text FROM event_uuids e JOIN unnest($2::uuid[]) AS x(u) "
    "ON e.project_id = $1 AND e.uuid = x.u WHERE e.xmin <> pg_current_xact_id()::xid"
)
"""Which of these events were stored before this transaction (a retried request's)."""
_WRITE = (
    "WITH states AS (INSERT INTO experiment_person_state (experiment_id, person_uuid, state) "
    "SELECT e, u, s FROM unnest(string_to_array($1, ',')::bigint[], "
    "string_to_array($2, ',')::uuid[], $3::bytea[]) AS x(e, u, s) "
    "ON CONFLICT (experiment_id, person_uuid) DO UPDATE SET state = excluded.state), "
    "gone AS (DELETE FROM experiment_person_state s "
    "USING unnest(string_to_array($4, ',')::bigint[], string_to_array($5, ',')::uuid[]) "
    "AS x(e, u) "
    "WHERE s.experiment_id = x.e AND s.person_uuid = x.u) "
    "INSERT INTO experiment_totals (experiment_id, lane, fingerprint, totals) "
    "SELECT e, $6, f, t FROM unnest($7::bigint[], $8::text[], $9::bytea[]) AS x(e, f, t) "
    "ON CONFLICT (experiment_id, lane) "
    "DO UPDATE SET fingerprint = excluded.fingerprint, totals = excluded.totals"
)
"""The batch's writes in one statement: persons changed, persons merged away, totals."""
_UPSERT_STATES = (
    "INSERT INTO experiment_person_state (experiment_id, person_uuid, state) "
    "SELECT e, u, s FROM unnest($1::bigint[], $2::uuid[], $3::bytea[]) AS x(e, u, s) "
    "ON CONFLICT (experiment_id, person_uuid) DO UPDATE SET state = excluded.state"
)
_UPSERT_TOTALS = (
    "INSERT INTO experiment_totals (experiment_id, lane, fingerprint, totals) "
    "SELECT e, $2, f, t FROM unnest($1::bigint[], $3::text[], $4::bytea[]) AS x(e, f, t) "
    "ON CONFLICT (experiment_id, lane) "
    "DO UPDATE SET fingerprint = excluded.fingerprint, totals = excluded.totals"
)
_WINDOWS = (
    "WITH asked AS (SELECT * FROM unnest($2::uuid[], $3::bigint[], $4::bigint[]) AS a(u, lo, hi)), "
    "ids AS (SELECT a.u, d.distinct_id AS did, a.lo, a.hi FROM asked a "
    "JOIN persons p ON p.uuid = a.u JOIN person_distinct_ids d ON d.person_id = p.id "
    "UNION SELECT a.u, b.did, a.lo, a.hi FROM unnest($5::text[], $6::uuid[]) AS b(did, u) "
    "JOIN asked a ON a.u = b.u), "
    "found AS (SELECT ids.u, e.distinct_id, e.event, e.timestamp_ms, e.properties FROM ids "
    "JOIN events e ON e.project_id = $1 AND e.distinct_id = ids.did "
    "AND e.timestamp_ms >= ids.lo AND e.timestamp_ms < ids.hi "
    "WHERE e.event = ANY($7::text[]) AND e.xmin <> pg_current_xact_id()::xid) "
    "SELECT u::text, distinct_id, event, timestamp_ms, properties, NULL::bigint[] FROM found "
    "WHERE NOT event = ANY($8::text[]) UNION ALL "
    "SELECT u::text, NULL, event, NULL, NULL, array_agg(timestamp_ms) FROM found "
    "WHERE event = ANY($8::text[]) GROUP BY u, event"
)
"""The events stored before this transaction of the persons asked for, in their windows
(``[from, to)``), by every distinct id each has now (stored, or the batch's): one index range
per distinct id. Events the covariates only count (``$8``) come as their timestamps per
person and name."""
_NOTHING = Running(0, [], frozenset(), frozenset(), {}, frozenset(), {}, False, {})
_latest: dict[int, tuple[str, Running]] = {}
"""Per project, the database and running experiments of its last batch in this process: the
guess the read is made with (checked by the read itself)."""


def _as_text(groups: Iterable[tuple[int, Iterable[str]]]) -> tuple[str, str]:
    """Pairs (experiment id, person uuid), given per experiment, as two comma-separated texts
    that the statement splits (``string_to_array``) in the same order. asyncpg checks every
    element of an array parameter against ``collections.abc`` in Python: a 680-element
    ``uuid[]`` cost 302 µs of client CPU here, the same uuids as one text 78 µs
    (``python -m bench.pg_arrays``)."""
    eids: list[str] = []
    uuids: list[str] = []
    for eid, members in groups:
        listed = list(members)
        if listed:
            eids.append(",".join([str(eid)] * len(listed)))
            uuids.append(",".join(listed))
    return ",".join(eids), ",".join(uuids)


async def _specs_at(
    conn: asyncpg.Connection, database: str, project_id: int, version: int
) -> Running:
    cached = _specs.get(database, project_id, version)
    if cached is None:
        rows = await conn.fetch(
            "SELECT id, definition FROM experiments WHERE project_id = $1 AND NOT deleted",
            project_id,
        )
        cached = _specs.put(database, project_id, version, running_specs(rows))
    _latest[project_id] = (database, cached)
    return cached


async def update(
    conn: asyncpg.Connection,
    project_id: int,
    book: person_rules.PersonBook,
    kept: list[Event],
    all_stored: bool,
) -> None:
    """Update the running experiments' aggregates for one batch, in its transaction, once its
    events are inserted (``all_stored``: none was a retry, so no uuid needs looking up): a
    fixed number of statements whatever the number of experiments and persons involved, one
    statement when the batch changes nothing, three at most.

    The read is made with the project's running experiments as this process last saw them;
    it returns the definitions version, and when that moved on (or the guess was for another
    database), it is made again with the current ones.
    """
    database, current = _latest.get(project_id, (None, _NOTHING))
    while True:
        work = (
            batch_work(current, project_id, book.by_distinct_id, book.ops, kept)
            if current.specs
            else None
        )
        wanted_eids, wanted_uuids = _as_text(work.wanted.items() if work is not None else ())
        eids = [spec.experiment_id for spec in current.specs]
        rows = await conn.fetch(_READ, project_id, wanted_eids, wanted_uuids, eids, LANE)
        _, version, found_database, _ = rows[0]
        version = int(version or 0)
        if found_database == database and version == current.version:
            break
        database = found_database
        current = await _specs_at(conn, database, project_id, version)
    if work is None:
        return
    loaded: dict[int, dict[str, PersonState]] = {eid: {} for eid in work.wanted}
    stored: dict[int, tuple[str, bytes]] = {}
    for kind, eid, text, data in rows[1:]:
        if kind == 1:
            loaded[eid][text] = decode_person(data)
        else:
            stored[eid] = (text, data)
    uuids = [] if all_stored else retry_candidates(work, loaded)
    duplicates = (
        {r[0] for r in await conn.fetch(_STORED_BEFORE, project_id, uuids)} if uuids else set()
    )
    # fresh each batch, from empty totals: after the batch they are its increment (the
    # persons loaded do not add to them), so no copy is kept to subtract
    accumulator = ExperimentAccumulator(current.specs, increments=False)
    apply_events(accumulator, work, loaded, duplicates)
    requests = accumulator.covariate_requests()
    if requests is not None:
        accumulator.add_covariates(*await _stored_in_windows(conn, project_id, work, requests))
    changes = sorted(accumulator.drain(), key=lambda c: c.experiment_id)
    if not changes:
        return
    gone = {
        change.experiment_id: merged_away(work, change.experiment_id, change.persons)
        for change in changes
    }
    fingerprints: list[str] = []
    totals: list[bytes] = []
    for change in changes:
        fingerprint = accumulator.spec(change.experiment_id).fingerprint
        row = stored.get(change.experiment_id)
        before = row[1] if row is not None and row[0] == fingerprint else None
        fingerprints.append(fingerprint)
        totals.append(add_increment(before, change))
    # the states in the order _as_text lists their persons
    upsert_eids, upsert_uuids = _as_text(
        (change.experiment_id, change.persons) for change in changes
    )
    states = [encode_person(state) for change in changes for state in change.persons.values()]
    gone_eids, gone_uuids = _as_text(gone.items())
    await conn.execute(
        _WRITE,
        upsert_eids,
        upsert_uuids,
        states,
        gone_eids,
        gone_uuids,
        LANE,
        [change.experiment_id for change in changes],
        fingerprints,
        totals,
    )


async def _stored_in_windows(
    conn: asyncpg.Connection, project_id: int, work: BatchWork, requests: CovariateRequests
) -> tuple[list[ExperimentEvent], list[tuple[str, str, list[int]]]]:
    persons = sorted(requests.windows)
    batch = identities(work, persons)
    pairs = [(did, person) for person, dids in batch.items() for did in sorted(dids)]
    rows = await conn.fetch(
        _WINDOWS,
        project_id,
        persons,
        [requests.windows[p][0] for p in persons],
        [requests.windows[p][1] for p in persons],
        [did for did, _ in pairs],
        [person for _, person in pairs],
        sorted(requests.events),
        sorted(requests.counted),
    )
    events: list[ExperimentEvent] = []
    counts: list[tuple[str, str, list[int]]] = []
    for person, distinct_id, name, timestamp_ms, properties, stamps in rows:
        if stamps is None:
            events.append(
                ExperimentEvent(person, distinct_id, name, timestamp_ms, orjson.loads(properties))
            )
        else:
            counts.append((person, name, stamps))
    return events, counts


_RESOLVED = (
    "SELECT e.distinct_id, e.event, e.timestamp_ms, e.properties, p.uuid::text "
    "FROM events e LEFT JOIN person_distinct_ids d ON d.project_id = e.project_id "
    "AND d.distinct_id = e.distinct_id LEFT JOIN persons p ON p.id = d.person_id "
)
"""Events with the person their distinct id has now (a recompute's reads)."""


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
        _RESOLVED
        + "WHERE e.project_id = $1 AND e.timestamp_ms >= $2 AND e.event = ANY($3::text[]) "
        "ORDER BY e.timestamp_ms, e.event <> $4, e.seq",  # exposures first at equal times
        project_id,
        start,
        names,
        spec.exposure_event,
        prefetch=5000,
    )
    async for row in cursor:
        count += 1
        accumulator.add(resolved_event(project_id, row))
    span = covariate_span(spec)
    if span is not None:
        names, first, last = span
        accumulator.add_covariates(
            [
                resolved_event(project_id, row)
                async for row in conn.cursor(
                    _RESOLVED + "WHERE e.project_id = $1 AND e.timestamp_ms >= $2 "
                    "AND e.timestamp_ms <= $3 AND e.event = ANY($4::text[])",
                    project_id,
                    first,
                    last,
                    names,
                    prefetch=5000,
                )
            ]
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


async def backfill_exposure_days(conn: asyncpg.Connection) -> None:
    """Migration 0130's data step: the day histograms of the totals stored before they
    existed, from the experiments' stored persons (in the migration's transaction)."""
    for eid, definition in await conn.fetch("SELECT id, definition FROM experiments"):
        spec = ExperimentSpec(eid, msgspec.json.decode(definition, type=ExperimentDefinition))
        lanes = [
            (int(lane), bytes(totals))
            for lane, totals in await conn.fetch(
                "SELECT lane, totals FROM experiment_totals WHERE experiment_id = $1 "
                "AND fingerprint = $2 ORDER BY lane FOR UPDATE",
                eid,
                spec.fingerprint,
            )
        ]
        if not lanes or days_complete(decode_totals(totals) for _, totals in lanes):
            continue
        states = [
            bytes(r[0])
            for r in await conn.fetch(
                "SELECT state FROM experiment_person_state WHERE experiment_id = $1", eid
            )
        ]
        rows = backfill_days(spec, lanes, states)
        if rows:
            await conn.executemany(
                "UPDATE experiment_totals SET totals = $3 WHERE experiment_id = $1 AND lane = $2",
                [(eid, lane, totals) for lane, totals in rows],
            )
