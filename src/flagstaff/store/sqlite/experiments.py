"""Experiments on SQLite: aggregates kept current by ingestion, experiment rows, recompute.

:func:`capture` is called when a batch is planned (it only keeps references: the persons as
the rules left them and the kept events); in the batch's transaction :func:`prepare` runs before
its events are inserted and :func:`write` after (knowing whether any was a retry), so the
aggregates commit with the events or not at all. A batch of a
project without running experiments costs one indexed read of its definitions version.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from itertools import compress
from typing import Any

import msgspec
import orjson

from flagstaff.experiments.exposure import (
    ExperimentEvent,
    ExperimentSpec,
    PersonState,
)
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.model import Event
from flagstaff.store.experiment_batch import (
    BatchWork,
    Running,
    SpecCache,
    add_increment,
    apply_work,
    batch_work,
    decode_person,
    encode_person,
    encode_totals,
    recompute,
    retry_candidates,
    running_specs,
    select_events,
    spec_events,
)
from flagstaff.store.sqlite.experiment_memory import Entries, ExperimentMemory

LANE = 0
"""SQLite has one writer: one totals row per experiment."""
_CHUNK = 400
_specs = SpecCache()


_VERSION = (
    "SELECT (SELECT file FROM pragma_database_list WHERE name = 'main'), "
    "(SELECT version FROM definitions_version WHERE project_id = ?)"
)
"""The database (its file) and the project's definitions version, in one statement."""


class Pending(msgspec.Struct):
    """A planned batch as experiments need it (references, nothing computed)."""

    project_id: int
    by_distinct_id: Mapping[str, person_rules.PersonState]
    ops: list[person_rules.PersonOp]
    kept: list[Event]
    memory: ExperimentMemory | None
    """The ingest writer's remembered states (None: read every person back)."""


def capture(
    project_id: int,
    book: person_rules.PersonBook,
    kept: list[Event],
    memory: ExperimentMemory | None = None,
) -> Pending:
    return Pending(project_id, book.by_distinct_id, book.ops, kept, memory)


def running(conn: sqlite3.Connection, project_id: int) -> tuple[str, Running]:
    """The database's identity and the project's running experiments as of this
    transaction."""
    database, version = conn.execute(_VERSION, (project_id,)).fetchone()
    version = int(version or 0)
    cached = _specs.get(database, project_id, version)
    if cached is None:
        rows = conn.execute(
            "SELECT id, definition FROM experiments WHERE project_id = ? AND deleted = 0",
            (project_id,),
        ).fetchall()
        cached = _specs.put(database, project_id, version, running_specs(rows))
    return database, cached


class Prepared(msgspec.Struct):
    """A batch's experiment work, read before its events are inserted."""

    project_id: int
    version: int
    database: str
    work: BatchWork
    memory: ExperimentMemory | None
    mark: int
    """The largest event ``seq`` before the batch's events went in."""


def prepare(conn: sqlite3.Connection, pending: Pending | None) -> Prepared | None:
    """Before the batch's events are inserted: its work for the running experiments, if any."""
    if pending is None:
        return None
    database, current = running(conn, pending.project_id)
    if not current.specs:
        return None
    work = batch_work(
        current, pending.project_id, pending.by_distinct_id, pending.ops, pending.kept
    )
    if work is None:
        return None
    mark = int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
    return Prepared(pending.project_id, current.version, database, work, pending.memory, mark)


def write(conn: sqlite3.Connection, prepared: Prepared | None, all_stored: bool) -> None:
    """Update the running experiments' aggregates for one batch, in its transaction, once its
    events are inserted (``all_stored``: none was a retry, so no uuid needs looking up)."""
    if prepared is None:
        return
    work = prepared.work
    memory = (
        None
        if prepared.memory is None
        else prepared.memory.entries(prepared.database, prepared.project_id, prepared.version)
    )
    loaded = {eid: _persons(conn, eid, uuids, memory) for eid, uuids in work.wanted.items()}
    selected = select_events(work, loaded)
    duplicates = (
        set()
        if all_stored
        else _stored_before(
            conn, prepared.project_id, retry_candidates(work, selected), prepared.mark
        )
    )
    merged = {source for source, _ in work.merges}
    for change in apply_work(work, loaded, selected, duplicates):
        eid = change.experiment_id
        conn.executemany(
            "INSERT INTO experiment_person_state (experiment_id, person_uuid, state) "
            "VALUES (?, ?, ?) ON CONFLICT (experiment_id, person_uuid) "
            "DO UPDATE SET state = excluded.state",
            [(eid, uuid, encode_person(state)) for uuid, state in change.persons.items()],
        )
        if merged:  # persons merged into another: their state moved to the target
            wanted = work.wanted.get(eid, set())
            _delete(conn, eid, [u for u in merged if u in wanted and u not in change.persons])
        spec = work.accumulator.spec(eid)
        row = conn.execute(
            "SELECT fingerprint, totals FROM experiment_totals WHERE experiment_id = ? "
            "AND lane = ?",
            (eid, LANE),
        ).fetchone()
        stored = row[1] if row is not None and row[0] == spec.fingerprint else None
        conn.execute(
            "INSERT INTO experiment_totals (experiment_id, lane, fingerprint, totals) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (experiment_id, lane) "
            "DO UPDATE SET fingerprint = excluded.fingerprint, totals = excluded.totals",
            (eid, LANE, spec.fingerprint, add_increment(stored, change)),
        )
    if memory is not None:  # as committed with this transaction
        for eid in work.wanted:
            persons = work.accumulator.state(eid).persons
            remembered = memory[eid]
            remembered.update(persons)  # the loaded ones (changed in place) and the new ones
            remembered.update((source, None) for source in merged if source not in persons)


def _persons(
    conn: sqlite3.Connection, experiment_id: int, uuids: set[str], memory: Entries | None
) -> dict[str, PersonState]:
    """The stored states of these persons (those that have one): from memory, else read."""
    if memory is None:
        return _load(conn, experiment_id, uuids)
    remembered = memory.setdefault(experiment_id, {})
    states = list(map(remembered.get, uuids))
    # the remembered states that are not None
    out: dict[str, PersonState] = dict(compress(zip(uuids, states, strict=True), states))
    missing = uuids.difference(remembered)
    if missing:
        stored = _load(conn, experiment_id, missing)
        remembered.update(dict.fromkeys(missing))  # None: no state
        remembered.update(stored)
        out.update(stored)
    return out


def _chunks(items: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _load(conn: sqlite3.Connection, experiment_id: int, uuids: set[str]) -> dict[str, PersonState]:
    out: dict[str, PersonState] = {}
    for chunk in _chunks(sorted(uuids)):
        marks = ",".join("?" * len(chunk))
        for uuid, state in conn.execute(
            "SELECT person_uuid, state FROM experiment_person_state WHERE experiment_id = ? "
            f"AND person_uuid IN ({marks})",
            (experiment_id, *chunk),
        ):
            out[uuid] = decode_person(state)
    return out


def _delete(conn: sqlite3.Connection, experiment_id: int, uuids: list[str]) -> None:
    """Persons merged into another: their state moved to the target."""
    conn.executemany(
        "DELETE FROM experiment_person_state WHERE experiment_id = ? AND person_uuid = ?",
        [(experiment_id, uuid) for uuid in uuids],
    )


def _stored_before(
    conn: sqlite3.Connection, project_id: int, uuids: list[str], mark: int
) -> set[str]:
    """Which of these event uuids were stored before the batch (``seq`` up to ``mark``): a
    retried request's events."""
    found: set[str] = set()
    for chunk in _chunks(sorted(set(uuids))):
        marks = ",".join("?" * len(chunk))
        found.update(
            uuid
            for (uuid,) in conn.execute(
                f"SELECT uuid FROM events WHERE project_id = ? AND uuid IN ({marks}) AND seq <= ?",
                (project_id, *chunk, mark),
            )
        )
    return found


def recompute_experiment(conn: sqlite3.Connection, project_id: int, spec: ExperimentSpec) -> int:
    """Rebuild one experiment's persons and totals from its stored events, in the caller's
    transaction; returns how many events were read. Distinct ids resolve to their person now,
    so merges are reflected; an event without a person counts for ``person_uuid``."""
    names = spec_events(spec)
    marks = ",".join("?" * len(names))
    start = spec.start_ms if spec.start_ms is not None else 0
    rows = conn.execute(
        "SELECT e.distinct_id, e.event, e.timestamp_ms, e.properties, p.uuid FROM events e "
        "LEFT JOIN person_distinct_ids d ON d.project_id = e.project_id "
        "AND d.distinct_id = e.distinct_id LEFT JOIN persons p ON p.id = d.person_id "
        f"WHERE e.project_id = ? AND e.timestamp_ms >= ? AND e.event IN ({marks}) "
        "ORDER BY e.timestamp_ms, e.seq",
        (project_id, start, *names),
    )
    count = 0

    def events() -> Iterator[ExperimentEvent]:
        nonlocal count
        for distinct_id, name, timestamp_ms, properties, person in rows:
            count += 1
            yield ExperimentEvent(
                person or person_rules.person_uuid(project_id, distinct_id),
                distinct_id,
                name,
                timestamp_ms,
                orjson.loads(properties),
            )

    state = recompute(spec, events())
    eid = spec.experiment_id
    conn.execute("DELETE FROM experiment_person_state WHERE experiment_id = ?", (eid,))
    conn.execute("DELETE FROM experiment_totals WHERE experiment_id = ?", (eid,))
    conn.executemany(
        "INSERT INTO experiment_person_state (experiment_id, person_uuid, state) VALUES (?, ?, ?)",
        [(eid, uuid, encode_person(person)) for uuid, person in state.persons.items()],
    )
    conn.execute(
        "INSERT INTO experiment_totals (experiment_id, lane, fingerprint, totals) "
        "VALUES (?, ?, ?, ?)",
        (eid, LANE, spec.fingerprint, encode_totals(state.totals)),
    )
    return count
