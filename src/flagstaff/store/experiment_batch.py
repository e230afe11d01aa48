"""Experiments in storage, the same way on every engine: rows, records, and what an ingestion
batch and a recompute do between reading and writing.

Each engine keeps, per experiment, one row per exposed person (``experiment_person_state``,
a msgpack :class:`~flagstaff.experiments.exposure.PersonState`) and running totals
(``experiment_totals``, one row per writer lane, a msgpack ``ExperimentTotals`` with the
fingerprint of the definition it was built for). In the ingest transaction an engine reads the
project's definitions version, gets the running experiments' specs (:class:`SpecCache`), and
when the batch has events that concern one (:func:`batch_work`), loads the persons involved,
applies the batch (:func:`apply_work`) and writes the persons changed and adds the totals'
increments. A recompute (:func:`recompute`) rebuilds one experiment from its stored events in
time order.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Iterable, Mapping, Sequence
from itertools import compress
from typing import Any

import msgspec
import orjson

from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentChanges,
    ExperimentEvent,
    ExperimentSpec,
    ExperimentState,
    ExperimentTotals,
    PersonState,
    add_totals,
)
from flagstaff.experiments.model import (
    ExperimentDefinition,
    Holdout,
    holdout_flag_filters,
    holdout_variant_key,
)
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.model import Event

EXPERIMENT_COLUMNS = (
    "id, feature_flag_id, holdout_id, definition, archived, deleted, created_at, updated_at"
)
HOLDOUT_COLUMNS = "id, name, description, filters, created_at, updated_at"

_msgpack = msgspec.msgpack.Encoder()
_person_decoder = msgspec.msgpack.Decoder(PersonState)
_totals_decoder = msgspec.msgpack.Decoder(ExperimentTotals)
_definition_decoder = msgspec.json.Decoder(ExperimentDefinition)
_json = msgspec.json.encode


class ExperimentRecord(msgspec.Struct):
    """An experiment as stored: its definition plus what the store keeps in columns."""

    id: int
    feature_flag_id: int
    holdout_id: int | None
    definition: ExperimentDefinition
    archived: bool
    deleted: bool
    created_at: str
    updated_at: str


class HoldoutRecord(msgspec.Struct):
    id: int
    name: str
    description: str | None
    filters: list[dict[str, Any]]
    created_at: str
    updated_at: str


def experiment_record(row: Sequence[Any]) -> ExperimentRecord:
    """From a row of :data:`EXPERIMENT_COLUMNS`."""
    eid, flag_id, holdout_id, definition, archived, deleted, created, updated = row
    return ExperimentRecord(
        eid,
        flag_id,
        holdout_id,
        _definition_decoder.decode(definition),
        bool(archived),
        bool(deleted),
        created,
        updated,
    )


def holdout_record(row: Sequence[Any]) -> HoldoutRecord:
    """From a row of :data:`HOLDOUT_COLUMNS`."""
    hid, name, description, filters, created, updated = row
    return HoldoutRecord(hid, name, description, msgspec.json.decode(filters), created, updated)


def definition_text(definition: ExperimentDefinition) -> str:
    return _json(definition).decode()


def holdout_filters(holdout: Holdout, holdout_id: int) -> str:
    """The stored filters: the first group serves ``holdout-<id>``, as in PostHog."""
    filters = [dict(group) for group in holdout.filters]
    filters[0]["variant"] = holdout_variant_key(holdout_id)
    return _json(filters).decode()


def encode_person(state: PersonState) -> bytes:
    return _msgpack.encode(state)


def decode_person(data: bytes) -> PersonState:
    return _person_decoder.decode(data)


def encode_totals(totals: ExperimentTotals) -> bytes:
    return _msgpack.encode(totals)


def decode_totals(data: bytes) -> ExperimentTotals:
    return _totals_decoder.decode(data)


def sum_totals(rows: Iterable[tuple[str, bytes]], fingerprint: str) -> ExperimentTotals:
    """The lanes' totals built for ``fingerprint``, added (others belong to an old spec)."""
    out = ExperimentTotals()
    for row_fingerprint, data in rows:
        if row_fingerprint == fingerprint:
            add_totals(out, decode_totals(data))
    return out


def spec_of(record: ExperimentRecord) -> ExperimentSpec:
    return ExperimentSpec(record.id, record.definition)


def running_specs(rows: Iterable[tuple[int, Any]]) -> list[ExperimentSpec]:
    """Specs of the experiments that have started, from ``(id, definition JSON)`` rows of the
    project's experiments that are not deleted."""
    specs = []
    for eid, definition in rows:
        parsed = _definition_decoder.decode(definition)
        if parsed.start_date is not None:
            specs.append(ExperimentSpec(eid, parsed))
    return specs


def spec_events(spec: ExperimentSpec) -> list[str]:
    """Every event name that can change the experiment's aggregates."""
    return sorted({spec.exposure_event, *spec.rules_by_event})


class Running(msgspec.Struct, frozen=True):
    """A project's running experiments at one definitions version."""

    version: int
    specs: list[ExperimentSpec]
    names: frozenset[str]
    """Every event name that concerns one of them."""
    exposure_names: frozenset[str]
    """The names of their exposure events."""
    metric_routes: dict[str, tuple[int, ...]]
    """Per metric event name, the experiments that read it."""
    counted_only: frozenset[str]
    """The metric event names no metric reads a property of (nor an exposure): such an event
    is applied without decoding its properties."""


class SpecCache:
    """The running experiments per database and project, for the definitions version they were
    read at; one per process. Compiling happens once per version, not per batch. The database
    is part of the key: two stores of one process (tests) can have the same project ids and
    versions with different experiments."""

    def __init__(self) -> None:
        self._by_project: dict[tuple[Hashable, int], Running] = {}

    def get(self, database: Hashable, project_id: int, version: int) -> Running | None:
        cached = self._by_project.get((database, project_id))
        return cached if cached is not None and cached.version == version else None

    def put(
        self, database: Hashable, project_id: int, version: int, specs: list[ExperimentSpec]
    ) -> Running:
        names = frozenset(name for spec in specs for name in spec_events(spec))
        exposures = frozenset(spec.exposure_event for spec in specs)
        routes: dict[str, list[int]] = {}
        for spec in specs:
            for name in spec.rules_by_event:
                routes.setdefault(name, []).append(spec.experiment_id)
        counted_only = frozenset(
            name
            for name in routes
            if name not in exposures
            and not any(
                rule.reads_properties(name)
                for spec in specs
                for rule in spec.rules_by_event.get(name, ())
            )
        )
        running = self._by_project[database, project_id] = Running(
            version,
            specs,
            names,
            exposures,
            {k: tuple(v) for k, v in routes.items()},
            counted_only,
        )
        return running


class BatchWork(msgspec.Struct):
    """What a batch does to the running experiments, before the stored persons are loaded."""

    accumulator: ExperimentAccumulator
    events: list[ExperimentEvent | None]
    """Per concerned event: the exposures decoded; metric events are None until
    :func:`select_events` finds their person exposed."""
    sources: list[Event]
    """The stored events behind ``events``, in the same order (uuids, properties)."""
    distinct_ids: list[str]
    """The sources' distinct ids, in the same order."""
    exposure_indexes: list[int]
    metric_indexes: list[int]
    """The positions of the metric events (concerning a running experiment, not exposures)."""
    persons: dict[str, str]
    """Every concerned distinct id's person uuid, as the batch leaves it."""
    merges: list[tuple[str, str]]
    """(source, target) person uuids merged by the batch, in order."""
    wanted: dict[int, set[str]]
    """Per experiment, the person uuids whose stored state is needed."""
    metric_names: Mapping[str, Any]
    """The names of the events some metric reads."""
    counted_only: frozenset[str]
    """See :attr:`Running.counted_only`."""


def batch_work(
    running: Running,
    project_id: int,
    by_distinct_id: Mapping[str, person_rules.PersonState],
    ops: Iterable[person_rules.PersonOp],
    kept: Iterable[Event],
) -> BatchWork | None:
    """The batch's events that concern a running experiment, resolved to their persons as the
    batch leaves them (merges applied); None when there is nothing to do.

    A batch whose events concern no running experiment costs a set look-up per event. Only
    exposure events are decoded here; a metric event's distinct id is resolved to its person
    (once per distinct id), and the event is decoded by :func:`select_events` only when its
    person turns out to be exposed.
    """
    names = running.names
    merges = [
        (op.source.uuid, op.target.uuid) for op in ops if type(op) is person_rules.MergePersons
    ]
    concerned = [event for event in kept if event.event in names]
    if not concerned and not merges:
        return None
    # per-event work in C loops (map, set): a metric on an event every visitor sends
    # concerns every event of the batch
    distinct_ids = list(map(_DISTINCT_ID, concerned))
    event_names = list(map(_NAME, concerned))
    exposure_names = running.exposure_names
    exposing = list(map(exposure_names.__contains__, event_names))
    positions = range(len(concerned))
    exposure_indexes = list(compress(positions, exposing))
    metric_indexes = list(compress(positions, map(operator.not_, exposing)))
    unique = list(set(distinct_ids))
    states = list(map(by_distinct_id.get, unique))
    if None in states:
        persons = {
            distinct_id: (
                state.uuid
                if state is not None
                else person_rules.person_uuid(project_id, distinct_id)
            )
            for distinct_id, state in zip(unique, states, strict=True)
        }
    else:
        persons = dict(zip(unique, map(_UUID, states), strict=True))
    events: list[ExperimentEvent | None] = [None] * len(concerned)
    exposures: list[ExperimentEvent] = []
    for i in exposure_indexes:
        event = concerned[i]
        row = events[i] = ExperimentEvent(
            persons[event.distinct_id],
            event.distinct_id,
            event.event,
            event.timestamp_ms,
            _properties(event),
        )
        exposures.append(row)
    accumulator = ExperimentAccumulator(running.specs)
    wanted = accumulator.relevant_persons(exposures)  # also routes their metric side
    routes = running.metric_routes
    by_name: dict[str, set[str]] = {}
    for i in metric_indexes:
        name = event_names[i]
        named = by_name.get(name)
        if named is None:
            named = by_name[name] = set()
        named.add(distinct_ids[i])
    for name, ids in by_name.items():
        experiments = routes.get(name, ())
        if experiments:
            named = set(map(persons.__getitem__, ids))
            for experiment_id in experiments:
                wanted.setdefault(experiment_id, set()).update(named)
    if merges:
        sides = {uuid for pair in merges for uuid in pair}
        for spec in running.specs:
            wanted.setdefault(spec.experiment_id, set()).update(sides)
    return BatchWork(
        accumulator,
        events,
        concerned,
        distinct_ids,
        exposure_indexes,
        metric_indexes,
        persons,
        merges,
        wanted,
        routes,
        running.counted_only,
    )


_NO_PROPERTIES: dict[str, Any] = {}
"""The properties of an event only counted (never changed: the accumulator only reads them)."""
_DISTINCT_ID = operator.attrgetter("distinct_id")
_NAME = operator.attrgetter("event")
_UUID = operator.attrgetter("uuid")


def _properties(event: Event) -> dict[str, Any]:
    raw = event.properties_json
    return orjson.loads(raw) if raw is not None else event.properties


def select_events(work: BatchWork, loaded: Mapping[int, Mapping[str, PersonState]]) -> list[int]:
    """Which of the work's events can change anything: exposures, and metric events of persons
    exposed before (a loaded state) or in this batch (decoded now). By position."""
    known: set[str] = {target for _, target in work.merges}
    for states in loaded.values():
        known.update(states)
    events = work.events
    sources = work.sources
    persons = work.persons
    distinct_ids = work.distinct_ids
    known.update(persons[distinct_ids[i]] for i in work.exposure_indexes)
    exposed = set(compress(persons, map(known.__contains__, persons.values())))
    exposures = set(work.exposure_indexes)
    measured = [
        i
        for i in compress(range(len(sources)), map(exposed.__contains__, distinct_ids))
        if i not in exposures
    ]
    counted_only = work.counted_only
    for i in measured:
        source = sources[i]
        events[i] = ExperimentEvent(
            persons[source.distinct_id],
            source.distinct_id,
            source.event,
            source.timestamp_ms,
            _NO_PROPERTIES if source.event in counted_only else _properties(source),
        )
    if not measured:
        return work.exposure_indexes
    return sorted(work.exposure_indexes + measured)


def retry_candidates(work: BatchWork, selected: list[int]) -> list[str]:
    """The uuids of the selected events that would count twice if already stored (a retried
    request's): those some metric reads. An exposure alone changes nothing the second time
    (the person's state already holds its variant and a time no later than its own), so its
    uuid need not be looked up."""
    sources = work.sources
    metric_names = work.metric_names
    return [sources[i].uuid for i in selected if sources[i].event in metric_names]


def apply_work(
    work: BatchWork,
    loaded: Mapping[int, Mapping[str, PersonState]],
    selected: list[int],
    duplicates: set[str],
) -> list[ExperimentChanges]:
    """Apply the batch to the loaded persons: merges first (the events already name the
    merged person), then the ``selected`` events not already stored (``duplicates``: their
    uuids), in time order. Returns per experiment the persons to upsert and the increments to
    add to the stored totals."""
    accumulator = work.accumulator
    for experiment_id, persons in loaded.items():
        accumulator.load_persons(experiment_id, persons)
    for source, target in work.merges:
        accumulator.merge_persons(source, target)
    sources = work.sources
    events = [
        event
        for i in selected
        if sources[i].uuid not in duplicates and (event := work.events[i]) is not None
    ]
    events.sort(key=lambda e: e.timestamp_ms)
    accumulator.add_many(events)
    return accumulator.drain()


def recompute(spec: ExperimentSpec, rows: Iterable[ExperimentEvent]) -> ExperimentState:
    """The experiment's persons and totals from its events in time order."""
    accumulator = ExperimentAccumulator([spec])
    accumulator.add_many(rows)
    return accumulator.state(spec.experiment_id)


def add_increment(stored: bytes | None, change: ExperimentChanges) -> bytes:
    """A lane's new totals: the batch's increment added to the stored ones."""
    if stored is None:
        return encode_totals(change.totals_increment)
    totals = decode_totals(stored)
    add_totals(totals, change.totals_increment)
    return encode_totals(totals)


def needs_recompute(old: ExperimentRecord, definition: ExperimentDefinition, deleted: bool) -> bool:
    """Whether an update invalidates the stored aggregates: launching, or a change of what
    counts (flag, variants, window, exposure, metrics' counting fields)."""
    if deleted or definition.start_date is None:
        return False
    if old.definition.start_date is None:
        return True
    return spec_of(old).fingerprint != ExperimentSpec(old.id, definition).fingerprint


def with_holdout(
    flag: dict[str, Any], holdout_id: int | None, holdout: Holdout | None
) -> dict[str, Any]:
    """The flag with its ``filters.holdout`` set for the experiment's holdout (or cleared)."""
    filters = dict(flag.get("filters") or {})
    filters.update(holdout_flag_filters(holdout_id, holdout))
    return {**flag, "filters": filters}
