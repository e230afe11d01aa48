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

_decode = msgspec.json.decode


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
