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
from collections import Counter
from collections.abc import Callable, Container, Hashable, Iterable, Mapping, Sequence
from itertools import compress
from typing import Any

import msgspec
import orjson

from flagstaff.common.units import DAY_MS
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
    DEFAULT_EXPOSURE_EVENT,
    ExperimentDefinition,
    Holdout,
    holdout_flag_filters,
    holdout_variant_key,
)
from flagstaff.flags.records import FlagDefinition
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.event_names import FLAG_PROPERTY
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
    flag_calls: dict[str, tuple[int, ...]]
    """Per flag key, the experiments a ``$feature_flag_called`` of it may expose."""
    flag_calls_read_all: bool
    """Whether a ``$feature_flag_called`` needs more than its flag and response properties
    (an exposure filter, or a metric reading it); if not, its properties are not decoded."""
    custom_exposures: dict[str, tuple[int, ...]]
    """Per custom exposure event name, the experiments it may expose."""


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
        flag_calls: dict[str, list[int]] = {}
        custom: dict[str, list[int]] = {}
        for spec in specs:
            for name in spec.rules_by_event:
                routes.setdefault(name, []).append(spec.experiment_id)
            if spec.exposure_event == DEFAULT_EXPOSURE_EVENT:
                flag_calls.setdefault(spec.flag_key, []).append(spec.experiment_id)
            else:
                custom.setdefault(spec.exposure_event, []).append(spec.experiment_id)
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
        read_all = DEFAULT_EXPOSURE_EVENT in routes or any(
            spec.exposure_matcher is not None
            for spec in specs
            if spec.exposure_event == DEFAULT_EXPOSURE_EVENT
        )
        running = self._by_project[database, project_id] = Running(
            version,
            specs,
            names,
            exposures,
            _tuples(routes),
            counted_only,
            _tuples(flag_calls),
            read_all,
            _tuples(custom),
        )
        return running


def _tuples(lists: dict[str, list[int]]) -> dict[str, tuple[int, ...]]:
    return {key: tuple(value) for key, value in lists.items()}


class BatchWork(msgspec.Struct):
    """What a batch does to the running experiments, before the stored persons are loaded.

    Positions index ``sources``, the batch's events that concern a running experiment. Metric
    events are also counted per (name, distinct id): the ``pair_*`` lists, in the same order."""

    sources: list[Event]
    names: list[str]
    """The sources' event names, in the same order."""
    distinct_ids: list[str]
    """The sources' distinct ids, in the same order."""
    exposures: list[ExperimentEvent]
    """The exposure events, decoded, with their positions in ``exposure_indexes``."""
    exposure_indexes: list[int]
    pair_names: list[str]
    pair_distinct_ids: list[str]
    pair_persons: list[str]
    pair_counts: list[int]
    pair_groups: dict[str, list[int]]
    """Per metric event name, the indexes of its pairs."""
    persons: dict[str, str]
    """Every concerned distinct id's person uuid, as the batch leaves it."""
    merges: list[tuple[str, str]]
    """(source, target) person uuids merged by the batch, in order."""
    wanted: dict[int, set[str]]
    """Per experiment, the person uuids whose stored state is needed."""
    running: Running


def batch_work(
    running: Running,
    project_id: int,
    by_distinct_id: Mapping[str, person_rules.PersonState],
    ops: Iterable[person_rules.PersonOp],
    kept: list[Event],
) -> BatchWork | None:
    """The batch's events that concern a running experiment, resolved to their persons as the
    batch leaves them (merges applied); None when there is nothing to do.

    A batch whose events concern no running experiment costs a set look-up per event, in C.
    Only exposure events are decoded here; metric events are counted per (name, distinct id)
    in C-level passes, and decoded by :func:`apply_work` only when their person turns out to
    be exposed and a metric needs more than their count.
    """
    names = running.names
    merges = [
        (op.source.uuid, op.target.uuid) for op in ops if type(op) is person_rules.MergePersons
    ]
    every_name = list(map(_NAME, kept))
    concerning = list(map(names.__contains__, every_name))
    unconcerned = concerning.count(False)
    if unconcerned == len(concerning) and not merges:
        return None
    # per-event work in C loops (map, compress, Counter): a metric on an event every visitor
    # sends concerns every event of the batch
    if unconcerned:
        concerned = list(compress(kept, concerning))
        event_names = list(compress(every_name, concerning))
    else:
        concerned, event_names = kept, every_name
    distinct_ids = list(map(_DISTINCT_ID, concerned))
    exposure_indexes = _exposure_indexes(running, event_names)
    pair_names, pair_ids, pair_counts = _pairs(event_names, distinct_ids, exposure_indexes)
    unique = set(pair_ids)
    unique.update(map(distinct_ids.__getitem__, exposure_indexes))
    try:  # one pass when every distinct id has a person (the rules gave one to most)
        persons = {distinct_id: by_distinct_id[distinct_id].uuid for distinct_id in unique}
    except KeyError:
        persons = {
            distinct_id: (
                state.uuid
                if (state := by_distinct_id.get(distinct_id)) is not None
                else person_rules.person_uuid(project_id, distinct_id)
            )
            for distinct_id in unique
        }
    wanted: dict[int, set[str]] = {}
    exposures: list[ExperimentEvent] = []
    # a flag call's flag and response are among the few properties every event carries
    # decoded (the writer's and flag usage's)
    quick = not running.flag_calls_read_all
    for i in exposure_indexes:
        event = concerned[i]
        if quick and event.event == DEFAULT_EXPOSURE_EVENT:
            properties = event.properties
        else:
            properties = _properties(event)
        person = persons[event.distinct_id]
        exposures.append(
            ExperimentEvent(person, event.distinct_id, event.event, event.timestamp_ms, properties)
        )
        name = event.event
        targets = running.custom_exposures.get(name, ())
        if name == DEFAULT_EXPOSURE_EVENT:
            flag_key = properties.get(FLAG_PROPERTY)
            if type(flag_key) is str:
                targets += running.flag_calls.get(flag_key, ())
        for experiment_id in (*targets, *running.metric_routes.get(name, ())):
            wanted.setdefault(experiment_id, set()).add(person)
    pair_persons = list(map(persons.__getitem__, pair_ids))
    pair_groups = _groups(pair_names)
    for name, group in pair_groups.items():
        involved = set(map(pair_persons.__getitem__, group))
        for experiment_id in running.metric_routes[name]:
            wanted.setdefault(experiment_id, set()).update(involved)
    if merges:
        sides = {uuid for pair in merges for uuid in pair}
        for spec in running.specs:
            wanted.setdefault(spec.experiment_id, set()).update(sides)
    return BatchWork(
        concerned,
        event_names,
        distinct_ids,
        exposures,
        exposure_indexes,
        pair_names,
        pair_ids,
        pair_persons,
        pair_counts,
        pair_groups,
        persons,
        merges,
        wanted,
        running,
    )


def _exposure_indexes(running: Running, names: list[str]) -> list[int]:
    """The positions of the exposure events among these names."""
    return list(compress(range(len(names)), map(running.exposure_names.__contains__, names)))


def _pairs(
    names: list[str], distinct_ids: list[str], exposure_indexes: list[int]
) -> tuple[list[str], list[str], list[int]]:
    """The metric events counted per (name, distinct id), as three lists. Exposure events are
    left out (their pairs hold only exposures): :meth:`ExperimentAccumulator.add` applies
    them, and any metric reading them."""
    counted = Counter(zip(names, distinct_ids, strict=True))
    for i in exposure_indexes:
        counted.pop((names[i], distinct_ids[i]), None)
    return list(map(_FIRST, counted)), list(map(_SECOND, counted)), list(counted.values())


def _groups(pair_names: list[str]) -> dict[str, list[int]]:
    """Per name, the indexes of its pairs (a C pass per name: a batch has few)."""
    positions = range(len(pair_names))
    return {
        name: list(compress(positions, map(name.__eq__, pair_names))) for name in set(pair_names)
    }


_NO_PROPERTIES: dict[str, Any] = {}
"""The properties of an event only counted (never changed: the accumulator only reads them)."""
_DISTINCT_ID = operator.attrgetter("distinct_id")
_NAME = operator.attrgetter("event")
_TIMESTAMP = operator.attrgetter("timestamp_ms")
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)


def _properties(event: Event) -> dict[str, Any]:
    raw = event.properties_json
    return orjson.loads(raw) if raw is not None else event.properties


def merged_away(work: BatchWork, experiment_id: int, holding: Container[str]) -> list[str]:
    """The persons the batch merged into another that the experiment wanted and no longer
    holds (``holding``): their state moved to the target, their row is to be deleted."""
    wanted = work.wanted.get(experiment_id, ())
    return [
        source
        for source in {source for source, _ in work.merges}
        if source in wanted and source not in holding
    ]


def retry_candidates(work: BatchWork, loaded: Mapping[int, Mapping[str, PersonState]]) -> list[str]:
    """The uuids of the metric events that would count twice if already stored (a retried
    request's): those of persons with a stored state (in ``loaded``, looked into, not copied)
    or exposed by this batch. An exposure
    alone changes nothing the second time (the person's state already holds its variant and a
    time no later than its own), so its uuid need not be looked up."""
    exposed: set[str] = {target for _, target in work.merges}
    exposed.update(event.person_id for event in work.exposures)
    held = list(loaded.values())
    exposures = work.running.exposure_names
    persons = work.persons
    return [
        source.uuid
        for source, name, distinct_id in zip(
            work.sources, work.names, work.distinct_ids, strict=True
        )
        if name not in exposures
        and (
            (person := persons[distinct_id]) in exposed or any(person in states for states in held)
        )
    ]


def apply_work(
    accumulator: ExperimentAccumulator,
    work: BatchWork,
    loaded: Mapping[int, Mapping[str, PersonState]],
    duplicates: set[str],
) -> list[ExperimentChanges]:
    """:func:`apply_events`, then per experiment the persons to upsert and the totals (see
    :meth:`ExperimentAccumulator.drain`), for experiments without CUPED (or no stored
    event before any exposure)."""
    apply_events(accumulator, work, loaded, duplicates)
    return accumulator.drain()


def apply_events(
    accumulator: ExperimentAccumulator,
    work: BatchWork,
    loaded: Mapping[int, Mapping[str, PersonState]],
    duplicates: set[str],
) -> None:
    """Apply the batch to the loaded persons, leaving out events already stored
    (``duplicates``: their uuids): merges first (the events already name the merged person),
    then the exposures in time order, then per experiment its metric events of persons now
    exposed: counted per person where the experiment only counts them, else one by one in
    time order. A store then gives the covariates' stored events
    (:meth:`ExperimentAccumulator.covariate_requests`, :func:`identities`) and drains."""
    for experiment_id, persons in loaded.items():
        accumulator.load_persons(experiment_id, persons)
    for source, target in work.merges:
        accumulator.merge_persons(source, target)
    sources = work.sources
    exposures = work.exposures
    pair_names, pair_ids, pair_persons, pair_counts = (
        work.pair_names,
        work.pair_distinct_ids,
        work.pair_persons,
        work.pair_counts,
    )
    groups = work.pair_groups
    keep: list[bool] | None = None
    if duplicates:
        keep = [source.uuid not in duplicates for source in sources]
        exposures = list(compress(exposures, map(keep.__getitem__, work.exposure_indexes)))
        kept_names = list(compress(work.names, keep))
        pair_names, pair_ids, pair_counts = _pairs(
            kept_names,
            list(compress(work.distinct_ids, keep)),
            _exposure_indexes(work.running, kept_names),
        )
        pair_persons = list(map(work.persons.__getitem__, pair_ids))
        groups = _groups(pair_names)
    accumulator.add_many(sorted(exposures, key=_TIMESTAMP))
    span: tuple[int, int] | None = None
    one_by_one: dict[int, set[tuple[str, str]]] = {}
    for spec in work.running.specs:
        experiment_id = spec.experiment_id
        counted = spec.counted
        held = accumulator.persons(experiment_id)
        counts: dict[str, dict[str, int]] = {}
        single: set[tuple[str, str]] = set()
        for name in spec.rules_by_event:
            group = groups.get(name)
            if not group:
                continue
            exposed = list(
                compress(group, map(held.__contains__, map(pair_persons.__getitem__, group)))
            )
            if not exposed:
                continue
            if name in counted:
                exposed_persons = list(map(pair_persons.__getitem__, exposed))
                numbers = map(pair_counts.__getitem__, exposed)
                by_person = counts[name] = dict(zip(exposed_persons, numbers, strict=True))
                if len(by_person) < len(exposed_persons):  # distinct ids of one person: add them up
                    by_person.clear()
                    for k in exposed:
                        person = pair_persons[k]
                        by_person[person] = by_person.get(person, 0) + pair_counts[k]
            else:
                single.update((name, pair_ids[k]) for k in exposed)
        for name, by_person in counts.items():
            if span is None:
                times = list(map(_TIMESTAMP, sources))
                span = min(times), max(times)
            later = accumulator.count(experiment_id, name, by_person, *span)
            if later:
                again = set(later)
                single.update((name, pair_ids[k]) for k in groups[name] if pair_persons[k] in again)
        if single:
            one_by_one[experiment_id] = single
    if one_by_one:
        _measure(accumulator, work, one_by_one, keep)


def _measure(
    accumulator: ExperimentAccumulator,
    work: BatchWork,
    one_by_one: dict[int, set[tuple[str, str]]],
    keep: list[bool] | None,
) -> None:
    """Apply, per experiment, the events of its (name, distinct id) pairs one by one, in time
    order (equal times in the batch's order); each event is decoded once."""
    wanted = set().union(*one_by_one.values())
    names = work.names
    distinct_ids = work.distinct_ids
    positions: dict[tuple[str, str], list[int]] = {}
    for name in {name for name, _ in wanted}:
        for i in compress(range(len(names)), map(name.__eq__, names)):
            key = (name, distinct_ids[i])
            if key in wanted and (keep is None or keep[i]):
                positions.setdefault(key, []).append(i)
    decoded: dict[int, ExperimentEvent] = {}
    sources = work.sources
    persons = work.persons
    counted_only = work.running.counted_only
    for experiment_id, pairs in one_by_one.items():
        chosen = sorted(i for pair in pairs for i in positions.get(pair, ()))
        events = []
        for i in chosen:
            event = decoded.get(i)
            if event is None:
                source = sources[i]
                event = decoded[i] = ExperimentEvent(
                    persons[source.distinct_id],
                    source.distinct_id,
                    source.event,
                    source.timestamp_ms,
                    _NO_PROPERTIES if source.event in counted_only else _properties(source),
                )
            events.append(event)
        events.sort(key=_TIMESTAMP)  # stable: equal times keep the batch's order
        accumulator.measure(experiment_id, events)


def identities(work: BatchWork, persons: Iterable[str]) -> dict[str, set[str]]:
    """The batch's distinct ids of these persons (a store adds those it has stored)."""
    wanted = set(persons)
    found: dict[str, set[str]] = {person: set() for person in wanted}
    for distinct_id, person in work.persons.items():
        if person in wanted:
            found[person].add(distinct_id)
    return found


def resolved_event(project_id: int, row: Sequence[Any]) -> ExperimentEvent:
    """A recompute's event from a row ``(distinct id, event, timestamp, properties JSON,
    person uuid now or None)``: an event without a person counts for ``person_uuid``."""
    distinct_id, name, timestamp_ms, properties, person = row
    return ExperimentEvent(
        person or person_rules.person_uuid(project_id, distinct_id),
        distinct_id,
        name,
        timestamp_ms,
        orjson.loads(properties),
    )


def recompute(
    spec: ExperimentSpec,
    rows: Iterable[ExperimentEvent],
    before: Callable[[], Iterable[ExperimentEvent]] | None = None,
) -> ExperimentState:
    """The experiment's persons and totals from its events in time order; with CUPED, then
    ``before()``: the covariates' events (:func:`covariate_span`), in any order."""
    accumulator = ExperimentAccumulator([spec])
    accumulator.add_many(rows)
    if before is not None and spec.lookback_ms is not None:
        accumulator.add_covariates(before())
    return accumulator.state(spec.experiment_id)


def covariate_span(spec: ExperimentSpec) -> tuple[list[str], int, int] | None:
    """With CUPED, what a recompute reads for the covariates: the event names, and the
    timestamps from the lookback before the start to the end (None: no CUPED)."""
    if spec.lookback_ms is None or not spec.pre_events:
        return None
    start = spec.start_ms if spec.start_ms is not None else 0
    end = spec.end_ms if spec.end_ms is not None else 2**62
    return sorted(spec.pre_events), start - spec.lookback_ms, end


def days_complete(lanes: Iterable[ExperimentTotals]) -> bool:
    """Whether the lanes' day histograms add up to their exposed persons, per variant (not
    so for totals stored before the histograms existed)."""
    exposed: Counter[str] = Counter()
    dated: Counter[str] = Counter()
    for totals in lanes:
        for key, variant in totals.variants.items():
            exposed[key] += variant.exposed
            dated[key] += sum(variant.days.values())
    return all(dated[key] == count for key, count in exposed.items())


def backfill_days(
    spec: ExperimentSpec, lanes: list[tuple[int, bytes]], persons: Iterable[bytes]
) -> list[tuple[int, bytes]]:
    """The lanes' totals (``(lane, totals)``, all built for ``spec``) with their day
    histograms rebuilt from the experiment's stored persons (msgpack ``PersonState``): the
    first lane gets every person counted in the totals (not excluded), the others none.
    Empty when the histograms are complete already (nothing to write)."""
    decoded = [(lane, decode_totals(data)) for lane, data in lanes]
    if not decoded or days_complete(totals for _, totals in decoded):
        return []
    days: dict[str, Counter[int]] = {}
    for data in persons:
        person = decode_person(data)
        if not person.excluded:
            days.setdefault(person.variant, Counter())[person.exposed_ms // DAY_MS] += 1
    for _, totals in decoded:
        for variant in totals.variants.values():
            variant.days = {}
    first = decoded[0][1]
    for key, counted in days.items():
        first_variant = first.variants.get(key)
        if first_variant is None:
            first_variant = first.variants[key] = spec.empty_variant()
        first_variant.days = dict(sorted(counted.items()))
    return [(lane, encode_totals(totals)) for lane, totals in decoded]


def add_increment(stored: bytes | None, change: ExperimentChanges) -> bytes:
    """A lane's new totals: the batch's increment added to the stored ones."""
    if stored is None:
        return encode_totals(change.totals)
    totals = decode_totals(stored)
    add_totals(totals, change.totals)
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
    flag: FlagDefinition, holdout_id: int | None, holdout: Holdout | None
) -> FlagDefinition:
    """The flag with its ``filters.holdout`` set for the experiment's holdout (or cleared)."""
    filters = {**flag.filters, **holdout_flag_filters(holdout_id, holdout)}
    return msgspec.structs.replace(flag, filters=filters)
