"""Exposure and attribution: PostHog's rules, incremental totals, serialisable state."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    ExperimentTotals,
    add_totals,
    decode_state,
    encode_state,
    summarize,
)
from flagstaff.experiments.model import PropertyFilter, parse_experiment

START = 1_704_067_200_000  # 2024-01-01T00:00:00Z
END = START + 10 * 86_400_000
CALLED = "$feature_flag_called"


def experiment(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "Checkout",
        "feature_flag_key": "checkout",
        "start_date": "2024-01-01T00:00:00Z",
        "end_date": "2024-01-11T00:00:00Z",
        "parameters": {
            "feature_flag_variants": [
                {"key": "control", "rollout_percentage": 50},
                {"key": "test", "rollout_percentage": 50},
            ]
        },
        "metrics": [
            {
                "uuid": "revenue",
                "metric_type": "mean",
                "source": {"event": "purchase", "math": "sum", "math_property": "amount"},
            },
            {
                "uuid": "checkout-funnel",
                "metric_type": "funnel",
                "series": [{"event": "cart"}, {"event": "purchase"}],
            },
            {
                "uuid": "per-order",
                "metric_type": "ratio",
                "numerator": {"event": "purchase", "math": "sum", "math_property": "amount"},
                "denominator": {"event": "purchase"},
            },
        ],
        "metrics_secondary": [
            {
                "uuid": "avg-basket",
                "metric_type": "mean",
                "source": {"event": "purchase", "math": "avg", "math_property": "amount"},
            },
            {"uuid": "pageviews", "metric_type": "mean", "source": {"event": "$pageview"}},
        ],
    }
    base.update(overrides)
    return base


def spec_of(**overrides: Any) -> ExperimentSpec:
    return ExperimentSpec(7, parse_experiment(experiment(**overrides)))


def called(person: str, variant: Any, at: int, flag: str = "checkout") -> ExperimentEvent:
    properties = {"$feature_flag": flag, "$feature_flag_response": variant}
    return ExperimentEvent(person, person, CALLED, START + at, properties)


def event(person: str, name: str, at: int, **properties: Any) -> ExperimentEvent:
    return ExperimentEvent(person, person, name, START + at, properties)


def by_key(rows: list[Any]) -> dict[str, Any]:
    return {row.key: row for row in rows}


def test_first_flag_call_exposes_and_later_events_count() -> None:
    acc = ExperimentAccumulator([spec_of()])
    acc.add_many(
        [
            event("p1", "purchase", 0, amount=99),  # before exposure: not counted
            called("p1", "control", 10),
            event("p1", "cart", 20),
            event("p1", "purchase", 30, amount=10),
            event("p1", "purchase", 40, amount="30"),  # numeric strings count
            event("p1", "purchase", 41, amount="n/a"),  # non-numeric: counted by total only
            called("p2", "test", 10),
            event("p2", "purchase", 20, amount=5),  # no cart first: funnel not converted
            called("p3", "test", 10),
            event("p3", "$pageview", 11),
            event("p3", "$pageview", 12),
        ]
    )
    summary = acc.summary(7)
    assert summary.exposures == {"control": 1, "test": 2}
    revenue = by_key(summary.metrics["revenue"])
    assert (revenue["control"].sum, revenue["control"].sum_squares) == (40.0, 1600.0)
    assert (revenue["test"].sum, revenue["test"].sum_squares) == (5.0, 25.0)
    funnel = by_key(summary.metrics["checkout-funnel"])
    assert (funnel["control"].sum, funnel["control"].step_counts) == (1.0, [1, 1])
    assert (funnel["test"].sum, funnel["test"].step_counts) == (0.0, [0, 0])
    ratio = by_key(summary.metrics["per-order"])["control"]
    assert (ratio.sum, ratio.denominator_sum, ratio.denominator_sum_squares) == (40.0, 3.0, 9.0)
    assert ratio.numerator_denominator_sum_product == 120.0
    average = by_key(summary.metrics["avg-basket"])["control"]
    assert (average.sum, average.sum_squares) == (20.0, 400.0)
    pageviews = by_key(summary.metrics["pageviews"])["test"]
    assert (pageviews.number_of_samples, pageviews.sum, pageviews.sum_squares) == (2, 2.0, 4.0)


def test_exposure_rules_window_variants_and_other_flags() -> None:
    acc = ExperimentAccumulator([spec_of()])
    acc.add_many(
        [
            called("early", "control", -1),  # before the start
            called("late", "control", END - START + 1),  # after the end
            called("other", "control", 5, flag="another-flag"),
            called("off", False, 5),  # not a variant
            called("unknown", "blue", 5),
            called("ok", "test", END - START),  # the end is inclusive
        ]
    )
    assert acc.summary(7).exposures == {"control": 0, "test": 1}
    draft = ExperimentAccumulator([spec_of(start_date=None, end_date=None)])
    draft.add(called("p", "control", 5))
    assert draft.summary(7).exposures == {"control": 0, "test": 0}


def test_metric_events_after_the_end_or_the_window_do_not_count() -> None:
    metrics = [
        {
            "uuid": "m",
            "metric_type": "mean",
            "source": {"event": "purchase"},
            "conversion_window": 1,
            "conversion_window_unit": "hour",
        }
    ]
    acc = ExperimentAccumulator([spec_of(metrics=metrics, metrics_secondary=[])])
    acc.add_many(
        [
            called("p", "control", 0),
            event("p", "purchase", 3_600_000),  # exactly one hour later: counts
            event("p", "purchase", 3_600_001),
            called("q", "control", END - START - 10),
            event("q", "purchase", END - START + 10),  # after the end
            called("r", "control", 500),
            event("r", "purchase", 499),  # arrives later but happened before the exposure
        ]
    )
    assert by_key(acc.summary(7).metrics["m"])["control"].sum == 1.0


def test_persons_seen_with_two_variants_are_excluded_and_counted() -> None:
    acc = ExperimentAccumulator([spec_of()])
    acc.add_many(
        [
            called("p", "control", 0),
            event("p", "purchase", 1, amount=50),
            called("p", "control", 2),  # same variant again: still one person
            called("p", "test", 3),
            called("p", "control", 4),  # already excluded: counted once
            called("q", "test", 0),
        ]
    )
    summary = acc.summary(7)
    assert summary.exposures == {"control": 0, "test": 1}
    assert summary.multiple_variant_persons == 1
    assert by_key(summary.metrics["revenue"])["control"].sum == 0.0

    first_seen = {"multiple_variant_handling": "first_seen"}
    acc = ExperimentAccumulator([spec_of(exposure_criteria=first_seen)])
    acc.add_many([called("p", "control", 0), called("p", "test", 1), event("p", "cart", 2)])
    summary = acc.summary(7)
    assert summary.exposures == {"control": 1, "test": 0}
    assert summary.multiple_variant_persons == 0


def test_holdout_persons_are_a_variant_of_their_own() -> None:
    acc = ExperimentAccumulator([spec_of(holdout_id=12)])
    acc.add_many(
        [called("h", "holdout-12", 0), event("h", "$pageview", 1), called("x", "holdout-3", 0)]
    )
    summary = acc.summary(7)
    assert summary.holdout_variants == ["holdout-12"]
    assert summary.exposures == {"control": 0, "test": 0, "holdout-12": 1}
    assert by_key(summary.metrics["pageviews"])["holdout-12"].sum == 1.0


def test_custom_exposure_event_reads_the_feature_property_and_filters() -> None:
    criteria = {
        "exposure_config": {
            "kind": "ExperimentEventExposureConfig",
            "event": "checkout_viewed",
            "properties": [{"key": "plan", "value": ["pro", "team"], "operator": "exact"}],
        },
        "filterTestAccounts": True,
    }
    spec = ExperimentSpec(
        7,
        parse_experiment(experiment(exposure_criteria=criteria)),
        test_account_filters=[
            PropertyFilter(key="email", value="@example.com", operator="not_icontains")
        ],
    )
    acc = ExperimentAccumulator([spec])
    acc.add_many(
        [
            called("a", "control", 0),  # flag calls do not expose with a custom event
            event("b", "checkout_viewed", 0, **{"$feature/checkout": "test", "plan": "pro"}),
            event("c", "checkout_viewed", 0, **{"$feature/checkout": "test", "plan": "free"}),
            event(
                "d",
                "checkout_viewed",
                0,
                **{"$feature/checkout": "control", "plan": "team", "email": "qa@example.com"},
            ),
            event("e", "checkout_viewed", 0, **{"$feature/checkout": "control", "plan": "team"}),
        ]
    )
    assert acc.summary(7).exposures == {"control": 1, "test": 1}


def test_merging_persons_combines_their_state() -> None:
    acc = ExperimentAccumulator([spec_of()])
    acc.add_many(
        [
            called("anon", "test", 0),
            event("anon", "purchase", 1, amount=10),
            called("user", "test", 5),
            event("user", "purchase", 6, amount=20),
        ]
    )
    acc.merge_persons("anon", "user")
    summary = acc.summary(7)
    assert summary.exposures == {"control": 0, "test": 1}
    revenue = by_key(summary.metrics["revenue"])["test"]
    assert (revenue.sum, revenue.sum_squares) == (30.0, 900.0)
    assert acc.state(7).persons["user"].exposed_ms == START

    acc.add_many([called("a2", "control", 0), called("b2", "test", 0)])
    acc.merge_persons("a2", "b2")
    summary = acc.summary(7)
    assert summary.exposures == {"control": 0, "test": 1}
    assert summary.multiple_variant_persons == 1


def reference_summary(events: list[ExperimentEvent]) -> dict[str, dict[str, tuple]]:
    """The same rules written plainly over the whole history (what a recompute does)."""
    exposure: dict[str, tuple[str, int]] = {}
    excluded: set[str] = set()
    for item in events:
        if item.event != CALLED or item.properties.get("$feature_flag") != "checkout":
            continue
        variant = item.properties.get("$feature_flag_response")
        if variant not in ("control", "test") or not START <= item.timestamp_ms <= END:
            continue
        if item.person_id not in exposure:
            exposure[item.person_id] = (variant, item.timestamp_ms)
        elif exposure[item.person_id][0] != variant:
            excluded.add(item.person_id)
    revenue: dict[str, float] = defaultdict(float)
    orders: dict[str, float] = defaultdict(float)
    steps: dict[str, int] = defaultdict(int)
    for item in events:
        if item.person_id not in exposure or item.person_id in excluded:
            continue
        if not exposure[item.person_id][1] <= item.timestamp_ms <= END:
            continue
        if item.event == "purchase":
            revenue[item.person_id] += item.properties["amount"]
            orders[item.person_id] += 1
        if steps[item.person_id] < 2 and item.event == ("cart", "purchase")[steps[item.person_id]]:
            steps[item.person_id] += 1
    result: dict[str, dict[str, tuple]] = {}
    for variant in ("control", "test"):
        persons = [p for p, (v, _) in exposure.items() if v == variant and p not in excluded]
        result[variant] = (
            len(persons),
            sum(revenue[p] for p in persons),
            sum(revenue[p] ** 2 for p in persons),
            sum(orders[p] for p in persons),
            sum(revenue[p] * orders[p] for p in persons),
            sum(1 for p in persons if steps[p] == 2),
            len(excluded),
        )
    return result


def random_history(seed: int, persons: int = 300) -> list[ExperimentEvent]:
    rng = random.Random(seed)
    events: list[ExperimentEvent] = []
    for index in range(persons):
        person = f"p{index}"
        for _ in range(rng.randint(0, 6)):
            at = rng.randint(-86_400_000, 11 * 86_400_000)
            roll = rng.random()
            if roll < 0.35:
                variant = rng.choice(["control", "control", "test", "test", "false"])
                events.append(called(person, variant, at))
            elif roll < 0.6:
                events.append(event(person, "cart", at))
            elif roll < 0.9:
                events.append(event(person, "purchase", at, amount=rng.randint(1, 100)))
            else:
                events.append(event(person, "$pageview", at))
    events.sort(key=lambda item: item.timestamp_ms)
    return events


@pytest.mark.parametrize("seed", range(5))
def test_incremental_totals_equal_a_plain_recompute(seed: int) -> None:
    events = random_history(seed)
    acc = ExperimentAccumulator([spec_of()])
    acc.add_many(events)
    summary = acc.summary(7)
    expected = reference_summary(events)
    for variant in ("control", "test"):
        revenue = by_key(summary.metrics["revenue"])[variant]
        ratio = by_key(summary.metrics["per-order"])[variant]
        funnel = by_key(summary.metrics["checkout-funnel"])[variant]
        got = (
            summary.exposures[variant],
            revenue.sum,
            revenue.sum_squares,
            ratio.denominator_sum,
            ratio.numerator_denominator_sum_product,
            funnel.sum,
            summary.multiple_variant_persons,
        )
        assert got == pytest.approx(expected[variant])


def test_state_round_trips_and_resumes_where_it_stopped() -> None:
    events = random_history(11)
    half = len(events) // 2
    whole = ExperimentAccumulator([spec_of()])
    whole.add_many(events)

    first = ExperimentAccumulator([spec_of()])
    first.add_many(events[:half])
    stored = encode_state(first.state(7))
    resumed = ExperimentAccumulator([spec_of()], {7: decode_state(stored)})
    resumed.add_many(events[half:])
    assert resumed.summary(7) == whole.summary(7)

    changed = ExperimentAccumulator([spec_of(metrics_secondary=[])], {7: decode_state(stored)})
    assert changed.state(7).persons == {}  # another definition: the state is rebuilt
    renamed = experiment()
    renamed["metrics"][0] = {**renamed["metrics"][0], "name": "Revenue", "goal": "decrease"}
    kept = ExperimentAccumulator(
        [ExperimentSpec(7, parse_experiment(renamed))], {7: decode_state(stored)}
    )
    assert kept.state(7).persons == first.state(7).persons  # names do not change the numbers


def test_drain_gives_person_rows_and_totals_increments_a_store_can_add() -> None:
    events = random_history(3)
    spec = spec_of()
    stored_totals = ExperimentTotals()
    stored_persons: dict[str, Any] = {}
    batch_size = 37
    for begin in range(0, len(events), batch_size):
        batch = events[begin : begin + batch_size]
        # A fresh accumulator per batch, loading only the persons the batch touches.
        acc = ExperimentAccumulator([spec])
        wanted = {e.person_id for e in batch}
        acc.load_persons(7, {p: stored_persons[p] for p in wanted if p in stored_persons})
        acc.add_many(batch)
        for change in acc.drain():
            stored_persons.update(change.persons)
            add_totals(stored_totals, change.totals)
        assert acc.drain() == []
    whole = ExperimentAccumulator([spec])
    whole.add_many(events)
    expected = whole.summary(7)
    got = summarize(spec, stored_totals)
    assert got.exposures == expected.exposures
    assert got.multiple_variant_persons == expected.multiple_variant_persons
    for uuid, rows in expected.metrics.items():
        for want, have in zip(rows, got.metrics[uuid], strict=True):
            assert have.sum == pytest.approx(want.sum)
            assert have.sum_squares == pytest.approx(want.sum_squares)
            assert have.step_counts == want.step_counts


def test_events_of_no_experiment_are_not_routed() -> None:
    acc = ExperimentAccumulator([spec_of()])
    assert "$autocapture" not in acc._routed
    assert CALLED in acc._routed and "purchase" in acc._routed
    acc.add(event("p", "$autocapture", 0))
    acc.add(called("p", "control", 0, flag="unrelated"))
    assert acc.drain() == []


def test_merging_excluded_persons_keeps_one_excluded_person() -> None:
    acc = ExperimentAccumulator([spec_of()])
    acc.add_many(
        [
            called("a", "control", 0),
            called("a", "test", 1),  # a: excluded
            called("b", "control", 0),
            called("b", "test", 1),  # b: excluded
            called("c", "test", 0),
            event("c", "purchase", 1, amount=5),
            called("d", "control", 0),
        ]
    )
    assert acc.summary(7).multiple_variant_persons == 2
    acc.merge_persons("a", "b")  # two excluded persons become one
    assert acc.summary(7).multiple_variant_persons == 1
    acc.merge_persons("c", "b")  # an exposed person joins an excluded one: excluded
    summary = acc.summary(7)
    assert summary.exposures == {"control": 1, "test": 0}
    assert summary.multiple_variant_persons == 1
    assert by_key(summary.metrics["revenue"])["test"].sum == 0.0
    acc.merge_persons("nobody", "d")  # unknown source: nothing changes
    assert acc.summary(7).exposures == {"control": 1, "test": 0}


DAY = 86_400_000


def reference_days(events: list[ExperimentEvent]) -> dict[str, dict[int, int]]:
    """Per variant, the persons counted in its exposures by the UTC day of their first
    exposure, written plainly over the whole history."""
    first: dict[str, tuple[str, int]] = {}
    excluded: set[str] = set()
    for item in sorted(events, key=lambda e: e.timestamp_ms):
        if item.event != CALLED or item.properties.get("$feature_flag") != "checkout":
            continue
        variant = item.properties.get("$feature_flag_response")
        if variant not in ("control", "test") or not START <= item.timestamp_ms <= END:
            continue
        if item.person_id not in first:
            first[item.person_id] = (variant, item.timestamp_ms)
        elif first[item.person_id][0] != variant:
            excluded.add(item.person_id)
    days: dict[str, dict[int, int]] = {"control": {}, "test": {}}
    for person, (variant, at) in first.items():
        if person not in excluded:
            days[variant][at // DAY] = days[variant].get(at // DAY, 0) + 1
    return {key: dict(sorted(counts.items())) for key, counts in days.items()}


@pytest.mark.parametrize("seed", range(5))
def test_exposure_days_count_each_person_once_on_their_first_day(seed: int) -> None:
    events = random_history(seed)
    acc = ExperimentAccumulator([spec_of()])
    acc.add_many(events)
    summary = acc.summary(7)
    assert summary.exposure_days == reference_days(events)
    for variant, days in summary.exposure_days.items():
        assert sum(days.values()) == summary.exposures[variant]

    # the same history in batches, each a fresh accumulator adding its increment (PostgreSQL)
    stored = ExperimentTotals()
    persons: dict[str, Any] = {}
    for begin in range(0, len(events), 41):
        batch = events[begin : begin + 41]
        part = ExperimentAccumulator([spec_of()])
        part.load_persons(
            7, {p.person_id: persons[p.person_id] for p in batch if p.person_id in persons}
        )
        part.add_many(batch)
        for change in part.drain():
            persons.update(change.persons)
            add_totals(stored, change.totals)
    assert summarize(spec_of(), stored).exposure_days == summary.exposure_days


def test_a_late_earlier_exposure_moves_the_person_to_its_day() -> None:
    acc = ExperimentAccumulator([spec_of()])
    day0 = START // DAY
    acc.add_many(
        [
            called("a", "test", 2 * DAY),
            called("a", "test", 3 * DAY),  # a second check the same person: still one
            called("b", "test", 2 * DAY + 5),
            called("c", "control", DAY),
        ]
    )
    assert acc.summary(7).exposure_days == {"control": {day0 + 1: 1}, "test": {day0 + 2: 2}}
    acc.add(called("a", "test", 10))  # an earlier check, sent late
    assert acc.summary(7).exposure_days == {
        "control": {day0 + 1: 1},
        "test": {day0: 1, day0 + 2: 1},
    }
    acc.add(called("b", "control", 3 * DAY))  # b seen with both variants: excluded
    assert acc.summary(7).exposure_days == {"control": {day0 + 1: 1}, "test": {day0: 1}}
    acc.add(called("d", "control", 4 * DAY))
    acc.merge_persons("c", "d")  # one person, first exposed on c's day
    assert acc.summary(7).exposure_days == {"control": {day0 + 1: 1}, "test": {day0: 1}}
