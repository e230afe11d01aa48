"""Writing one ingestion batch to PostgreSQL: lock, load, apply the pure rules, write back.

Runs inside one READ COMMITTED transaction while other nodes run batches on the same persons.

Correctness rests on two things. Existing persons and groups are locked with ``SELECT ... FOR
UPDATE`` (in key order) before the rules read them; a person merged away by a concurrent batch
shows up as a missing row once its lock is granted, and the batch's distinct ids are read
again. Rows the batch creates (persons, distinct ids, groups, group types) are plain INSERTs
guarded by unique constraints: if another batch created the same row first, ours fails and
:data:`RETRYABLE` tells the caller to run it again, which then reads the committed row.

To make such retries rare, a batch first takes transaction-scoped advisory locks, in sorted
order, on the distinct ids it does not find, on the groups it identifies and on group type
names new to the project (at most :data:`MAX_CLAIMS` in all): concurrent creators of the same
rows then wait for each other instead of failing. These locks come before any row lock, so
they add no deadlock.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

from flagstaff.common import clock
from flagstaff.ingest import groups as group_rules
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.model import Drop, Event
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
from flagstaff.store.postgres import experiments, flag_usage
from flagstaff.store.postgres.sql import BUMP_DEFINITIONS, pg_text
from flagstaff.store.records import IngestResult, StoreError
from flagstaff.store.rows import WARNINGS_KEPT
from flagstaff.surveys import stats as survey_stats

_encode = msgspec.json.encode
_decode = msgspec.json.decode

RETRYABLE = (
    asyncpg.UniqueViolationError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
)
_RELOADS = 50
MAX_CLAIMS = 256
"""Advisory locks one batch takes at most: each holds a slot of the server's lock table."""


_CLAIM = (
    "SELECT count(pg_advisory_xact_lock(k)) FROM ("
    "SELECT hashtextextended(x, $1) AS k FROM unnest($2::text[]) AS x WHERE NOT EXISTS "
    "(SELECT 1 FROM person_distinct_ids d WHERE d.project_id = $1 AND d.distinct_id = x) "
    "UNION SELECT hashtextextended(c, $1) FROM unnest($3::text[]) AS c "
    "ORDER BY 1 LIMIT $4) AS s"
)
# Joins against unnest(), not "= ANY($2)": a generic plan then still looks each id up in the
# primary key instead of filtering every row of the project.
_LOCK_PERSONS = (
    "SELECT d.distinct_id, p.id, p.uuid::text, p.properties, p.is_identified, p.created_at_ms, "
    "(SELECT count(*) FROM unnest($2::text[]) AS y(did) JOIN person_distinct_ids c "
    "ON c.project_id = $1 AND c.distinct_id = y.did) AS expected "
    "FROM unnest($2::text[]) AS x(did) "
    "JOIN person_distinct_ids d ON d.project_id = $1 AND d.distinct_id = x.did "
    "JOIN persons p ON p.id = d.person_id ORDER BY p.id FOR UPDATE OF p"
)
_COUNT_IDS = (
    "SELECT count(*) FROM unnest($2::text[]) AS x(did) JOIN person_distinct_ids d "
    "ON d.project_id = $1 AND d.distinct_id = x.did"
)
_INSERT_PERSONS = (
    "INSERT INTO persons (project_id, uuid, properties, is_identified, created_at_ms) "
    "SELECT $1, u, p, i, c FROM unnest($2::uuid[], $3::json[], $4::bool[], $5::bigint[]) "
    "AS x(u, p, i, c) RETURNING id, uuid::text"
)
_INSERT_DISTINCT_IDS = (
    "INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) "
    "SELECT $1, d, p FROM unnest($2::text[], $3::bigint[]) AS x(d, p)"
)
_MERGE = (
    "WITH moved AS (UPDATE person_distinct_ids SET person_id = $3 "
    "WHERE project_id = $1 AND person_id = $2), "
    "copied AS (INSERT INTO hash_key_overrides (project_id, person_id, feature_flag_key, "
    "hash_key) SELECT project_id, $3, feature_flag_key, hash_key FROM hash_key_overrides "
    "WHERE project_id = $1 AND person_id = $2 ON CONFLICT DO NOTHING), "
    "dropped AS (DELETE FROM hash_key_overrides WHERE project_id = $1 AND person_id = $2) "
    "DELETE FROM persons WHERE id = $2"
)
_UPDATE_PERSONS = (
    "UPDATE persons AS p SET properties = x.props, is_identified = x.ident, "
    "created_at_ms = x.created, version = p.version + 1 "
    "FROM unnest($1::bigint[], $2::json[], $3::bool[], $4::bigint[]) AS x(id, props, ident, "
    "created) WHERE p.id = x.id"
)
_LOCK_GROUPS = (
    "SELECT g.group_type_index, g.group_key, g.properties, g.created_at_ms FROM groups g "
    "JOIN unnest($2::int[], $3::text[]) AS q(i, k) ON g.group_type_index = q.i "
    "AND g.group_key = q.k WHERE g.project_id = $1 "
    "ORDER BY g.group_type_index, g.group_key FOR UPDATE OF g"
)
_INSERT_GROUP_TYPES = (
    "INSERT INTO group_types (project_id, group_type_index, group_type) "
    "SELECT $1, i, t FROM unnest($2::int[], $3::text[]) AS x(i, t)"
)
_INSERT_GROUPS = (
    "INSERT INTO groups (project_id, group_type_index, group_key, properties, created_at_ms) "
    "SELECT $1, i, k, p, c FROM unnest($2::int[], $3::text[], $4::json[], $5::bigint[]) "
    "AS x(i, k, p, c)"
)
_UPDATE_GROUPS = (
    "UPDATE groups AS g SET properties = x.p, version = g.version + 1 "
    "FROM unnest($2::int[], $3::text[], $4::json[]) AS x(i, k, p) "
    "WHERE g.project_id = $1 AND g.group_type_index = x.i AND g.group_key = x.k"
)
_INSERT_EVENTS = (
    "WITH x AS (SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::bigint[], "
    "$6::bigint[], $7::bool[], $8::json[]) WITH ORDINALITY AS x(u, e, d, t, r, h, p, n)), "
    "fresh AS (INSERT INTO event_uuids (project_id, uuid, timestamp_ms) "
    "SELECT DISTINCT ON (u) $1, u, t FROM x ORDER BY u, n ON CONFLICT DO NOTHING RETURNING uuid) "
    "INSERT INTO events (project_id, uuid, event, distinct_id, timestamp_ms, received_ms, "
    "historical, properties) SELECT $1, u, e, d, t, r, h, p FROM (SELECT DISTINCT ON (x.u) x.* "
    "FROM x JOIN fresh ON fresh.uuid = x.u ORDER BY x.u, x.n) s ORDER BY n"
)
"""Events whose uuid is new: the events table is partitioned by time (migration 0121), so
uuids are kept unique in ``event_uuids``; the first of a batch's repeats is kept, and the
events are inserted in arrival order."""
INSERT_WARNINGS = (
    "INSERT INTO ingestion_warnings (project_id, type, details, created_at_ms) "
    "SELECT $1, t, d, $4 FROM unnest($2::text[], $3::json[]) AS x(t, d)"
)
# Rows another transaction is pruning are skipped, not waited for (no lock waits, no deadlock
# between ingest transactions of one project on several nodes).
_PRUNE_WARNINGS = (
    "DELETE FROM ingestion_warnings WHERE id IN (SELECT id FROM ingestion_warnings "
    "WHERE project_id = $1 AND id < (SELECT id FROM ingestion_warnings WHERE project_id = $1 "
    "ORDER BY id DESC OFFSET $2 LIMIT 1) FOR UPDATE SKIP LOCKED)"
)


def _json(value: Any) -> str:
    return _encode(value).decode()


_REFERENCED = ("$anon_distinct_id", "alias", "$group_type", "$group_key")


def without_nul(events: list[Event]) -> list[Event]:
    """``events`` with NUL replaced in every string the store keeps in a text column."""
    out: list[Event] | None = None
    for i, event in enumerate(events):
        props = event.properties
        dirty = "\x00" in event.event or "\x00" in event.distinct_id
        if not dirty:
            for name in _REFERENCED:
                value = props.get(name)
                if isinstance(value, str) and "\x00" in value:
                    dirty = True
                    break
        if not dirty:
            continue
        if out is None:
            out = list(events)
        fixed = dict(props)
        for name in _REFERENCED:
            value = fixed.get(name)
            if isinstance(value, str):
                fixed[name] = pg_text(value)
        out[i] = msgspec.structs.replace(
            event,
            event=pg_text(event.event),
            distinct_id=pg_text(event.distinct_id),
            properties=fixed,
        )
    return events if out is None else out


async def lock_persons(
    conn: asyncpg.Connection, project_id: int, distinct_ids: set[str]
) -> dict[str, person_rules.PersonState]:
    """The persons of ``distinct_ids``, locked for this transaction, current as of the lock."""
    if not distinct_ids:
        return {}
    ids = list(distinct_ids)
    for _ in range(_RELOADS):
        rows = await conn.fetch(_LOCK_PERSONS, project_id, ids)
        if not rows:
            if await conn.fetchval(_COUNT_IDS, project_id, ids) == 0:
                return {}
            continue
        if len(rows) != rows[0][6]:
            continue  # a person was merged away while we waited for its lock
        states: dict[int, person_rules.PersonState] = {}
        out: dict[str, person_rules.PersonState] = {}
        for did, pid, puuid, props, identified, created, _expected in rows:
            out[did] = person_state(states, pid, puuid, props, identified, created)
        return out
    raise StoreError("the persons of this batch kept changing under concurrent merges")


async def group_types(conn: asyncpg.Connection, project_id: int) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT group_type_index, group_type FROM group_types WHERE project_id = $1", project_id
    )
    return {name: index for index, name in rows}


def group_claims(events: list[Event], types: dict[str, int]) -> list[str]:
    """Advisory lock names for the groups ``events`` identify and their new group types."""
    claims: set[str] = set()
    for event in events:
        target = group_rules.identify_target(event)
        if target is not None:
            claims.add(f"\x1fg\x1f{target.group_type}\x1f{target.key}")
            if target.group_type not in types:
                claims.add(f"\x1ft\x1f{target.group_type}")
    return sorted(claims)


async def lock_groups(
    conn: asyncpg.Connection, project_id: int, events: list[Event]
) -> group_rules.GroupBook:
    types = await group_types(conn, project_id)
    wanted: set[tuple[int, str]] = set()
    for event in events:
        target = group_rules.identify_target(event)
        if target is not None and target.group_type in types:
            wanted.add((types[target.group_type], target.key))
    loaded: dict[tuple[int, str], group_rules.GroupState] = {}
    if wanted:
        indexes, keys = zip(*sorted(wanted), strict=True)
        for index, key, props, created in await conn.fetch(
            _LOCK_GROUPS, project_id, list(indexes), list(keys)
        ):
            loaded[(index, key)] = group_rules.GroupState(index, key, _decode(props), created)
    return group_rules.GroupBook(types, loaded)


async def _write_persons(
    conn: asyncpg.Connection, project_id: int, book: person_rules.PersonBook
) -> None:
    created: list[person_rules.PersonState] = []
    assigned: list[person_rules.AssignDistinctId] = []
    merged: list[person_rules.MergePersons] = []
    for op in book.ops:
        match op:
            case person_rules.CreatePerson(state=state):
                created.append(state)
            case person_rules.AssignDistinctId():
                assigned.append(op)
            case person_rules.MergePersons():
                merged.append(op)
    if created:
        rows = await conn.fetch(
            _INSERT_PERSONS,
            project_id,
            [s.uuid for s in created],
            [_json(s.properties) for s in created],
            [s.is_identified for s in created],
            [s.created_at_ms for s in created],
        )
        ids = dict((puuid, pid) for pid, puuid in rows)
        for state in created:
            state.id = ids[state.uuid]
    if assigned:
        await conn.execute(
            _INSERT_DISTINCT_IDS,
            project_id,
            [pg_text(a.distinct_id) for a in assigned],
            [a.state.id for a in assigned],
        )
    for merge in merged:
        await conn.execute(_MERGE, project_id, merge.source.id, merge.target.id)
    changed = book.changed()
    if changed:
        await conn.execute(
            _UPDATE_PERSONS,
            [s.id for s in changed],
            [_json(s.properties) for s in changed],
            [s.is_identified for s in changed],
            [s.created_at_ms for s in changed],
        )
    enrollments = [s for s in created if s.enrollment]
    enrollments.extend(m.source for m in merged if m.source.enrollment)
    enrollments.extend(s for s in changed if s.enrollment)
    if enrollments:
        await _write_enrollments(conn, project_id, enrollments)


_DROP_ENROLLMENTS = "DELETE FROM person_enrollments WHERE person_id = ANY($1::bigint[])"
_ENROLL = (
    "INSERT INTO person_enrollments (project_id, flag_key, person_id) "
    "SELECT $1, k, p FROM unnest($2::text[], $3::bigint[]) AS x(k, p) ON CONFLICT DO NOTHING"
)


async def _write_enrollments(
    conn: asyncpg.Connection, project_id: int, states: list[person_rules.PersonState]
) -> None:
    """The early access enrollments of the persons whose enrollment properties the batch
    changed, as their properties now say (a person merged away keeps none); their persons
    are locked or new, so no other batch writes these rows meanwhile."""
    await conn.execute(_DROP_ENROLLMENTS, sorted({s.id for s in states if s.id is not None}))
    rows = person_rules.take_enrollments(states)
    if rows:
        keys = [pg_text(flag_key) for flag_key, _ in rows]
        await conn.execute(_ENROLL, project_id, keys, [person_id for _, person_id in rows])


async def _write_groups(
    conn: asyncpg.Connection, project_id: int, book: group_rules.GroupBook
) -> None:
    if book.new_types:
        await conn.execute(
            _INSERT_GROUP_TYPES,
            project_id,
            [t.index for t in book.new_types],
            [t.name for t in book.new_types],
        )
        await conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))
    changed = book.changed()
    new = sorted((g for g in changed if g.is_new), key=lambda g: (g.type_index, g.key))
    old = [g for g in changed if not g.is_new]
    if new:
        await conn.execute(
            _INSERT_GROUPS,
            project_id,
            [g.type_index for g in new],
            [g.key for g in new],
            [_json(g.properties) for g in new],
            [g.created_at_ms for g in new],
        )
    if old:
        await conn.execute(
            _UPDATE_GROUPS,
            project_id,
            [g.type_index for g in old],
            [g.key for g in old],
            [_json(g.properties) for g in old],
        )


class Request(msgspec.Struct, frozen=True):
    """One ingest call: its events and the drops normalization already made."""

    events: list[Event]
    drops: list[Drop]


"""One ``ingest`` call: its events (already :func:`without_nul`) and its drops."""


async def apply_ingest(
    conn: asyncpg.Connection, project_id: int, requests: list[Request], now_ms: int
) -> list[IngestResult]:
    """Several ingest calls of one project, in order, inside the caller's transaction.

    The outcome is that of running them one after another: the rules see the events in
    arrival order, and an event uuid repeated across calls counts for the first one.
    """
    if len(requests) > 1:
        events = [e for request in requests for e in request.events]
    else:
        events = requests[0].events
    owner = [n for n, request in enumerate(requests) for _ in request.events]
    drops = [list(request.drops) for request in requests]
    distinct_ids = person_rules.ids_to_load(events)
    claims: list[str] = []
    grouped = needs_groups(events)
    if grouped:
        claims = group_claims(events, await group_types(conn, project_id))
    if distinct_ids or claims:
        await conn.execute(_CLAIM, project_id, list(distinct_ids), claims, MAX_CLAIMS)
    book = person_rules.PersonBook(project_id, await lock_persons(conn, project_id, distinct_ids))
    group_book = await lock_groups(conn, project_id, events) if grouped else None
    outcome = apply_rules(book, group_book, events)
    for i, drop in zip(outcome.dropped, outcome.drops, strict=True):
        drops[owner[i]].append(drop)
    kept = [events[i] for i in outcome.kept] if outcome.drops else events
    kept_owner = [owner[i] for i in outcome.kept]

    await _write_persons(conn, project_id, book)
    if group_book is not None:
        await _write_groups(conn, project_id, group_book)
    stored = [0] * len(requests)
    found = survey_events(kept, book)
    if found:
        await count_survey_events(conn, project_id, found)
    if kept:
        stored = await _insert_events(conn, project_id, kept, kept_owner, len(requests))
    all_stored = sum(stored) == len(kept)
    await experiments.update(conn, project_id, book, kept, all_stored)
    if kept:
        await flag_usage.update(conn, project_id, kept, all_stored)
    all_drops = [d for ds in drops for d in ds]
    if all_drops or book.warnings:
        warnings = warnings_of(all_drops, book.warnings)
        await conn.execute(
            INSERT_WARNINGS,
            project_id,
            [w.kind for w in warnings],
            [_json(w.details) for w in warnings],
            now_ms,
        )
        await conn.execute(_PRUNE_WARNINGS, project_id, WARNINGS_KEPT - 1)
    results: list[IngestResult] = []
    for n in range(len(requests)):
        dropped = count_reasons(drops[n])
        kept_here = kept_owner.count(n) if len(requests) > 1 else len(kept)
        results.append(IngestResult(stored[n], kept_here - stored[n], dropped))
    return results


async def _insert_events(
    conn: asyncpg.Connection, project_id: int, kept: list[Event], owner: list[int], calls: int
) -> list[int]:
    """Insert ``kept`` skipping known uuids; how many each call stored."""
    args = (
        project_id,
        [e.uuid for e in kept],
        [e.event for e in kept],
        [e.distinct_id for e in kept],
        [e.timestamp_ms for e in kept],
        [e.received_ms for e in kept],
        [e.historical for e in kept],
        [_json(e.properties) for e in kept],
    )
    if calls == 1:
        status = await conn.execute(_INSERT_EVENTS, *args)
        return [int(status.rsplit(" ", 1)[1])]
    inserted = {r[0] for r in await conn.fetch(_INSERT_EVENTS + " RETURNING uuid::text", *args)}
    stored = [0] * calls
    for event, n in zip(kept, owner, strict=True):
        if event.uuid in inserted:
            inserted.discard(event.uuid)
            stored[n] += 1
    return stored


async def count_survey_events(
    conn: asyncpg.Connection, project_id: int, found: list[SurveyEvent]
) -> None:
    """Fold survey events not stored yet into their surveys' aggregates (before the events
    are inserted, in the same transaction). Aggregate rows are locked in survey id order, so
    nodes counting the same survey take turns."""
    known = {
        r[0]
        for r in await conn.fetch(
            "SELECT uuid::text FROM event_uuids WHERE project_id = $1 AND uuid = ANY($2::uuid[])",
            project_id,
            [e.uuid for e in found],
        )
    }
    fresh: dict[str, SurveyEvent] = {}
    for e in found:
        if e.uuid not in known and e.uuid not in fresh:
            fresh[e.uuid] = e
    ids = sorted({e.survey_id for e in fresh.values()})
    if not ids:
        return
    limits = {
        r[0]: r[1]
        for r in await conn.fetch(
            "SELECT id, (data->>'responses_limit')::int FROM surveys "
            "WHERE project_id = $1 AND id = ANY($2::text[]) ORDER BY id",
            project_id,
            ids,
        )
    }
    if not limits:
        return
    await conn.execute(
        "INSERT INTO survey_aggregates (project_id, survey_id, state, responses, updated_at_ms) "
        "SELECT $1, x, $3, 0, 0 FROM unnest($2::text[]) AS x ON CONFLICT DO NOTHING",
        project_id,
        sorted(limits),
        survey_stats.encode(survey_stats.SurveyStats()),
    )
    stored: dict[str, bytes | None] = {
        r[0]: bytes(r[1])
        for r in await conn.fetch(
            "SELECT survey_id, state FROM survey_aggregates WHERE project_id = $1 "
            "AND survey_id = ANY($2::text[]) ORDER BY survey_id FOR UPDATE",
            project_id,
            sorted(limits),
        )
    }
    changes = fold_survey_events(list(fresh.values()), stored, limits)
    now_ms = clock.now_ms()
    await conn.executemany(
        "UPDATE survey_aggregates SET state = $3, responses = $4, updated_at_ms = $5 "
        "WHERE project_id = $1 AND survey_id = $2",
        [(project_id, c.survey_id, c.state, c.responses, now_ms) for c in changes],
    )
    if any(c.limit_reached for c in changes):
        await conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))
