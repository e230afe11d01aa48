"""Writing ingestion batches to SQLite: load, apply the pure rules, plan the writes, write.

Planning (:func:`plan_ingest`) reads persons and groups, runs the rules and encodes every row
to write; executing (:func:`execute_plan`) only runs SQL. Both happen under the database's
write turn, so what the rules read cannot change before it is written: in one transaction
(:func:`apply_ingest`), or, in the ingest writer, planned while the previous plan executes,
reading the database only once that plan is committed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import msgspec

from flagstaff.common import clock
from flagstaff.ingest import groups as group_rules
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.model import Drop, Event
from flagstaff.store.flag_usage import BatchChecks, batch_checks
from flagstaff.store.ingest_batch import (
    SurveyEvent,
    apply_rules,
    count_reasons,
    fold_survey_events,
    needs_groups,
    person_state,
    survey_events,
    warnings_of,
)
from flagstaff.store.records import IngestResult
from flagstaff.store.rows import WARNINGS_KEPT
from flagstaff.store.sqlite import experiments, flag_usage
from flagstaff.store.sqlite.person_cache import PersonCache

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_CHUNK = 400


def _chunks(items: list[Any]) -> Iterable[list[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def load_persons(
    conn: sqlite3.Connection,
    project_id: int,
    distinct_ids: set[str] | list[str],
    known: dict[int, person_rules.PersonState] | None = None,
) -> dict[str, person_rules.PersonState]:
    """The persons behind ``distinct_ids``; ``known`` states are reused (one object a person)."""
    states: dict[int, person_rules.PersonState] = known if known is not None else {}
    out: dict[str, person_rules.PersonState] = {}
    for chunk in _chunks(sorted(distinct_ids)):
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            "SELECT d.distinct_id, p.id, p.uuid, p.properties, p.is_identified, p.created_at_ms "
            "FROM person_distinct_ids d JOIN persons p ON p.id = d.person_id "
            f"WHERE d.project_id = ? AND d.distinct_id IN ({marks})",
            (project_id, *chunk),
        )
        for did, pid, puuid, props, identified, created in rows:
            out[did] = person_state(states, pid, puuid, props, identified, created)
    return out


def load_groups(
    conn: sqlite3.Connection, project_id: int, events: list[Event]
) -> group_rules.GroupBook:
    types = {
        name: index
        for index, name in conn.execute(
            "SELECT group_type_index, group_type FROM group_types WHERE project_id = ?",
            (project_id,),
        )
    }
    loaded: dict[tuple[int, str], group_rules.GroupState] = {}
    for event in events:
        target = group_rules.identify_target(event)
        if target is None or target.group_type not in types:
            continue
        index = types[target.group_type]
        if (index, target.key) in loaded:
            continue
        row = conn.execute(
            "SELECT properties, created_at_ms FROM groups WHERE project_id = ? "
            "AND group_type_index = ? AND group_key = ?",
            (project_id, index, target.key),
        ).fetchone()
        if row is not None:
            loaded[(index, target.key)] = group_rules.GroupState(
                index, target.key, _decode(row[0]), row[1]
            )
    return group_rules.GroupBook(types, loaded)


Reader = Callable[[], sqlite3.Connection]
"""Gives the connection to read from once every write planned before is committed."""


class PersonIds:
    """Ids for new persons, chosen when a batch is planned rather than when it is written.

    Only the ingest path inserts persons and it holds the database's write turn, so the next
    id is one past the largest stored; ``reset`` re-reads it after a rolled-back transaction.
    """

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: int | None = None

    def take(self, reader: Reader) -> int:
        if self._next is None:
            row = reader().execute("SELECT coalesce(max(id), 0) + 1 FROM persons").fetchone()
            self._next = int(row[0])
        taken = self._next
        self._next += 1
        return taken

    def reset(self) -> None:
        self._next = None


Step = tuple[str, list[tuple[Any, ...]]]

_INSERT_EVENTS = (
    "INSERT OR IGNORE INTO events (project_id, uuid, event, distinct_id, timestamp_ms, "
    "received_ms, historical, properties) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_WARNINGS = (
    "INSERT INTO ingestion_warnings (project_id, type, details, created_at_ms) VALUES (?, ?, ?, ?)"
)
_PRUNE_WARNINGS = (
    "DELETE FROM ingestion_warnings WHERE project_id = ?1 AND id < (SELECT id FROM "
    "ingestion_warnings WHERE project_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)"
)


class WritePlan:
    """Everything one ingestion pass writes: statements in order, then events and warnings.

    Built from the rules' outcome with every value already encoded, so it can be executed
    (:func:`execute_plan`) on another thread while the next batch is planned.
    """

    __slots__ = (
        "dropped",
        "event_rows",
        "experiments",
        "flag_checks",
        "project_id",
        "steps",
        "survey_events",
        "warning_rows",
    )

    def __init__(self, project_id: int = 0) -> None:
        self.project_id = project_id
        self.survey_events: list[SurveyEvent] = []
        self.experiments: experiments.Pending | None = None
        self.flag_checks: BatchChecks | None = None
        self.steps: list[Step] = []
        self.event_rows: list[tuple[Any, ...]] = []
        self.warning_rows: list[tuple[Any, ...]] = []
        self.dropped: dict[str, int] = {}

    def add(self, sql: str, row: tuple[Any, ...]) -> None:
        """One statement; consecutive runs of the same statement become one executemany."""
        if self.steps and self.steps[-1][0] is sql:
            self.steps[-1][1].append(row)
        else:
            self.steps.append((sql, [row]))


_INSERT_PERSON = (
    "INSERT INTO persons (id, project_id, uuid, properties, is_identified, created_at_ms) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_ASSIGN = (
    "INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) VALUES (?, ?, ?) "
    "ON CONFLICT (project_id, distinct_id) DO UPDATE SET person_id = excluded.person_id"
)
_MOVE_IDS = "UPDATE person_distinct_ids SET person_id = ? WHERE person_id = ?"
_COPY_OVERRIDES = (
    "INSERT OR IGNORE INTO hash_key_overrides (project_id, person_id, feature_flag_key, "
    "hash_key) SELECT project_id, ?, feature_flag_key, hash_key FROM hash_key_overrides "
    "WHERE project_id = ? AND person_id = ?"
)
_DROP_OVERRIDES = "DELETE FROM hash_key_overrides WHERE project_id = ? AND person_id = ?"
_DELETE_PERSON = "DELETE FROM persons WHERE id = ?"
_UPDATE_PERSON = (
    "UPDATE persons SET properties = ?, is_identified = ?, created_at_ms = ?, "
    "version = version + 1 WHERE id = ?"
)
_INSERT_GROUP_TYPE = (
    "INSERT INTO group_types (project_id, group_type_index, group_type) VALUES (?, ?, ?)"
)
_UPSERT_GROUP = (
    "INSERT INTO groups (project_id, group_type_index, group_key, properties, created_at_ms) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id, group_type_index, group_key) "
    "DO UPDATE SET properties = excluded.properties, version = version + 1"
)
_BUMP_DEFINITIONS = (
    "INSERT INTO definitions_version (project_id, version) VALUES (?, 1) "
    "ON CONFLICT(project_id) DO UPDATE SET version = version + 1"
)


def _plan_persons(
    plan: WritePlan,
    project_id: int,
    book: person_rules.PersonBook,
    ids: PersonIds,
    reader: Reader,
    cache: PersonCache | None,
) -> None:
    for op in book.ops:
        match op:
            case person_rules.CreatePerson(state=state):
                state.id = ids.take(reader)
            case person_rules.MergePersons(source=source) if (
                cache is not None and source.id is not None
            ):
                cache.forget(source.id)
    enrollments: list[person_rules.PersonState] = []
    for op in book.ops:
        match op:
            case person_rules.CreatePerson(state=state):
                plan.add(
                    _INSERT_PERSON,
                    (
                        state.id,
                        project_id,
                        state.uuid,
                        _encode(state.properties),
                        int(state.is_identified),
                        state.created_at_ms,
                    ),
                )
                if state.enrollment:
                    enrollments.append(state)
            case person_rules.AssignDistinctId(distinct_id=distinct_id, state=state):
                plan.add(_ASSIGN, (project_id, distinct_id, state.id))
            case person_rules.MergePersons(source=source, target=target):
                plan.add(_MOVE_IDS, (target.id, source.id))
                plan.add(_COPY_OVERRIDES, (target.id, project_id, source.id))
                plan.add(_DROP_OVERRIDES, (project_id, source.id))
                plan.add(_DELETE_PERSON, (source.id,))
                if source.enrollment:
                    enrollments.append(source)
    for s in book.changed():
        plan.add(
            _UPDATE_PERSON, (_encode(s.properties), int(s.is_identified), s.created_at_ms, s.id)
        )
        if s.enrollment:
            enrollments.append(s)
    if enrollments:
        _plan_enrollments(plan, project_id, enrollments)
    for state in book.by_distinct_id.values():
        state.dirty = False
        state.is_new = False


_DROP_ENROLLMENTS = "DELETE FROM person_enrollments WHERE person_id = ?"
_ENROLL = (
    "INSERT OR IGNORE INTO person_enrollments (project_id, flag_key, person_id) VALUES (?, ?, ?)"
)


def _plan_enrollments(
    plan: WritePlan, project_id: int, states: list[person_rules.PersonState]
) -> None:
    """The early access enrollments of the persons whose enrollment properties the batch
    changed, as their properties now say (a person merged away keeps none)."""
    for state in states:
        plan.add(_DROP_ENROLLMENTS, (state.id,))
    for flag_key, person_id in person_rules.take_enrollments(states):
        plan.add(_ENROLL, (project_id, flag_key, person_id))


def _plan_groups(plan: WritePlan, project_id: int, book: group_rules.GroupBook) -> None:
    for new_type in book.new_types:
        plan.add(_INSERT_GROUP_TYPE, (project_id, new_type.index, new_type.name))
    for g in book.changed():
        plan.add(
            _UPSERT_GROUP, (project_id, g.type_index, g.key, _encode(g.properties), g.created_at_ms)
        )
    if book.new_types:
        plan.add(_BUMP_DEFINITIONS, (project_id,))


def _book_for(
    reader: Reader, project_id: int, events: list[Event], cache: PersonCache | None
) -> person_rules.PersonBook:
    wanted = person_rules.ids_to_load(events)
    if cache is None:
        return person_rules.PersonBook(project_id, load_persons(reader(), project_id, wanted))
    loaded: dict[str, person_rules.PersonState] = {}
    missing = []
    for did in wanted:
        state = cache.get(project_id, did)
        if state is None:
            missing.append(did)
        else:
            loaded[did] = state
    if missing:
        loaded.update(load_persons(reader(), project_id, missing, cache.by_id()))
    return person_rules.PersonBook(project_id, loaded)


def plan_ingest(
    reader: Reader,
    project_id: int,
    events: list[Event],
    drops: list[Drop],
    now_ms: int,
    ids: PersonIds,
    cache: PersonCache | None = None,
) -> WritePlan:
    """Run the person and group rules over one project's events and plan their writes.

    With ``cache``, persons come from and go to memory; the cached states then already hold
    the planned changes, so a plan that is not committed must be followed by ``cache.clear()``
    and ``ids.reset()``.
    """
    book = _book_for(reader, project_id, events, cache)
    group_book = load_groups(reader(), project_id, events) if needs_groups(events) else None
    outcome = apply_rules(book, group_book, events)
    if outcome.drops:
        drops = [*drops, *outcome.drops]
        kept = [events[i] for i in outcome.kept]
    else:
        kept = events

    plan = WritePlan(project_id)
    plan.survey_events = survey_events(kept, book)
    _plan_persons(plan, project_id, book, ids, reader, cache)
    if cache is not None:
        cache.remember(project_id, book.by_distinct_id)
    if group_book is not None:
        _plan_groups(plan, project_id, group_book)
    plan.event_rows = [
        (
            project_id,
            e.uuid,
            e.event,
            e.distinct_id,
            e.timestamp_ms,
            e.received_ms,
            int(e.historical),
            e.properties_json if e.properties_json is not None else _encode(e.properties),
        )
        for e in kept
    ]
    plan.experiments = experiments.capture(
        project_id, book, kept, cache.experiments if cache is not None else None
    )
    plan.flag_checks = batch_checks(kept)
    plan.warning_rows = [
        (project_id, w.kind, _encode(w.details), now_ms) for w in warnings_of(drops, book.warnings)
    ]
    plan.dropped = count_reasons(drops)
    return plan


def execute_plan(conn: sqlite3.Connection, plan: WritePlan) -> IngestResult:
    """Run a plan inside the caller's transaction."""
    for sql, rows in plan.steps:
        conn.executemany(sql, rows)
    if plan.survey_events:
        count_survey_events(conn, plan.project_id, plan.survey_events)
    experiment_work = experiments.prepare(conn, plan.experiments)
    usage_mark = flag_usage.before_events(conn, plan.flag_checks)
    before = conn.total_changes
    conn.executemany(_INSERT_EVENTS, plan.event_rows)
    stored = conn.total_changes - before
    all_stored = stored == len(plan.event_rows)
    experiments.write(conn, experiment_work, all_stored)
    flag_usage.after_events(conn, plan.project_id, plan.flag_checks, usage_mark, all_stored)
    if plan.warning_rows:
        conn.executemany(_INSERT_WARNINGS, plan.warning_rows)
        conn.execute(_PRUNE_WARNINGS, (plan.project_id, WARNINGS_KEPT - 1))
    return IngestResult(
        ingested=stored, duplicates=len(plan.event_rows) - stored, dropped=plan.dropped
    )


def count_survey_events(
    conn: sqlite3.Connection, project_id: int, found: list[SurveyEvent]
) -> None:
    """Fold survey events not stored yet into their surveys' aggregates (before the events
    are inserted, in the same transaction)."""
    fresh: dict[str, SurveyEvent] = {}
    for e in found:
        if e.uuid in fresh:
            continue
        if conn.execute(
            "SELECT 1 FROM events WHERE project_id = ? AND uuid = ?", (project_id, e.uuid)
        ).fetchone():
            continue
        fresh[e.uuid] = e
    ids = sorted({e.survey_id for e in fresh.values()})
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    limits = {
        r[0]: r[1]
        for r in conn.execute(
            "SELECT id, json_extract(data, '$.responses_limit') FROM surveys "
            f"WHERE project_id = ? AND id IN ({marks})",
            (project_id, *ids),
        )
    }
    stored: dict[str, bytes | None] = dict.fromkeys(limits)
    for survey_id, state in conn.execute(
        "SELECT survey_id, state FROM survey_aggregates "
        f"WHERE project_id = ? AND survey_id IN ({marks})",
        (project_id, *ids),
    ):
        if survey_id in stored:
            stored[survey_id] = state
    changes = fold_survey_events(list(fresh.values()), stored, limits)
    now_ms = clock.now_ms()
    conn.executemany(
        "INSERT INTO survey_aggregates (project_id, survey_id, state, responses, updated_at_ms) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id, survey_id) DO UPDATE SET "
        "state = excluded.state, responses = excluded.responses, "
        "updated_at_ms = excluded.updated_at_ms",
        [(project_id, c.survey_id, c.state, c.responses, now_ms) for c in changes],
    )
    if any(c.limit_reached for c in changes):
        conn.execute(_BUMP_DEFINITIONS, (project_id,))


def apply_ingest(
    conn: sqlite3.Connection,
    project_id: int,
    events: list[Event],
    drops: list[Drop],
    now_ms: int,
    cache: PersonCache | None = None,
) -> IngestResult:
    """Plan and write one request's events in the caller's transaction.

    With ``cache``, persons come from and go to memory too; the cache is cleared if this
    fails, since the rules changed cached states that were not written.
    """
    try:
        plan = plan_ingest(lambda: conn, project_id, events, drops, now_ms, PersonIds(), cache)
        return execute_plan(conn, plan)
    except BaseException:
        if cache is not None:
            cache.clear()
        raise


IngestRequest = tuple[int, list[Event], list[Drop]]


class ProjectBatch(NamedTuple):
    """One project's share of several requests: their indexes, events and drops in order."""

    project_id: int
    indexes: list[int]
    events: list[Event]
    drops: list[Drop]


def by_project(requests: list[IngestRequest]) -> list[ProjectBatch]:
    """The requests grouped per project (one rules pass each), in arrival order."""
    indexes: dict[int, list[int]] = {}
    for i, (project_id, _, _) in enumerate(requests):
        indexes.setdefault(project_id, []).append(i)
    return [
        ProjectBatch(
            project_id,
            found,
            [e for i in found for e in requests[i][1]],
            [d for i in found for d in requests[i][2]],
        )
        for project_id, found in indexes.items()
    ]


def apply_many(
    conn: sqlite3.Connection,
    requests: list[IngestRequest],
    now_ms: int,
    cache: PersonCache | None = None,
) -> list[IngestResult | Exception]:
    """Apply several requests, each project's in one pass (one person load, one insert).

    Events keep their arrival order. If the combined pass fails, it is rolled back and every
    request is applied alone, so a bad request fails only itself. The combined pass's counts
    are reported on its first request (they only feed metrics).
    """
    out: list[IngestResult | Exception] = [EMPTY_RESULT] * len(requests)
    for project_id, indexes, events, drops in by_project(requests):
        conn.execute("SAVEPOINT combined")
        try:
            out[indexes[0]] = apply_ingest(conn, project_id, events, drops, now_ms, cache)
            conn.execute("RELEASE combined")
            continue
        except Exception:
            conn.execute("ROLLBACK TO combined")
            conn.execute("RELEASE combined")
        for i in indexes:
            conn.execute("SAVEPOINT single")
            try:
                out[i] = apply_ingest(
                    conn, project_id, requests[i][1], requests[i][2], now_ms, cache
                )
                conn.execute("RELEASE single")
            except Exception as exc:
                conn.execute("ROLLBACK TO single")
                conn.execute("RELEASE single")
                out[i] = exc
    return out


EMPTY_RESULT = IngestResult(ingested=0, duplicates=0, dropped={})
"""What requests committed together with another report: the counts go on the first."""
