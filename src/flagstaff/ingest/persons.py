"""Person rules: property updates and identify/alias merge decisions, as PostHog makes them.

Pure code. The store loads the persons a batch touches into a :class:`PersonBook`, the rules
change the book event by event (in arrival order), and the store writes back what the book
recorded: persons created, distinct ids assigned, persons merged, persons changed.
"""

from __future__ import annotations

import operator
from typing import Any

import msgspec
import uuid_utils

from flagstaff.ingest.event_names import (
    ALIAS_EVENTS,
    ALWAYS_UPDATE_PERSON_EVENTS,
    GROUP_IDENTIFY_EVENTS,
    IDENTIFY,
    MERGE_DANGEROUSLY,
    MERGE_EVENTS,
    NEVER_UPDATE_PERSON_EVENTS,
)
from flagstaff.ingest.model import Event

# Never merged on: too generic to name one person (PostHog's list).
ILLEGAL_IDS_CASE_INSENSITIVE = frozenset(
    {
        "anonymous",
        "guest",
        "distinctid",
        "distinct_id",
        "id",
        "not_authenticated",
        "email",
        "undefined",
        "true",
        "false",
    }
)
ILLEGAL_IDS_EXACT = frozenset({"NaN", "None", "none", "null", "0", "[object Object]"})

# Event properties copied to the person ($set) and kept as first-touch values ($set_once
# of "$initial_<name>"), as PostHog's ingestion does.
EVENT_TO_PERSON_PROPERTIES = frozenset(
    {
        "$app_build",
        "$app_name",
        "$app_namespace",
        "$app_version",
        "$browser",
        "$browser_version",
        "$device_type",
        "$current_url",
        "$pathname",
        "$os",
        "$os_version",
        "$referring_domain",
        "$referrer",
        "utm_source",
        "utm_medium",
        "utm_campaign",
        "utm_content",
        "utm_name",
        "utm_term",
        "gclid",
        "gad_source",
        "gclsrc",
        "dclid",
        "gbraid",
        "wbraid",
        "fbclid",
        "msclkid",
        "twclid",
        "li_fat_id",
        "mc_cid",
        "igshid",
        "ttclid",
        "rdt_cid",
    }
)
_INITIAL_NAMES = {key: "$initial_" + key.lstrip("$") for key in EVENT_TO_PERSON_PROPERTIES}

_PERSON_NAMESPACE = uuid_utils.UUID("9f1d7a4e-5b0c-4c2a-8e43-f1a9c3b2d6e1")

# Properties that change often and are not worth a person write on their own: a new value of
# one already on the person is ignored unless the event changes something else too. PostHog's
# list (FILTERED_PERSON_UPDATE_PROPERTIES); $geoip_country_name and $geoip_city_name still count.
FILTERED_UPDATE_PROPERTIES = frozenset(
    {
        "$current_url",
        "$pathname",
        "$referring_domain",
        "$referrer",
        "$screen_height",
        "$screen_width",
        "$viewport_height",
        "$viewport_width",
        "$browser",
        "$browser_version",
        "$device_type",
        "$raw_user_agent",
        "$os",
        "$os_name",
        "$os_version",
        "$geoip_postal_code",
        "$geoip_time_zone",
        "$geoip_latitude",
        "$geoip_longitude",
        "$geoip_accuracy_radius",
        "$geoip_subdivision_1_code",
        "$geoip_subdivision_1_name",
        "$geoip_subdivision_2_code",
        "$geoip_subdivision_2_name",
        "$geoip_subdivision_3_code",
        "$geoip_subdivision_3_name",
        "$geoip_city_confidence",
        "$geoip_country_confidence",
        "$geoip_postal_code_confidence",
        "$geoip_subdivision_1_confidence",
        "$geoip_subdivision_2_confidence",
    }
)

# Every event property the person and group rules read; the rest is only stored.
RULE_PROPERTY_KEYS = EVENT_TO_PERSON_PROPERTIES | {
    "$anon_distinct_id",
    "alias",
    "$group_type",
    "$group_key",
    "$group_set",
}


def is_illegal_id(distinct_id: str) -> bool:
    return (
        distinct_id.strip().lower() in ILLEGAL_IDS_CASE_INSENSITIVE
        or distinct_id in ILLEGAL_IDS_EXACT
        or not distinct_id.strip()
    )


def person_uuid(project_id: int, distinct_id: str) -> str:
    """Deterministic, so two writers creating the same person pick the same uuid (RFC 4122
    version 5; uuid_utils computes it ~20x faster than the standard library's ``uuid5``)."""
    return str(uuid_utils.uuid5(_PERSON_NAMESPACE, f"{project_id}:{distinct_id}"))


class PersonState:
    """A person as the book sees it while a batch is applied."""

    __slots__ = (
        "created_at_ms",
        "dirty",
        "enrollment",
        "id",
        "is_identified",
        "is_new",
        "merged_into",
        "properties",
        "uuid",
    )

    def __init__(
        self,
        id: int | None,
        uuid: str,
        properties: dict[str, Any],
        is_identified: bool,
        created_at_ms: int,
        *,
        is_new: bool = False,
    ) -> None:
        self.id = id
        self.uuid = uuid
        self.properties = properties
        self.is_identified = is_identified
        self.created_at_ms = created_at_ms
        self.is_new = is_new
        self.dirty = False
        self.enrollment = False
        """An ``$feature_enrollment/<flag key>`` property of the person was set or unset by
        the batch, or a merge brought it some: the store rewrites its enrollments (and
        clears this once planned)."""
        self.merged_into: PersonState | None = None


class CreatePerson(msgspec.Struct, frozen=True, gc=False):
    """Insert ``state`` as a new person (the store gives it its id)."""

    state: PersonState


class AssignDistinctId(msgspec.Struct, frozen=True, gc=False):
    """Point ``distinct_id`` at ``state``'s person."""

    distinct_id: str
    state: PersonState


class MergePersons(msgspec.Struct, frozen=True, gc=False):
    """Move ``source``'s distinct ids and overrides to ``target``, then delete ``source``."""

    source: PersonState
    target: PersonState


PersonOp = CreatePerson | AssignDistinctId | MergePersons
"""What a :class:`PersonBook` asks its store to write, in order. Made per new person on the
ingest hot path: msgspec structs (about 70 ns more than a tuple) outside the cycle collector,
safe as they only point at states and strings, never back at the book."""


class RuleWarning(msgspec.Struct, frozen=True):
    """An ingestion warning a rule raises (the event itself is still stored)."""

    kind: str
    details: dict[str, Any]


class MergePair(msgspec.Struct, frozen=True, gc=False):
    """The two distinct ids a merge event names: ``other_id``'s person folds into ``into_id``'s."""

    other_id: str
    into_id: str


class PersonBook:
    """The persons of one batch by distinct id, and the operations to persist.

    ``ops`` holds the :data:`PersonOp` records in order. Changed properties are read from the
    states themselves (:meth:`changed`).
    """

    def __init__(self, project_id: int, loaded: dict[str, PersonState]) -> None:
        self.project_id = project_id
        self.by_distinct_id: dict[str, PersonState] = dict(loaded)
        self.ops: list[PersonOp] = []
        self.warnings: list[RuleWarning] = []

    def get(self, distinct_id: str) -> PersonState | None:
        return self.by_distinct_id.get(distinct_id)

    def create(self, distinct_id: str, created_at_ms: int) -> PersonState:
        state = PersonState(
            None, person_uuid(self.project_id, distinct_id), {}, False, created_at_ms, is_new=True
        )
        self.ops.append(CreatePerson(state))
        self.assign(distinct_id, state)
        return state

    def assign(self, distinct_id: str, state: PersonState) -> None:
        self.by_distinct_id[distinct_id] = state
        self.ops.append(AssignDistinctId(distinct_id, state))

    def merge(self, source: PersonState, target: PersonState) -> None:
        """Fold ``source`` into ``target``: target's properties win, the earliest creation."""
        target.properties = {**source.properties, **target.properties}
        target.created_at_ms = min(target.created_at_ms, source.created_at_ms)
        target.dirty = True
        if source.enrollment or any(map(_is_enrollment, source.properties)):
            source.enrollment = target.enrollment = True  # the source's enrollments move
        source.merged_into = target
        for did, state in self.by_distinct_id.items():
            if state is source:
                self.by_distinct_id[did] = target
        self.ops.append(MergePersons(source, target))

    def changed(self) -> list[PersonState]:
        """Existing persons whose stored row must be rewritten (new ones are inserted whole)."""
        merged_away = {id(op.source) for op in self.ops if type(op) is MergePersons}
        seen: set[int] = set()
        out: list[PersonState] = []
        for state in self.by_distinct_id.values():
            key = id(state)
            if key in seen or key in merged_away:
                continue
            seen.add(key)
            if state.dirty and not state.is_new:
                out.append(state)
        return out


_MISSING = object()
_KEY = operator.itemgetter(0)

ENROLLMENT_PREFIX = "$feature_enrollment/"
"""The person property an early access opt-in sets (posthog-js:
``$set: {"$feature_enrollment/<flag key>": true}``)."""
_is_enrollment = operator.methodcaller("startswith", ENROLLMENT_PREFIX)


def enrolled_flags(properties: dict[str, Any]) -> list[str]:
    """The flag keys a person is enrolled in: its ``$feature_enrollment/<flag key>``
    properties that are true (or the text "true")."""
    start = len(ENROLLMENT_PREFIX)
    return [
        key[start:]
        for key, value in properties.items()
        if len(key) > start
        and key.startswith(ENROLLMENT_PREFIX)
        and (value is True or value == "true")
    ]


def take_enrollments(states: list[PersonState]) -> list[tuple[str, int]]:
    """The (flag key, person id) enrollments that persons whose enrollment properties a batch
    changed now have (a person merged away has none), clearing their ``enrollment`` marks:
    what a store writes after deleting those persons' enrollment rows."""
    rows: list[tuple[str, int]] = []
    for state in states:
        state.enrollment = False
        if state.merged_into is None and state.id is not None:
            rows.extend((flag_key, state.id) for flag_key in enrolled_flags(state.properties))
    return rows


def apply_updates(state: PersonState, event: Event) -> None:
    """Apply an event's $set_once, then $set, then $unset to the person.

    Event properties PostHog lifts onto persons are set (explicit ``$set`` wins) and kept as
    ``$initial_*`` first-touch values (explicit ``$set_once`` wins). Like PostHog, an ordinary
    event whose only changes are new values of properties that churn (``$current_url``,
    ``$browser``...: :data:`FILTERED_UPDATE_PROPERTIES`) already on the person leaves the person
    as it is; with any other change, every change is applied.
    """
    if event.event in NEVER_UPDATE_PERSON_EVENTS:
        return
    props = state.properties
    explicit_set = event.set
    explicit_once = event.set_once
    changes: list[tuple[str, Any]] = []
    counts = event.event in ALWAYS_UPDATE_PERSON_EVENTS
    if explicit_once:
        for key, value in explicit_once.items():
            if key not in props:
                changes.append((key, value))
                counts = True
    to_set: list[tuple[str, Any]] = []
    for key, value in event.properties.items():
        initial = _INITIAL_NAMES.get(key)
        if initial is None:
            continue
        if initial not in props and not (explicit_once and initial in explicit_once):
            changes.append((initial, value))
            counts = True
        if not (explicit_set and key in explicit_set):
            to_set.append((key, value))
    if explicit_set:
        to_set.extend(explicit_set.items())
    for key, value in to_set:
        current = props.get(key, _MISSING)
        if current is _MISSING:
            changes.append((key, value))
            counts = True
        elif type(current) is not type(value) or current != value:
            changes.append((key, value))
            if key not in FILTERED_UPDATE_PROPERTIES:
                counts = True
    removed = [k for k in event.unset if isinstance(k, str) and k in props] if event.unset else []
    if not counts and not removed:
        return
    for key, value in changes:
        props[key] = value
    for key in removed:
        props.pop(key, None)
    if changes or removed:
        state.dirty = True
        # only explicit $set/$set_once/$unset can name an enrollment property
        if (explicit_set or explicit_once or removed) and (
            any(map(_is_enrollment, map(_KEY, changes))) or any(map(_is_enrollment, removed))
        ):
            state.enrollment = True


def _get_or_create(book: PersonBook, distinct_id: str, event: Event) -> PersonState:
    state = book.get(distinct_id)
    if state is None:
        state = book.create(distinct_id, event.timestamp_ms)
    return state


def _mark_identified(state: PersonState) -> None:
    if not state.is_identified:
        state.is_identified = True
        state.dirty = True


def _merge_ids(book: PersonBook, event: Event, other_id: str, into_id: str) -> PersonState:
    """PostHog's merge of ``other_id``'s person into ``into_id``'s; returns the survivor."""
    if other_id == into_id:
        return _get_or_create(book, into_id, event)
    for bad in (other_id, into_id):
        if is_illegal_id(bad):
            book.warnings.append(
                RuleWarning(
                    "cannot_merge_with_illegal_distinct_id",
                    {
                        "illegalDistinctId": bad,
                        "otherDistinctId": other_id,
                        "event": event.event,
                        "eventUuid": event.uuid,
                    },
                )
            )
            return _get_or_create(book, into_id, event)
    other = book.get(other_id)
    into = book.get(into_id)
    if other is not None and into is None:
        book.assign(into_id, other)
        target = other
    elif into is not None and other is None:
        book.assign(other_id, into)
        target = into
    elif other is None and into is None:
        target = book.create(into_id, event.timestamp_ms)
        book.assign(other_id, target)
    elif other is into:
        assert into is not None
        target = into
    else:
        assert other is not None and into is not None
        if other.is_identified and event.event != MERGE_DANGEROUSLY:
            book.warnings.append(
                RuleWarning(
                    "cannot_merge_already_identified",
                    {
                        "sourcePersonDistinctId": other_id,
                        "targetPersonDistinctId": into_id,
                        "eventUuid": event.uuid,
                    },
                )
            )
            return into
        book.merge(other, into)
        target = into
    _mark_identified(target)
    return target


def merge_pair(event: Event) -> MergePair | None:
    """The distinct ids to merge when ``event`` asks for a merge."""
    props = event.properties
    if event.event == IDENTIFY:
        anon = props.get("$anon_distinct_id")
        if anon is not None and anon != "":
            return MergePair(str(anon), event.distinct_id)
    elif event.event in ALIAS_EVENTS:
        alias = props.get("alias")
        if alias is not None and alias != "":
            return MergePair(str(alias), event.distinct_id)
    return None


def ids_to_load(events: list[Event]) -> set[str]:
    """Every distinct id whose person the rules may read for these events."""
    wanted: set[str] = set()
    for event in events:
        if event.event in GROUP_IDENTIFY_EVENTS:
            continue
        wanted.add(event.distinct_id)
        pair = merge_pair(event)
        if pair is not None:
            wanted.add(pair.other_id)
    return wanted


def apply_event(book: PersonBook, event: Event) -> bool:
    """Apply one event's person effects; False when it is stored without person processing."""
    if event.event in GROUP_IDENTIFY_EVENTS:
        return False
    if not event.process_person:
        state = book.get(event.distinct_id)
        if state is None or not state.is_identified:
            return False
    pair = merge_pair(event) if event.event in MERGE_EVENTS else None
    if pair is not None:
        state = _merge_ids(book, event, pair.other_id, pair.into_id)
    else:
        state = _get_or_create(book, event.distinct_id, event)
        if event.event == IDENTIFY:
            _mark_identified(state)
    apply_updates(state, event)
    return True
