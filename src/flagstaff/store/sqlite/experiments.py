"""Experiments on SQLite: aggregates kept current by ingestion, experiment rows, recompute.

:func:`capture` is called when a batch is planned (it only keeps references: the persons as
the rules left them and the kept events); in the batch's transaction :func:`prepare` runs before
its events are inserted and :func:`write` after (knowing whether any was a retry), so the
aggregates commit with the events or not at all. A batch of a
project without running experiments costs one indexed read of its definitions version.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec
import orjson

from flagstaff.experiments.exposure import (
    CovariateRequests,
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    ExperimentState,
    PersonState,
)
from flagstaff.experiments.model import ExperimentDefinition
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.model import Event
from flagstaff.store.experiment_batch import (
    BatchWork,
    Running,
    SpecCache,
    apply_events,
    backfill_days,
    batch_work,
    covariate_span,
    decode_person,
    decode_totals,
    encode_person,
    encode_totals,
    identities,
    merged_away,
    recompute,
    resolved_event,
    retry_candidates,
    running_specs,
    spec_events,
)
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.experiment_memory import ExperimentMemory, Remembered

LANE = 0
"""SQLite has one writer: one totals row per experiment."""
_CHUNK = 400
_specs = SpecCache()


_VERSION = (
    "SELECT (SELECT file FROM pragma_database_list WHERE name = 'main'), "
    "(SELECT version FROM definitions_version WHERE project_id = ?), "
    "(SELECT coalesce(max(seq), 0) FROM events)"
)
"""The database (its file), the project's definitions version and the largest event ``seq``,
in one statement."""
_UPSERT_STATE = (
    "INSERT INTO experiment_person_state (experiment_id, person_uuid, state) "
    "VALUES (?, ?, ?) ON CONFLICT (experiment_id, person_uuid) "
    "DO UPDATE SET state = excluded.state"
)
_UPSERT_TOTALS = (
    "INSERT INTO experiment_totals (experiment_id, lane, fingerprint, totals) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (experiment_id, lane) "
    "DO UPDATE SET fingerprint = excluded.fingerprint, totals = excluded.totals"
)


class Pending(msgspec.Struct):
    """A planned batch as experiments need it (references, nothing computed)."""

    project_id: int
    by_distinct_id: Mapping[str, person_rules.PersonState]
    ops: list[person_rules.PersonOp]
    kept: list[Event]
    memory: ExperimentMemory | None
    """The ingest writer's remembered experiments (None: read them back per batch)."""


def capture(
    project_id: int,
    book: person_rules.PersonBook,
    kept: list[Event],
    memory: ExperimentMemory | None = None,
) -> Pending:
    return Pending(project_id, book.by_distinct_id, book.ops, kept, memory)


def running(conn: sqlite3.Connection, project_id: int) -> tuple[str, Running, int]:
    """The database's identity, the project's running experiments as of this transaction,
    and the largest event ``seq`` stored."""
    database, version, mark = conn.execute(_VERSION, (project_id,)).fetchone()
    version = int(version or 0)
    cached = _specs.get(database, project_id, version)
    if cached is None:
        rows = conn.execute(
            "SELECT id, definition FROM experiments WHERE project_id = ? AND deleted = 0",
            (project_id,),
        ).fetchall()
        cached = _specs.put(database, project_id, version, running_specs(rows))
    return database, cached, int(mark)


class Prepared(msgspec.Struct):
    """A batch's experiment work, read before its events are inserted."""

    project_id: int
    running: Running
    database: str
    work: BatchWork
    memory: ExperimentMemory | None
    mark: int
    """The largest event ``seq`` before the batch's events went in."""


def prepare(conn: sqlite3.Connection, pending: Pending | None) -> Prepared | None:
    """Before the batch's events are inserted: its work for the running experiments, if any."""
    if pending is None:
        return None
    database, current, mark = running(conn, pending.project_id)
    if not current.specs:
        return None
    work = batch_work(
        current, pending.project_id, pending.by_distinct_id, pending.ops, pending.kept
    )
    if work is None:
        return None
    return Prepared(pending.project_id, current, database, work, pending.memory, mark)


def write(conn: sqlite3.Connection, prepared: Prepared | None, all_stored: bool) -> None:
    """Update the running experiments' aggregates for one batch, in its transaction, once its
    events are inserted (``all_stored``: none was a retry, so no uuid needs looking up): the
    persons changed in one statement, the totals as they now are in another."""
    if prepared is None:
        return
    work = prepared.work
    current = prepared.running
    eids = [spec.experiment_id for spec in current.specs]
    remembered = (
        None
        if prepared.memory is None
        else prepared.memory.get(prepared.database, prepared.project_id, current.version)
    )
    if remembered is None:
        accumulator = ExperimentAccumulator(
            current.specs, _stored_totals(conn, current.specs), increments=False
        )
        remembered = Remembered(prepared.database, current.version, accumulator)
    accumulator = remembered.accumulator
    for eid, uuids in work.wanted.items():
        held = accumulator.persons(eid)
        accumulator.load_persons(eid, _unseen(conn, eid, uuids, held, remembered.absent))
    duplicates = (
        set()
        if all_stored
        else _stored_before(
            conn,
            prepared.project_id,
            retry_candidates(work, {eid: accumulator.persons(eid) for eid in work.wanted}),
            prepared.mark,
        )
    )
    apply_events(accumulator, work, {}, duplicates)
    requests = accumulator.covariate_requests()
    if requests is not None:
        accumulator.add_covariates(
            *_stored_in_windows(conn, prepared.project_id, work, requests, prepared.mark)
        )
    changes = accumulator.drain()
    conn.executemany(
        _UPSERT_STATE,
        [
            (change.experiment_id, uuid, encode_person(state))
            for change in changes
            for uuid, state in change.persons.items()
        ],
    )
    if work.merges:
        gone = [
            (eid, uuid)
            for eid in work.wanted
            for uuid in merged_away(work, eid, accumulator.persons(eid))
        ]
        conn.executemany(
            "DELETE FROM experiment_person_state WHERE experiment_id = ? AND person_uuid = ?",
            gone,
        )
        for eid, uuid in gone:
            remembered.absent.setdefault(eid, set()).add(uuid)
    conn.executemany(
        _UPSERT_TOTALS,
        [
            (
                change.experiment_id,
                LANE,
                accumulator.spec(change.experiment_id).fingerprint,
                encode_totals(change.totals),
            )
            for change in changes
        ],
    )
    if prepared.memory is not None:  # as committed with this transaction
        prepared.memory.keep(prepared.project_id, remembered, eids)


def _stored_totals(
    conn: sqlite3.Connection, specs: list[ExperimentSpec]
) -> dict[int, ExperimentState]:
    """The running experiments' stored totals (those built for their current definition)."""
    states: dict[int, ExperimentState] = {}
    for spec in specs:
        row = conn.execute(
            "SELECT fingerprint, totals FROM experiment_totals WHERE experiment_id = ? "
            "AND lane = ?",
            (spec.experiment_id, LANE),
        ).fetchone()
        if row is not None and row[0] == spec.fingerprint:
            states[spec.experiment_id] = ExperimentState(
                spec.fingerprint, totals=decode_totals(row[1])
            )
    return states


def _unseen(
    conn: sqlite3.Connection,
    experiment_id: int,
    uuids: set[str],
    held: Mapping[str, PersonState],
    absent: dict[int, set[str]],
) -> dict[str, PersonState]:
    """The stored states of those of these persons that are neither held already nor known to
    have none (``absent``, per experiment; updated with the ones found without)."""
    missing = uuids.difference(held)
    known = absent.get(experiment_id)
    if known and missing:
        # two steps: set.difference(a, b) walks every element of b (here, every person known
        # to have no state), while the one-argument form walks the smaller side
        missing = missing.difference(known)
    if not missing:
        return {}
    stored = _load(conn, experiment_id, missing)
    absent.setdefault(experiment_id, set()).update(missing.difference(stored))
    return stored


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


_WINDOW_COLUMNS = "e.distinct_id, e.event, e.timestamp_ms, e.properties"
_WINDOWS = (
    "WITH w(did, lo, hi) AS (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]') FROM json_each(?1)) "
    f"SELECT {_WINDOW_COLUMNS} FROM w CROSS JOIN json_each(?2) AS b "
    "CROSS JOIN events_by_distinct_id x CROSS JOIN events e "
    "WHERE x.project_id = ?3 AND x.bucket = b.value AND x.distinct_id = w.did "
    "AND x.timestamp_ms >= w.lo AND x.timestamp_ms < w.hi AND x.seq <= ?4 "
    "AND e.seq = x.seq AND e.event IN (SELECT value FROM json_each(?5))"
)
"""The indexed events of distinct ids in their windows (``[[distinct id, from, to]...]``), one
seek per distinct id and bucket."""
_WINDOWS_TAIL = (
    f"SELECT {_WINDOW_COLUMNS} FROM events e WHERE e.seq > ?1 AND e.seq <= ?2 "
    "AND e.event IN (SELECT value FROM json_each(?5)) AND +e.project_id = ?3 "
    "AND e.distinct_id IN (SELECT value FROM json_each(?4))"
)
"""The events of these distinct ids past the index's watermark (a range of ``seq``); the
name is tested first, the most selective (5,000 rows: 0.8 ms against 1.5-2.0 with the
distinct id first)."""


def _stored_in_windows(
    conn: sqlite3.Connection,
    project_id: int,
    work: BatchWork,
    requests: CovariateRequests,
    mark: int,
) -> tuple[list[ExperimentEvent], list[tuple[str, str, list[int]]]]:
    """The events stored before the batch (``seq`` up to ``mark``) of the persons asked for,
    in their windows: those of every distinct id each person has now."""
    stored: list[tuple[str, str]] = []
    for chunk in _chunks(sorted(requests.windows)):
        marks = ",".join("?" * len(chunk))
        stored += conn.execute(
            "SELECT p.uuid, d.distinct_id FROM persons p JOIN person_distinct_ids d "
            f"ON d.person_id = p.id WHERE p.uuid IN ({marks})",
            chunk,
        ).fetchall()
    owners = _window_owners(requests, identities(work, requests.windows), stored)
    windows = orjson.dumps(
        [[did, *requests.windows[person]] for did, person in sorted(owners.items())]
    ).decode()
    names = orjson.dumps(sorted(requests.events)).decode()
    rows = conn.execute(
        _WINDOWS,
        (
            windows,
            orjson.dumps(list(event_index.buckets(conn, project_id))).decode(),
            project_id,
            mark,
            names,
        ),
    ).fetchall()
    rows += conn.execute(
        _WINDOWS_TAIL,
        (
            event_index.watermark(conn),
            mark,
            project_id,
            orjson.dumps(sorted(owners)).decode(),
            names,
        ),
    ).fetchall()
    return _window_events(requests, owners, rows)


def _window_events(
    requests: CovariateRequests,
    owners: Mapping[str, str],
    rows: Iterable[Sequence[Any]],
) -> tuple[list[ExperimentEvent], list[tuple[str, str, list[int]]]]:
    """The stored events ``rows`` (distinct id, event, timestamp, properties JSON) of the
    persons asked for, within their windows, as the person's (``owners``: distinct id ->
    person uuid): those only counted as timestamps per person and name, undecoded."""
    windows = requests.windows
    counted = requests.counted
    out: list[ExperimentEvent] = []
    stamps: dict[tuple[str, str], list[int]] = {}
    for distinct_id, name, timestamp_ms, properties in rows:
        person = owners.get(distinct_id)
        if person is None:
            continue
        low, high = windows[person]
        if not low <= timestamp_ms < high:
            continue
        if name in counted:
            stamps.setdefault((person, name), []).append(timestamp_ms)
        else:
            out.append(
                ExperimentEvent(person, distinct_id, name, timestamp_ms, orjson.loads(properties))
            )
    return out, [(person, name, at) for (person, name), at in stamps.items()]


def _window_owners(
    requests: CovariateRequests, batch: Mapping[str, set[str]], stored: Iterable[Sequence[Any]]
) -> dict[str, str]:
    """Per distinct id, its person among those asked for: the batch's (``batch``, from
    :func:`identities`) and the stored ``(person uuid, distinct id)`` rows."""
    owners = {
        distinct_id: person
        for person, distinct_ids in batch.items()
        for distinct_id in distinct_ids
    }
    for person, distinct_id in stored:
        if person in requests.windows:
            owners[distinct_id] = person
    return owners


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


_RESOLVED = (
    "SELECT e.distinct_id, e.event, e.timestamp_ms, e.properties, p.uuid FROM events e "
    "LEFT JOIN person_distinct_ids d ON d.project_id = e.project_id "
    "AND d.distinct_id = e.distinct_id LEFT JOIN persons p ON p.id = d.person_id "
)
"""Events with the person their distinct id has now (a recompute's reads)."""


def recompute_experiment(conn: sqlite3.Connection, project_id: int, spec: ExperimentSpec) -> int:
    """Rebuild one experiment's persons and totals from its stored events, in the caller's
    transaction; returns how many events were read. Distinct ids resolve to their person now,
    so merges are reflected; an event without a person counts for ``person_uuid``."""
    names = spec_events(spec)
    marks = ",".join("?" * len(names))
    start = spec.start_ms if spec.start_ms is not None else 0
    rows = conn.execute(
        _RESOLVED + f"WHERE e.project_id = ? AND e.timestamp_ms >= ? AND e.event IN ({marks}) "
        "ORDER BY e.timestamp_ms, e.event <> ?, e.seq",  # exposures first at equal times
        (project_id, start, *names, spec.exposure_event),
    )
    count = 0

    def events() -> Iterator[ExperimentEvent]:
        nonlocal count
        for row in rows:
            count += 1
            yield resolved_event(project_id, row)

    def before() -> Iterator[ExperimentEvent]:
        span = covariate_span(spec)
        assert span is not None
        names, first, last = span
        marks = ",".join("?" * len(names))
        for row in conn.execute(
            _RESOLVED + "WHERE e.project_id = ? AND e.timestamp_ms >= ? AND e.timestamp_ms <= ? "
            f"AND e.event IN ({marks})",
            (project_id, first, last, *names),
        ):
            yield resolved_event(project_id, row)

    state = recompute(spec, events(), before)
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


def backfill_exposure_days(conn: sqlite3.Connection) -> None:
    """Migration 0130's data step: the day histograms of the totals stored before they
    existed, from the experiments' stored persons (in the migration's transaction)."""
    for eid, definition in conn.execute("SELECT id, definition FROM experiments").fetchall():
        spec = ExperimentSpec(eid, msgspec.json.decode(definition, type=ExperimentDefinition))
        lanes = conn.execute(
            "SELECT lane, totals FROM experiment_totals WHERE experiment_id = ? "
            "AND fingerprint = ? ORDER BY lane",
            (eid, spec.fingerprint),
        ).fetchall()

        def states(eid: int = eid) -> Iterator[bytes]:
            for (state,) in conn.execute(
                "SELECT state FROM experiment_person_state WHERE experiment_id = ?", (eid,)
            ):
                yield state

        conn.executemany(
            "UPDATE experiment_totals SET totals = ? WHERE experiment_id = ? AND lane = ?",
            [(totals, eid, lane) for lane, totals in backfill_days(spec, lanes, states())],
        )
