"""What an ingestion batch does the same way on every engine, between reading and writing.

An engine loads the persons (and, when :func:`needs_groups`, the groups) a batch touches into
the rules' books, calls :func:`apply_rules`, then writes what the books recorded
(``PersonBook.ops``, ``changed()``, ``GroupBook.new_types``...), the kept events and the
:func:`warnings_of` the batch, each in its own SQL.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.ingest import groups as group_rules
from flagstaff.ingest import persons as person_rules
from flagstaff.ingest.event_names import GROUP_IDENTIFY_EVENTS
from flagstaff.ingest.model import Drop, Event
from flagstaff.store.rows import warning_details
from flagstaff.surveys import stats as survey_stats

_decode = msgspec.json.decode


SURVEY_EVENT_NAMES = frozenset(survey_stats.EVENTS)


def needs_groups(events: list[Event]) -> bool:
    """Whether the batch identifies groups, so the engine must load a group book."""
    return any(e.event in GROUP_IDENTIFY_EVENTS for e in events)


class RuleOutcome(msgspec.Struct):
    """What :func:`apply_rules` made of a batch, by position in its event list."""

    kept: list[int]
    """Events to store, in arrival order."""
    dropped: list[int]
    """Events the group rules refused; ``drops`` holds their drops in the same order."""
    drops: list[Drop]


def apply_rules(
    book: person_rules.PersonBook,
    group_book: group_rules.GroupBook | None,
    events: list[Event],
) -> RuleOutcome:
    """Run the person and group rules over ``events`` in arrival order.

    ``group_book`` may be None only when :func:`needs_groups` is false.
    """
    kept: list[int] = []
    dropped: list[int] = []
    drops: list[Drop] = []
    apply_event = person_rules.apply_event
    for i, event in enumerate(events):
        if event.event in GROUP_IDENTIFY_EVENTS:
            assert group_book is not None
            reason = group_rules.apply_group_identify(group_book, event)
            if reason is not None:
                dropped.append(i)
                drops.append(Drop.of(event, reason, group_rules.DROP_DETAILS[reason]))
                continue
        else:
            apply_event(book, event)
        kept.append(i)
    return RuleOutcome(kept, dropped, drops)


def person_state(
    states: dict[int, person_rules.PersonState],
    person_id: int,
    person_uuid: str,
    properties: bytes | str,
    is_identified: Any,
    created_at_ms: int,
) -> person_rules.PersonState:
    """The state of a loaded person row: one object per person, however many ids name it."""
    state = states.get(person_id)
    if state is None:
        state = person_rules.PersonState(
            person_id, person_uuid, _decode(properties), bool(is_identified), created_at_ms
        )
        states[person_id] = state
    return state


def warnings_of(
    drops: list[Drop], rule_warnings: list[person_rules.RuleWarning]
) -> list[person_rules.RuleWarning]:
    """Every ingestion warning of a batch: its dropped events first, then the rules' own."""
    out = [person_rules.RuleWarning(d.reason, warning_details(d)) for d in drops]
    out.extend(rule_warnings)
    return out


def count_reasons(drops: list[Drop]) -> dict[str, int]:
    """How many events were dropped for each reason."""
    dropped: dict[str, int] = {}
    for d in drops:
        dropped[d.reason] = dropped.get(d.reason, 0) + 1
    return dropped


class SurveyEvent(msgspec.Struct, frozen=True):
    """A stored ``survey shown`` / ``dismissed`` / ``sent`` event, as the aggregates read it."""

    survey_id: str
    event: str
    properties: dict[str, Any]
    """Its ``$survey_*`` properties."""
    person: str
    """The person's uuid (the distinct id when the event made no person)."""
    timestamp_ms: int
    uuid: str


def survey_events(
    events: list[Event], book: person_rules.PersonBook | None = None
) -> list[SurveyEvent]:
    """The survey events among ``events`` (the kept ones): one set look-up per event, so a
    batch without survey events costs nothing more. Properties come from the event's JSON
    when the writer was sent only the rules' keys."""
    found = [e for e in events if e.event in SURVEY_EVENT_NAMES]
    if not found:
        return []
    out = []
    for e in found:
        props = e.properties
        if e.properties_json is not None:
            props = _decode(e.properties_json)
        survey_id = survey_stats.survey_id_of(e.event, props)
        if survey_id is None:
            continue
        person = e.distinct_id
        state = book.by_distinct_id.get(e.distinct_id) if book is not None else None
        while state is not None and state.merged_into is not None:
            state = state.merged_into
        if state is not None and state.uuid:
            person = state.uuid
        out.append(
            SurveyEvent(
                survey_id,
                e.event,
                survey_stats.stats_properties(props),
                person,
                e.timestamp_ms,
                e.uuid,
            )
        )
    return out


class AggregateChange(msgspec.Struct):
    """One survey's aggregate after a batch: what to write, and whether the survey just
    reached its ``responses_limit`` (the caches must then stop serving it)."""

    survey_id: str
    state: bytes
    responses: int
    limit_reached: bool


def fold_survey_events(
    found: list[SurveyEvent],
    stored: dict[str, bytes | None],
    limits: dict[str, int | None],
) -> list[AggregateChange]:
    """Fold the new survey events into their surveys' stored aggregates.

    ``stored``: the current state of each survey that exists (None: no aggregate yet);
    events of other survey ids are not counted. ``limits``: each survey's responses_limit.
    """
    states: dict[str, survey_stats.SurveyStats] = {}
    before: dict[str, int] = {}
    for e in found:
        if e.survey_id not in stored:
            continue
        state = states.get(e.survey_id)
        if state is None:
            raw = stored[e.survey_id]
            state = survey_stats.decode(raw) if raw is not None else survey_stats.SurveyStats()
            states[e.survey_id] = state
            before[e.survey_id] = state.responses
        state.add(e.event, e.properties, person=e.person, timestamp_ms=e.timestamp_ms, uuid=e.uuid)
    out = []
    for survey_id, state in states.items():
        limit = limits.get(survey_id)
        responses = state.responses
        reached = limit is not None and before[survey_id] < limit <= responses
        out.append(AggregateChange(survey_id, survey_stats.encode(state), responses, reached))
    return out
