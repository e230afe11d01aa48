"""Exposure and attribution, kept up to date one event at a time.

The rules are PostHog's. A person is exposed by their first ``$feature_flag_called`` with
``$feature_flag`` equal to the experiment's flag key, between the start and the end date; the
variant is ``$feature_flag_response``. With a custom exposure event (``exposure_criteria.
exposure_config``) it is that event, matching its property filters, and the variant is
``$feature/<flag key>``. Only configured variants and the holdout's ``holdout-<id>`` expose;
other responses (``false``, unknown keys) are ignored. A person later seen with another variant
is excluded from every metric and counted (``multiple_variant_handling: exclude``, the default)
or keeps the first variant (``first_seen``). Metric events count from the person's first
exposure to the end date (and within the metric's conversion window, if it has one). Persons
are the caller's resolved person ids, so identities merged by ``$identify``/``$create_alias``
count once; a merge that happens after both identities were seen is applied with
``merge_persons``.

State: per person, the exposure (variant, time, excluded) and a few numbers per metric (funnel
step reached; a count or a sum; a sum and a count for averages); per variant, running totals:
exposed persons, and per metric the sufficient statistics (``sum``, ``sum_squares``, and for
ratios the denominator's and the cross product). A person's change updates the totals by the
difference, so the totals are always current and reading them costs nothing per person.

Events are expected in time order per person, as SDKs send them. A metric event that arrives
before its person's exposure is not kept (it could only count if the exposure turned out
earlier); a recompute over stored events in time order gives the exact answer.

A batch can also be applied by parts (what stores do): its exposures first (``add``, in time
order), then per experiment its metric events, either one by one (``measure``, in time order)
or, for an event only counted, as a count per person (``count``). Exposures first is the same
as time order except at equal timestamps, where an event of the exposure's millisecond
counts, as PostHog's ``timestamp >= first exposure`` does; a recompute orders exposures first
among equal timestamps for the same answer.

Storage: ``ExperimentState`` (persons and totals) encodes with msgpack. A store can keep the
whole state, or load only the persons a batch touches (``load_persons``), add the batch, and
write back what ``drain`` returns: the persons changed and the totals' increments, to add to
the stored totals in the same transaction (or, with ``increments=False``, when the
accumulator holds the stored totals, the totals themselves).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from flagstaff.common.units import DAY_MS
from flagstaff.experiments.model import (
    DEFAULT_CUPED_LOOKBACK_DAYS,
    DEFAULT_EXPOSURE_EVENT,
    EventsNode,
    ExperimentDefinition,
    FunnelMetric,
    MeanMetric,
    Metric,
    PropertyFilter,
    StatsConfig,
    holdout_variant_key,
)
from flagstaff.flags.operators import compile_test
from flagstaff.flags.values import to_number
from flagstaff.ingest.event_names import FLAG_PROPERTY, FLAG_RESPONSE_PROPERTY

__all__ = [
    "CovariateRequests",
    "ExperimentAccumulator",
    "ExperimentChanges",
    "ExperimentEvent",
    "ExperimentSpec",
    "ExperimentState",
    "ExperimentSummary",
    "ExperimentTotals",
    "MetricTotals",
    "PersonState",
    "VariantStatistics",
    "VariantTotals",
    "cuped_lookback_ms",
    "decode_state",
    "encode_state",
    "summarize",
]

_T = TypeVar("_T")

FEATURE_PROPERTY_PREFIX = "$feature/"


class ExperimentEvent(msgspec.Struct):
    """One stored event as attribution reads it; ``person_id`` is already resolved."""

    person_id: str
    distinct_id: str
    event: str
    timestamp_ms: int
    properties: dict[str, Any]


class PersonState(msgspec.Struct, array_like=True):
    variant: str
    exposed_ms: int
    excluded: bool
    slots: list[float]
    """Per metric, in the spec's order: see ``_Rule.width``."""
    pre: list[float] = msgspec.field(default_factory=list)
    """With CUPED, per mean or funnel metric, the person's slots over the lookback window
    before ``exposed_ms`` (see ``_Rule.pre_width``); empty otherwise (one byte encoded).
    States stored before it existed decode with it empty."""


class MetricTotals(msgspec.Struct, array_like=True):
    """Sufficient statistics of one metric over one variant's exposed persons."""

    sum: float = 0.0
    sum_squares: float = 0.0
    denominator_sum: float = 0.0
    denominator_sum_squares: float = 0.0
    numerator_denominator_sum_product: float = 0.0
    step_counts: list[int] = msgspec.field(default_factory=list)
    pre_sum: float = 0.0
    """With CUPED, the sums of the persons' covariate x (the metric's value before their
    exposure), of x² and of x·y (y: the value ``sum`` adds up)."""
    pre_sum_squares: float = 0.0
    pre_post_sum_product: float = 0.0


class VariantTotals(msgspec.Struct, array_like=True):
    exposed: int
    metrics: list[MetricTotals]
    days: dict[int, int] = msgspec.field(default_factory=dict)
    """The ``exposed`` persons by the UTC day of their first exposure (days since 1970-01-01):
    what the exposures-over-time chart draws. Its values add up to ``exposed``; in an
    increment (a lane's row) a day may be negative, and days at zero are left out. Totals
    stored before it existed hold none (migration 0130 fills them from the persons)."""


class ExperimentTotals(msgspec.Struct):
    variants: dict[str, VariantTotals] = msgspec.field(default_factory=dict)
    multiple_variant_persons: int = 0
    """Persons excluded because they were seen with more than one variant."""


class ExperimentState(msgspec.Struct):
    fingerprint: str
    """The spec's fingerprint when the state was built; another one means: recompute."""
    persons: dict[str, PersonState] = msgspec.field(default_factory=dict)
    totals: ExperimentTotals = msgspec.field(default_factory=ExperimentTotals)


class ExperimentChanges(msgspec.Struct):
    """What changed since the last ``drain``: persons to upsert, and the totals' increment to
    add to the stored totals (or, from an accumulator without increments, the totals)."""

    experiment_id: int
    persons: dict[str, PersonState]
    totals: ExperimentTotals


class VariantStatistics(msgspec.Struct, kw_only=True):
    key: str
    number_of_samples: int
    sum: float
    sum_squares: float
    denominator_sum: float | None = None
    denominator_sum_squares: float | None = None
    numerator_denominator_sum_product: float | None = None
    step_counts: list[int] | None = None
    pre_sum: float | None = None
    """With CUPED on a mean or funnel metric: the sums over the exposed persons of their
    covariate x, x² and x·y (see ``MetricTotals``); None otherwise."""
    pre_sum_squares: float | None = None
    pre_post_sum_product: float | None = None


class ExperimentSummary(msgspec.Struct, kw_only=True):
    """Per-variant sufficient statistics of every metric (uuid -> variants)."""

    exposures: dict[str, int]
    multiple_variant_persons: int
    holdout_variants: list[str]
    metrics: dict[str, list[VariantStatistics]]
    exposure_days: dict[str, dict[int, int]] = msgspec.field(default_factory=dict)
    """Per variant (as ``exposures``), its exposed persons by the day of their first exposure."""


_encoder = msgspec.msgpack.Encoder()
_state_decoder = msgspec.msgpack.Decoder(ExperimentState)


def encode_state(state: ExperimentState) -> bytes:
    return _encoder.encode(state)


def decode_state(data: bytes) -> ExperimentState:
    return _state_decoder.decode(data)


def _copy(value: _T, kind: type[_T]) -> _T:
    return msgspec.msgpack.decode(_encoder.encode(value), type=kind)


Matcher = Callable[[dict[str, Any]], bool]
Contribution = tuple[float, float | None, int]
"""What a person adds to a metric's totals: value, denominator value (ratios), steps reached."""


def _matcher(filters: Iterable[PropertyFilter]) -> Matcher | None:
    """All filters must hold; None when there are none (the common case)."""
    tests = []
    for prop in filters:
        test, if_missing = compile_test(prop.operator, prop.value)
        tests.append((prop.key, test, if_missing))
    if not tests:
        return None

    def matches(properties: dict[str, Any]) -> bool:
        for key, test, if_missing in tests:
            if key in properties:
                if not test(properties[key]):
                    return False
            elif not if_missing:
                return False
        return True

    return matches


class _Source:
    """A compiled ``EventsNode``: its filter and its per-person value over ``width`` slots."""

    __slots__ = ("event", "matcher", "math", "prop", "width")

    def __init__(self, node: EventsNode) -> None:
        self.event = node.event
        self.math = node.math
        self.prop = node.math_property
        self.matcher = _matcher(node.properties)
        self.width = 2 if node.math == "avg" else 1

    def increment(self, properties: dict[str, Any]) -> float | None:
        """What one matching event adds (None: the event does not count)."""
        if self.matcher is not None and not self.matcher(properties):
            return None
        if self.math == "total":
            return 1.0
        return to_number(properties.get(self.prop)) if self.prop is not None else None

    def add(self, slots: list[float], at: int, increment: float) -> None:
        slots[at] += increment
        if self.math == "avg":
            slots[at + 1] += 1.0

    def value(self, slots: list[float], at: int) -> float:
        if self.math == "avg":
            count = slots[at + 1]
            return slots[at] / count if count else 0.0
        return slots[at]


class _Rule:
    """One compiled metric: where its slots are, how events update them, what a person
    contributes: ``(value, denominator value or None, funnel steps reached)``."""

    __slots__ = (
        "counts",
        "index",
        "metric_type",
        "offset",
        "plain",
        "pre_offset",
        "simple",
        "sources",
        "steps",
        "width",
        "window_ms",
    )

    def __init__(self, index: int, offset: int, metric: Metric) -> None:
        self.index = index
        self.offset = offset
        self.pre_offset: int | None = None
        """Where the covariate's slots are in ``PersonState.pre`` (None: no covariate)."""
        window = metric.window_seconds()
        self.window_ms = None if window is None else int(window * 1000)
        if isinstance(metric, FunnelMetric):
            self.metric_type = "funnel"
            self.steps = [(node.event, _matcher(node.properties)) for node in metric.series]
            self.sources: list[_Source] = []
            self.width = 1
        else:
            self.metric_type = "mean" if isinstance(metric, MeanMetric) else "ratio"
            self.steps = []
            nodes = (
                [metric.source]
                if isinstance(metric, MeanMetric)
                else [metric.numerator, metric.denominator]
            )
            self.sources = [_Source(node) for node in nodes]
            self.width = sum(source.width for source in self.sources)
        self.simple = self.sources[0] if self.width == 1 and not self.steps else None
        """The one source of a count or sum metric: updated in place, without contributions."""
        self.counts = (
            self.simple is not None and self.simple.math == "total" and self.simple.matcher is None
        )
        """A plain count of one event: a person's events add up without being looked at."""
        self.plain = len(self.sources) == 2 and self.width == 2
        """A ratio of two sums or counts (no average): one slot each."""

    @property
    def pre_width(self) -> int:
        """The covariate's slots: a funnel's last step done (0 or 1), a mean's source over
        the lookback window (as ``width``); a ratio has none (not adjusted)."""
        if self.steps:
            return 1
        return self.sources[0].width if self.metric_type == "mean" else 0

    def pre_events(self) -> set[str]:
        """The events the covariate reads: a funnel's last step, a mean's source."""
        if self.steps:
            return {self.steps[-1][0]}
        return {self.sources[0].event} if self.metric_type == "mean" else set()

    def covariate(self, pre: list[float]) -> float:
        at = self.pre_offset
        assert at is not None
        if self.steps:
            return pre[at]
        return self.sources[0].value(pre, at)

    def apply_before(self, pre: list[float], event: str, properties: dict[str, Any]) -> bool:
        """Apply an event of the lookback window to the covariate's slots; False when it
        changes nothing."""
        at = self.pre_offset
        assert at is not None
        if self.steps:
            name, matcher = self.steps[-1]
            if pre[at] or name != event or (matcher is not None and not matcher(properties)):
                return False
            pre[at] = 1.0
            return True
        source = self.sources[0]
        if source.event != event:
            return False
        added = source.increment(properties)
        if added is None:
            return False
        source.add(pre, at, added)
        return True

    def events(self) -> set[str]:
        if self.steps:
            return {event for event, _ in self.steps}
        return {source.event for source in self.sources}

    def reads_properties(self, event: str) -> bool:
        """Whether an ``event`` needs its properties here (a filter, or a value to sum or
        average); a plain count or an unfiltered funnel step does not."""
        if self.steps:
            return any(name == event and matcher is not None for name, matcher in self.steps)
        return any(
            source.event == event and (source.matcher is not None or source.math != "total")
            for source in self.sources
        )

    def apply(
        self,
        slots: list[float],
        metric: MetricTotals,
        event: str,
        properties: dict[str, Any],
        pre: list[float],
    ) -> bool:
        """Apply one event to the person's slots and the totals of their variant, by the
        difference it makes; False when it changes nothing (the common case, checked before
        any arithmetic). Not for ``simple`` rules, which the caller updates in place.
        ``pre``: the person's covariate slots (read only with a covariate)."""
        at = self.offset
        steps = self.steps
        if steps:
            reached = int(slots[at])
            if reached >= len(steps):
                return False
            name, matcher = steps[reached]
            if name != event or (matcher is not None and not matcher(properties)):
                return False
            slots[at] = reached + 1
            metric.step_counts[reached] += 1
            if reached + 1 == len(steps):
                metric.sum += 1.0
                metric.sum_squares += 1.0
                if self.pre_offset is not None:
                    metric.pre_post_sum_product += pre[self.pre_offset]
            return True
        if len(self.sources) == 1:  # an average: its value is not its sum
            source = self.sources[0]
            added = source.increment(properties) if source.event == event else None
            if added is None:
                return False
            value = source.value(slots, at)
            source.add(slots, at, added)
            new_value = source.value(slots, at)
            metric.sum += new_value - value
            metric.sum_squares += new_value * new_value - value * value
            if self.pre_offset is not None:
                metric.pre_post_sum_product += (new_value - value) * self.covariate(pre)
            return True
        numerator, denominator = self.sources
        added = numerator.increment(properties) if numerator.event == event else None
        counted = denominator.increment(properties) if denominator.event == event else None
        if added is None and counted is None:
            return False
        if self.plain:  # two sums or counts: a slot each
            value = slots[at]
            other = slots[at + 1]
            new_value = slots[at] = value + added if added is not None else value
            new_other = slots[at + 1] = other + counted if counted is not None else other
        else:
            value, other = self.values(slots)
            if added is not None:
                numerator.add(slots, at, added)
            if counted is not None:
                denominator.add(slots, at + numerator.width, counted)
            new_value, new_other = self.values(slots)
        metric.sum += new_value - value
        metric.sum_squares += new_value * new_value - value * value
        metric.denominator_sum += new_other - other
        metric.denominator_sum_squares += new_other * new_other - other * other
        metric.numerator_denominator_sum_product += new_value * new_other - value * other
        return True

    def values(self, slots: list[float]) -> tuple[float, float]:
        """A ratio's numerator and denominator values for the person."""
        numerator, denominator = self.sources
        at = self.offset
        return numerator.value(slots, at), denominator.value(slots, at + numerator.width)

    def contribution(self, slots: list[float]) -> Contribution:
        if self.steps:
            reached = int(slots[self.offset])
            return (1.0 if reached == len(self.steps) else 0.0), None, reached
        first = self.sources[0]
        value = first.value(slots, self.offset)
        if len(self.sources) == 1:
            return value, None, 0
        return value, self.sources[1].value(slots, self.offset + first.width), 0

    def merge(self, into: list[float], other: list[float]) -> None:
        """Combine two identities' slots: counts and sums add; a funnel keeps the further
        step (exact only by recompute, as step order across identities is unknown)."""
        end = self.offset + self.width
        if self.steps:
            into[self.offset] = max(into[self.offset], other[self.offset])
            return
        for at in range(self.offset, end):
            into[at] += other[at]

    def empty_totals(self) -> MetricTotals:
        return MetricTotals(step_counts=[0] * len(self.steps))


def _add_day(days: dict[int, int], day: int, persons: int) -> None:
    """Add to a day's persons, leaving out a day that comes to zero."""
    count = days.get(day, 0) + persons
    if count:
        days[day] = count
    else:
        days.pop(day, None)


def add_days(into: dict[int, int], more: Mapping[int, int], sign: int = 1) -> None:
    """Add (``sign`` -1: subtract) one day histogram to another, in place."""
    for day, persons in more.items():
        _add_day(into, day, sign * persons)


def _add_contribution(totals: MetricTotals, contribution: Contribution, sign: int) -> None:
    value, denominator, reached = contribution
    if value:
        totals.sum += sign * value
        totals.sum_squares += sign * value * value
    if denominator is not None:
        totals.denominator_sum += sign * denominator
        totals.denominator_sum_squares += sign * denominator * denominator
        totals.numerator_denominator_sum_product += sign * value * denominator
    for step in range(reached):
        totals.step_counts[step] += sign


def _add_covariate(totals: MetricTotals, covariate: float, value: float, sign: int) -> None:
    """Add (``sign`` -1: take out) a person's covariate x with their value y."""
    if covariate:
        totals.pre_sum += sign * covariate
        totals.pre_sum_squares += sign * covariate * covariate
        totals.pre_post_sum_product += sign * covariate * value


def cuped_lookback_ms(config: StatsConfig) -> int | None:
    """The covariate's window before first exposure when CUPED is on, else None."""
    if not config.cuped:
        return None
    days = config.cuped_lookback_days
    return (DEFAULT_CUPED_LOOKBACK_DAYS if days is None else days) * DAY_MS


class CovariateRequests(msgspec.Struct):
    """The persons whose covariate the stored events must give (see
    ``ExperimentAccumulator.covariate_requests``)."""

    windows: dict[str, tuple[int, int]]
    """Per person, ``[from_ms, to_ms)``: the union of their windows over the experiments."""
    events: frozenset[str]
    """The event names the covariates read."""
    counted: frozenset[str]
    """Those of ``events`` every covariate reading them only counts: a store may give
    their timestamps per person instead of the events (``add_covariates``' ``counts``)."""


def _counting_fields(metric: Metric) -> dict[str, Any]:
    """What decides a metric's numbers (a new name or goal needs no recompute)."""
    fields = msgspec.to_builtins(metric)
    fields.pop("name", None)
    fields.pop("goal", None)
    return fields


def _millis(moment: Any) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


class ExperimentSpec:
    """An experiment compiled for attribution: which events matter and how."""

    def __init__(
        self,
        experiment_id: int,
        definition: ExperimentDefinition,
        *,
        test_account_filters: Iterable[PropertyFilter] = (),
    ) -> None:
        self.experiment_id = experiment_id
        self.flag_key = definition.feature_flag_key
        self.start_ms = _millis(definition.start_date)
        self.end_ms = _millis(definition.end_date)
        self.variant_keys = [variant.key for variant in definition.variants]
        self.holdout_key = (
            None if definition.holdout_id is None else holdout_variant_key(definition.holdout_id)
        )
        self.valid_variants = frozenset(
            self.variant_keys + ([self.holdout_key] if self.holdout_key else [])
        )
        criteria = definition.exposure_criteria
        config = criteria.exposure_config
        if config is None or config.event == DEFAULT_EXPOSURE_EVENT:
            self.exposure_event = DEFAULT_EXPOSURE_EVENT
            self.variant_property = FLAG_RESPONSE_PROPERTY
            exposure_filters: list[PropertyFilter] = list(config.properties) if config else []
        else:
            self.exposure_event = config.event
            self.variant_property = FEATURE_PROPERTY_PREFIX + self.flag_key
            exposure_filters = list(config.properties)
        test_filters = list(test_account_filters) if criteria.filterTestAccounts else []
        self.exposure_matcher = _matcher(exposure_filters + test_filters)
        self.exclude_multiple = criteria.multiple_variant_handling == "exclude"
        self.metric_uuids: list[str] = []
        self.rules: list[_Rule] = []
        offset = 0
        measured = [
            *definition.metrics,
            *definition.metrics_secondary,
            *definition.metrics_guardrail,
        ]
        for index, metric in enumerate(measured):
            rule = _Rule(index, offset, metric)
            offset += rule.width
            self.rules.append(rule)
            self.metric_uuids.append(metric.uuid)
        self.width = offset
        self.lookback_ms = cuped_lookback_ms(definition.stats_config)
        """CUPED's window before first exposure (None: CUPED off, no covariates)."""
        self.pre_width = 0
        self.pre_events: frozenset[str] = frozenset()
        """The events a covariate reads (those of the window before exposure that count)."""
        if self.lookback_ms is not None:
            for rule in self.rules:
                if rule.pre_width:
                    rule.pre_offset = self.pre_width
                    self.pre_width += rule.pre_width
                    self.pre_events |= rule.pre_events()
        self.rules_by_event: dict[str, list[_Rule]] = {}
        for rule in self.rules:
            for event in rule.events():
                self.rules_by_event.setdefault(event, []).append(rule)
        self.counted = frozenset(
            name
            for name, rules in self.rules_by_event.items()
            if all(rule.counts for rule in rules)
        )
        """The events every metric reading them only counts (see ``count``)."""
        self.window_ms = {
            name: min(
                (rule.window_ms for rule in rules if rule.window_ms is not None), default=None
            )
            for name, rules in self.rules_by_event.items()
        }
        """Per event, the shortest conversion window of the metrics reading it."""
        self.fingerprint = hashlib.sha256(
            msgspec.json.encode(
                [
                    self.flag_key,
                    self.start_ms,
                    self.end_ms,
                    self.variant_keys,
                    self.holdout_key,
                    criteria,
                    test_filters,
                    [_counting_fields(m) for m in definition.metrics],
                    [_counting_fields(m) for m in definition.metrics_secondary],
                    # guardrails only when there are some: other fingerprints stay as they were
                    *(
                        [[_counting_fields(m) for m in definition.metrics_guardrail]]
                        if definition.metrics_guardrail
                        else []
                    ),
                    # with CUPED only: the fingerprints of experiments without it stay as
                    # they were (turning it on rebuilds the state from stored events)
                    *([["cuped", self.lookback_ms]] if self.lookback_ms is not None else []),
                ]
            )
        ).hexdigest()[:32]

    def new_state(self) -> ExperimentState:
        return ExperimentState(fingerprint=self.fingerprint)

    def empty_variant(self) -> VariantTotals:
        return VariantTotals(0, [rule.empty_totals() for rule in self.rules])

    def in_window(self, timestamp_ms: int) -> bool:
        if self.start_ms is None or timestamp_ms < self.start_ms:
            return False
        return self.end_ms is None or timestamp_ms <= self.end_ms


class _Running:
    """One experiment's spec and state inside the accumulator."""

    __slots__ = ("dirty", "pending", "since_drain", "spec", "state")

    def __init__(self, spec: ExperimentSpec, state: ExperimentState, increments: bool) -> None:
        self.spec = spec
        self.state = state
        self.dirty: set[str] = set()
        self.since_drain = _copy(state.totals, ExperimentTotals) if increments else None
        self.pending: set[str] = set()
        """With CUPED, the persons whose covariate the stored events must give (newly
        exposed, exposed earlier than known, merged): see ``covariate_requests``."""

    def variant_totals(self, variant: str) -> VariantTotals:
        totals = self.state.totals.variants.get(variant)
        if totals is None:
            totals = self.state.totals.variants[variant] = self.spec.empty_variant()
        return totals

    def _remove(self, person: PersonState) -> None:
        totals = self.variant_totals(person.variant)
        totals.exposed -= 1
        _add_day(totals.days, person.exposed_ms // DAY_MS, -1)
        self._add_values(totals, person, -1)

    def _insert(self, person: PersonState) -> None:
        totals = self.variant_totals(person.variant)
        totals.exposed += 1
        _add_day(totals.days, person.exposed_ms // DAY_MS, 1)
        self._add_values(totals, person, 1)

    def _add_values(self, totals: VariantTotals, person: PersonState, sign: int) -> None:
        for rule in self.spec.rules:
            contribution = rule.contribution(person.slots)
            metric = totals.metrics[rule.index]
            _add_contribution(metric, contribution, sign)
            if rule.pre_offset is not None:
                _add_covariate(metric, rule.covariate(person.pre), contribution[0], sign)

    def _refetch(self, person_id: str, person: PersonState) -> None:
        """Clear an exposed person's covariate (taken out of the totals) for the stored
        events to give it again: their window or their identities changed."""
        if self.spec.lookback_ms is None or person.excluded:
            return
        self.dirty.add(person_id)
        if any(person.pre):
            metrics = self.variant_totals(person.variant).metrics
            for rule in self.spec.rules:
                if rule.pre_offset is not None:
                    value = rule.contribution(person.slots)[0]
                    _add_covariate(metrics[rule.index], rule.covariate(person.pre), value, -1)
            person.pre = [0.0] * self.spec.pre_width
        self.pending.add(person_id)

    def expose(self, person_id: str, variant: str, timestamp_ms: int) -> None:
        persons = self.state.persons
        person = persons.get(person_id)
        if person is None:
            spec = self.spec
            persons[person_id] = PersonState(
                variant, timestamp_ms, False, [0.0] * spec.width, [0.0] * spec.pre_width
            )
            totals = self.variant_totals(variant)
            totals.exposed += 1  # zero values add nothing else
            _add_day(totals.days, timestamp_ms // DAY_MS, 1)
            if spec.lookback_ms is not None:
                self.pending.add(person_id)
        elif person.excluded:
            return
        elif person.variant != variant:
            if not self.spec.exclude_multiple:
                return
            self._remove(person)
            person.excluded = True
            self.state.totals.multiple_variant_persons += 1
        elif timestamp_ms < person.exposed_ms:
            before, after = person.exposed_ms // DAY_MS, timestamp_ms // DAY_MS
            if after != before:  # an earlier exposure arrived late: the person's day moves
                days = self.variant_totals(variant).days
                _add_day(days, before, -1)
                _add_day(days, after, 1)
            person.exposed_ms = timestamp_ms
            self._refetch(person_id, person)  # the window moved earlier
        else:
            return
        self.dirty.add(person_id)

    def measure(self, person: PersonState, rules: list[_Rule], event: ExperimentEvent) -> None:
        """Apply a metric event of an exposed person (the caller looked the person up)."""
        if person.excluded:
            return
        timestamp = event.timestamp_ms
        if timestamp < person.exposed_ms:
            lookback = self.spec.lookback_ms
            if lookback is not None and timestamp >= person.exposed_ms - lookback:
                self._measure_before(person, rules, event)
            return
        end = self.spec.end_ms
        if end is not None and timestamp > end:
            return
        changed = False
        properties = event.properties
        metrics = None
        for rule in rules:
            if rule.window_ms is not None and timestamp > person.exposed_ms + rule.window_ms:
                continue
            simple = rule.simple
            if simple is not None:
                increment = simple.increment(properties)
                if increment is None:
                    continue
                slots = person.slots
                old = slots[rule.offset]
                new = slots[rule.offset] = old + increment
                if metrics is None:
                    metrics = self.variant_totals(person.variant).metrics
                metric = metrics[rule.index]
                metric.sum += increment
                metric.sum_squares += new * new - old * old
                if rule.pre_offset is not None:
                    metric.pre_post_sum_product += increment * person.pre[rule.pre_offset]
                changed = True
                continue
            if metrics is None:
                metrics = self.variant_totals(person.variant).metrics
            if rule.apply(person.slots, metrics[rule.index], event.event, properties, person.pre):
                changed = True
        if changed:
            self.dirty.add(event.person_id)

    def _measure_before(
        self, person: PersonState, rules: list[_Rule], event: ExperimentEvent
    ) -> None:
        """Apply an event of the person's lookback window to their covariates."""
        metrics = None
        pre = person.pre
        for rule in rules:
            if rule.pre_offset is None:
                continue
            before = rule.covariate(pre)
            if not rule.apply_before(pre, event.event, event.properties):
                continue
            if metrics is None:
                metrics = self.variant_totals(person.variant).metrics
            self._covariate_moved(person, rule, metrics[rule.index], before)
            self.dirty.add(event.person_id)

    def _count_before(
        self, person_id: str, person: PersonState, rules: list[_Rule], n: int
    ) -> None:
        """Apply ``n`` events of the person's lookback window that the covariates reading
        them only count (``CovariateRequests.counted``)."""
        metrics = self.variant_totals(person.variant).metrics
        pre = person.pre
        for rule in rules:
            at = rule.pre_offset
            if at is None:
                continue
            before = pre[at]
            pre[at] = before + n
            self._covariate_moved(person, rule, metrics[rule.index], before)
        self.dirty.add(person_id)

    @staticmethod
    def _covariate_moved(
        person: PersonState, rule: _Rule, metric: MetricTotals, before: float
    ) -> None:
        """The totals, once a person's covariate moved from ``before``."""
        after = rule.covariate(person.pre)
        metric.pre_sum += after - before
        metric.pre_sum_squares += after * after - before * before
        metric.pre_post_sum_product += (after - before) * rule.contribution(person.slots)[0]

    def count(self, name: str, counts: Mapping[str, int], first_ms: int, last_ms: int) -> list[str]:
        """Add ``counts[person]`` events ``name`` (of ``counted``) per exposed person, all between
        ``first_ms`` and ``last_ms``; returns the persons for whom that span is not enough to
        know (it starts before their exposure, or ends past the end date or a window)."""
        persons = self.state.persons
        end = self.spec.end_ms
        if end is not None and last_ms > end:
            return list(counts)
        window = self.spec.window_ms[name]
        rules = self.spec.rules_by_event[name]
        later: list[str] = []
        dirty = self.dirty
        for person_id, count in counts.items():
            person = persons[person_id]
            if person.excluded:
                continue
            exposed = person.exposed_ms
            if exposed > first_ms or (window is not None and last_ms > exposed + window):
                later.append(person_id)
                continue
            slots = person.slots
            metrics = self.variant_totals(person.variant).metrics
            for rule in rules:
                old = slots[rule.offset]
                new = slots[rule.offset] = old + count
                metric = metrics[rule.index]
                metric.sum += count
                metric.sum_squares += new * new - old * old
                if rule.pre_offset is not None:
                    metric.pre_post_sum_product += count * person.pre[rule.pre_offset]
            dirty.add(person_id)
        return later

    def merge(self, source_id: str, target_id: str) -> None:
        persons = self.state.persons
        source = persons.pop(source_id, None)
        if source is None:
            target = persons.get(target_id)
            if target is not None:  # the source's events before exposure are the target's now
                self._refetch(target_id, target)
            return
        self.dirty.add(source_id)
        self.dirty.add(target_id)
        if source_id in self.pending:
            self.pending.discard(source_id)
            self.pending.add(target_id)
        target = persons.get(target_id)
        if target is None:
            persons[target_id] = source
            self._refetch(target_id, source)  # the target's identities count too
            return
        totals = self.state.totals
        if source.excluded and target.excluded:
            totals.multiple_variant_persons -= 1
            return
        if source.excluded or target.excluded:
            kept = target if source.excluded else source
            self._remove(kept)
            target.excluded = True
            return
        self._remove(source)
        self._remove(target)
        if source.variant != target.variant and self.spec.exclude_multiple:
            target.excluded = True
            totals.multiple_variant_persons += 1
            return
        if source.exposed_ms < target.exposed_ms:
            target.variant = source.variant
            target.exposed_ms = source.exposed_ms
        for rule in self.spec.rules:
            rule.merge(target.slots, source.slots)
        if self.spec.lookback_ms is not None:
            # given again by the stored events of both identities, over the merged window
            target.pre = [0.0] * self.spec.pre_width
            self.pending.add(target_id)
        self._insert(target)


class ExperimentAccumulator:
    """The running experiments of one project, fed every ingested event.

    An event that concerns no experiment costs one dict lookup on its name (two for a
    ``$feature_flag_called`` of a flag without an experiment).
    """

    def __init__(
        self,
        specs: Iterable[ExperimentSpec],
        states: Mapping[int, ExperimentState] | None = None,
        *,
        increments: bool = True,
    ) -> None:
        self._running: dict[int, _Running] = {}
        for spec in specs:
            state = (states or {}).get(spec.experiment_id)
            if state is None or state.fingerprint != spec.fingerprint:
                state = spec.new_state()
            self._running[spec.experiment_id] = _Running(spec, state, increments)
        self._flag_calls: dict[str, list[_Running]] = {}
        self._custom_exposures: dict[str, list[_Running]] = {}
        self._metrics: dict[str, list[tuple[_Running, list[_Rule]]]] = {}
        for running in self._running.values():
            spec = running.spec
            if spec.exposure_event == DEFAULT_EXPOSURE_EVENT:
                self._flag_calls.setdefault(spec.flag_key, []).append(running)
            else:
                self._custom_exposures.setdefault(spec.exposure_event, []).append(running)
            for event, rules in spec.rules_by_event.items():
                self._metrics.setdefault(event, []).append((running, rules))
        self._routed = (
            frozenset([DEFAULT_EXPOSURE_EVENT] if self._flag_calls else [])
            | frozenset(self._custom_exposures)
            | frozenset(self._metrics)
        )

    def add(self, event: ExperimentEvent) -> None:
        name = event.event
        if name not in self._routed:
            return
        properties = event.properties
        if name == DEFAULT_EXPOSURE_EVENT:
            flag_key = properties.get(FLAG_PROPERTY)
            if type(flag_key) is str:
                for running in self._flag_calls.get(flag_key, ()):
                    self._expose(running, event)
        custom = self._custom_exposures.get(name)
        if custom is not None:
            for running in custom:
                self._expose(running, event)
        measured = self._metrics.get(name)
        if measured is not None:
            person_id = event.person_id
            for running, rules in measured:
                person = running.state.persons.get(person_id)
                if person is not None:
                    running.measure(person, rules, event)

    def add_many(self, events: Iterable[ExperimentEvent]) -> None:
        for event in events:
            self.add(event)

    def measure(self, experiment_id: int, events: Iterable[ExperimentEvent]) -> None:
        """Apply metric events (none an exposure) to one experiment only, in time order."""
        running = self._running[experiment_id]
        persons = running.state.persons
        rules = running.spec.rules_by_event
        for event in events:
            person = persons.get(event.person_id)
            if person is not None:
                running.measure(person, rules[event.event], event)

    def count(
        self,
        experiment_id: int,
        name: str,
        counts: Mapping[str, int],
        first_ms: int,
        last_ms: int,
    ) -> list[str]:
        """Apply events ``name`` of exposed persons, that the experiment only counts (see
        ``ExperimentSpec.counted``), as a number per person, all timed between ``first_ms``
        and ``last_ms``. Returns the persons whose events must go through ``measure``
        instead: those the span does not settle (exposed after its start; past the end date
        or a window)."""
        return self._running[experiment_id].count(name, counts, first_ms, last_ms)

    def persons(self, experiment_id: int) -> Mapping[str, PersonState]:
        """The experiment's exposed persons held (all, or the loaded ones)."""
        return self._running[experiment_id].state.persons

    @staticmethod
    def _expose(running: _Running, event: ExperimentEvent) -> None:
        spec = running.spec
        if not spec.in_window(event.timestamp_ms):
            return
        properties = event.properties
        variant = properties.get(spec.variant_property)
        if type(variant) is not str or variant not in spec.valid_variants:
            return
        if spec.exposure_matcher is not None and not spec.exposure_matcher(properties):
            return
        running.expose(event.person_id, variant, event.timestamp_ms)

    def merge_persons(self, source_person_id: str, target_person_id: str) -> None:
        """Two persons became one (``target`` stays): combine their state everywhere."""
        if source_person_id == target_person_id:
            return
        for running in self._running.values():
            running.merge(source_person_id, target_person_id)

    def covariate_requests(self) -> CovariateRequests | None:
        """The persons whose covariates the stored events must give, and the window of
        each (None: nobody). A store reads those persons' events in their window stored
        before the batch (those of the batch are applied by ``add``/``measure``, before or
        after) and gives them to ``add_covariates``, before ``drain``."""
        windows: dict[str, tuple[int, int]] = {}
        names: set[str] = set()
        read: set[str] = set()
        for running in self._running.values():
            lookback = running.spec.lookback_ms
            if not running.pending or lookback is None:
                continue
            for name in running.spec.pre_events:
                covariates = running.spec.rules_by_event[name]
                if not all(rule.counts for rule in covariates if rule.pre_offset is not None):
                    read.add(name)
            persons = running.state.persons
            for person_id in running.pending:
                person = persons.get(person_id)
                if person is None or person.excluded:
                    continue
                low, high = person.exposed_ms - lookback, person.exposed_ms
                known = windows.get(person_id)
                if known is not None:
                    low, high = min(low, known[0]), max(high, known[1])
                windows[person_id] = (low, high)
            names |= running.spec.pre_events
        if not windows:
            return None
        return CovariateRequests(windows, frozenset(names), frozenset(names - read))

    def add_covariates(
        self,
        events: Iterable[ExperimentEvent],
        counts: Iterable[tuple[str, str, Sequence[int]]] = (),
    ) -> None:
        """Apply the stored events of the persons of ``covariate_requests`` (any order, any
        of them; each counts only in its person's window of each experiment); ``counts``:
        for events of ``counted`` names, ``(person, name, their timestamps)`` instead."""
        pending = [running for running in self._running.values() if running.pending]
        for person_id, name, timestamps in counts:
            for running in pending:
                person = running.state.persons.get(person_id)
                lookback = running.spec.lookback_ms
                if (
                    person is None
                    or person.excluded
                    or person_id not in running.pending
                    or name not in running.spec.pre_events
                ):
                    continue
                assert lookback is not None
                high = person.exposed_ms
                low = high - lookback
                n = sum(1 for at in timestamps if low <= at < high)
                if n:
                    running._count_before(person_id, person, running.spec.rules_by_event[name], n)
        for event in events:
            for running in pending:
                if event.person_id not in running.pending:
                    continue
                person = running.state.persons.get(event.person_id)
                rules = running.spec.rules_by_event.get(event.event)
                if person is not None and rules and event.timestamp_ms < person.exposed_ms:
                    running.measure(person, rules, event)
        for running in pending:
            running.pending = set()

    def load_persons(self, experiment_id: int, persons: Mapping[str, PersonState]) -> None:
        """Bring stored persons into memory (their totals are already in the stored totals)."""
        self._running[experiment_id].state.persons.update(persons)

    def state(self, experiment_id: int) -> ExperimentState:
        return self._running[experiment_id].state

    def spec(self, experiment_id: int) -> ExperimentSpec:
        return self._running[experiment_id].spec

    def drain(self) -> list[ExperimentChanges]:
        """Persons changed and totals added since the last drain, per experiment (without
        increments: the totals themselves, not a copy)."""
        changes = []
        for experiment_id, running in self._running.items():
            if not running.dirty:
                continue
            persons = running.state.persons
            changed = {pid: persons[pid] for pid in running.dirty if pid in persons}
            current = running.state.totals
            if running.since_drain is None:
                totals = current
            else:
                totals = _difference(current, running.since_drain)
                running.since_drain = _copy(current, ExperimentTotals)
            running.dirty = set()
            running.pending = set()
            changes.append(ExperimentChanges(experiment_id, changed, totals))
        return changes

    def summary(self, experiment_id: int) -> ExperimentSummary:
        running = self._running[experiment_id]
        return summarize(running.spec, running.state.totals)


def _difference(current: ExperimentTotals, before: ExperimentTotals) -> ExperimentTotals:
    variants: dict[str, VariantTotals] = {}
    for key, now in current.variants.items():
        then = before.variants.get(key)
        if then is None:
            variants[key] = _copy(now, VariantTotals)
            continue
        metrics = [
            MetricTotals(
                a.sum - b.sum,
                a.sum_squares - b.sum_squares,
                a.denominator_sum - b.denominator_sum,
                a.denominator_sum_squares - b.denominator_sum_squares,
                a.numerator_denominator_sum_product - b.numerator_denominator_sum_product,
                [x - y for x, y in zip(a.step_counts, b.step_counts, strict=True)],
                a.pre_sum - b.pre_sum,
                a.pre_sum_squares - b.pre_sum_squares,
                a.pre_post_sum_product - b.pre_post_sum_product,
            )
            for a, b in zip(now.metrics, then.metrics, strict=True)
        ]
        days = dict(now.days)
        add_days(days, then.days, -1)
        variants[key] = VariantTotals(now.exposed - then.exposed, metrics, days)
    return ExperimentTotals(
        variants, current.multiple_variant_persons - before.multiple_variant_persons
    )


def add_totals(into: ExperimentTotals, increment: ExperimentTotals) -> None:
    """Add an increment from ``drain`` to stored totals (what a store does in SQL)."""
    into.multiple_variant_persons += increment.multiple_variant_persons
    for key, extra in increment.variants.items():
        totals = into.variants.get(key)
        if totals is None:
            into.variants[key] = _copy(extra, VariantTotals)
            continue
        totals.exposed += extra.exposed
        add_days(totals.days, extra.days)
        for metric, more in zip(totals.metrics, extra.metrics, strict=True):
            metric.sum += more.sum
            metric.sum_squares += more.sum_squares
            metric.denominator_sum += more.denominator_sum
            metric.denominator_sum_squares += more.denominator_sum_squares
            metric.numerator_denominator_sum_product += more.numerator_denominator_sum_product
            metric.step_counts = [
                x + y for x, y in zip(metric.step_counts, more.step_counts, strict=True)
            ]
            metric.pre_sum += more.pre_sum
            metric.pre_sum_squares += more.pre_sum_squares
            metric.pre_post_sum_product += more.pre_post_sum_product


def summarize(spec: ExperimentSpec, totals: ExperimentTotals) -> ExperimentSummary:
    """Per-variant sufficient statistics from totals: every configured variant and the
    holdout appear, with zeros when nobody was exposed to them yet."""
    keys = list(spec.variant_keys)
    if spec.holdout_key is not None:
        keys.append(spec.holdout_key)
    exposures: dict[str, int] = {}
    days: dict[str, dict[int, int]] = {}
    metrics: dict[str, list[VariantStatistics]] = {uuid: [] for uuid in spec.metric_uuids}
    for key in keys:
        variant = totals.variants.get(key) or spec.empty_variant()
        exposures[key] = variant.exposed
        days[key] = dict(sorted(variant.days.items()))
        for rule, metric in zip(spec.rules, variant.metrics, strict=True):
            ratio = rule.metric_type == "ratio"
            cuped = rule.pre_offset is not None
            metrics[spec.metric_uuids[rule.index]].append(
                VariantStatistics(
                    key=key,
                    number_of_samples=variant.exposed,
                    sum=metric.sum,
                    sum_squares=metric.sum_squares,
                    denominator_sum=metric.denominator_sum if ratio else None,
                    denominator_sum_squares=metric.denominator_sum_squares if ratio else None,
                    numerator_denominator_sum_product=(
                        metric.numerator_denominator_sum_product if ratio else None
                    ),
                    step_counts=list(metric.step_counts) if rule.steps else None,
                    pre_sum=metric.pre_sum if cuped else None,
                    pre_sum_squares=metric.pre_sum_squares if cuped else None,
                    pre_post_sum_product=metric.pre_post_sum_product if cuped else None,
                )
            )
    return ExperimentSummary(
        exposures=exposures,
        multiple_variant_persons=totals.multiple_variant_persons,
        holdout_variants=[spec.holdout_key] if spec.holdout_key else [],
        metrics=metrics,
        exposure_days=days,
    )
