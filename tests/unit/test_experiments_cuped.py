"""CUPED's covariates in the accumulator: each exposed person's value of a mean or funnel
metric over the lookback window before their first exposure, summed per variant as
``pre_sum``, ``pre_sum_squares`` and ``pre_post_sum_product``, checked against values
computed here from the events alone."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    MetricTotals,
    PersonState,
    decode_state,
    encode_state,
)
from flagstaff.experiments.model import parse_experiment
from tests.unit.test_experiments_exposure import START, by_key, called, event, experiment

DAY = 86_400_000
LOOKBACK = 3 * DAY


def cuped(**overrides: Any) -> ExperimentSpec:
    config = {"method": "frequentist", "cuped": True, "cuped_lookback_days": 3}
    overrides.setdefault("stats_config", config)
    return ExperimentSpec(7, parse_experiment(experiment(**overrides)))


def _x(metric: str, events: list[ExperimentEvent], person: str, low: int, high: int) -> float:
    """The covariate of one person, from the events alone."""
    window = [e for e in events if e.person_id == person and low <= e.timestamp_ms < high]
    purchases = [e for e in window if e.event == "purchase"]
    amounts = [float(e.properties["amount"]) for e in purchases]
    if metric == "revenue":
        return sum(amounts)
    if metric == "avg-basket":
        return sum(amounts) / len(amounts) if amounts else 0.0
    if metric == "pageviews":
        return float(sum(e.event == "$pageview" for e in window))
    assert metric == "checkout-funnel"  # its last step: purchase
    return 1.0 if purchases else 0.0


def _sums(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    return (
        sum(x for x, _ in pairs),
        sum(x * x for x, _ in pairs),
        sum(x * y for x, y in pairs),
    )


def _got(acc: ExperimentAccumulator, metric: str, variant: str) -> tuple[float, float, float]:
    row = by_key(acc.summary(7).metrics[metric])[variant]
    return (row.pre_sum, row.pre_sum_squares, row.pre_post_sum_product)


def test_mean_and_funnel_covariates_over_the_lookback_window() -> None:
    exposed = DAY  # a day after the start: the window begins two days before it
    events = [
        event("p1", "purchase", exposed - LOOKBACK - 1, amount=1000),  # just outside
        event("p1", "purchase", exposed - LOOKBACK, amount=7),  # exactly the lookback: in
        event("p1", "purchase", -DAY, amount=5),  # before the experiment's start: in
        event("p1", "$pageview", exposed - 1),
        event("p1", "cart", exposed - 2),
        called("p1", "test", exposed),
        event("p1", "purchase", exposed, amount=20),  # at the exposure's instant: after
        event("p1", "$pageview", exposed + 1),
        event("p1", "$pageview", exposed + 2),
        event("p2", "$pageview", exposed - 10),
        called("p2", "control", exposed),
        called("p3", "control", exposed),  # nothing before
        event("p3", "cart", exposed + 1),
        event("p3", "purchase", exposed + 2, amount=3),
    ]
    acc = ExperimentAccumulator([cuped()])
    acc.add_many(events[:6])
    acc.add_covariates(events[:5])  # what a store read of p1 before the exposure
    acc.add_many(events[6:9])
    acc.add_many(events[9:11])
    acc.add_covariates(events[9:10])
    acc.add_many(events[11:])
    summary = acc.summary(7)
    # p1: revenue x = 12 (y = 20); avg x = 6 (y = 20); pageviews x = 1 (y = 2); funnel x = 1
    assert _got(acc, "revenue", "test") == (12.0, 144.0, 240.0)
    assert _got(acc, "avg-basket", "test") == (6.0, 36.0, 120.0)
    assert _got(acc, "pageviews", "test") == (1.0, 1.0, 2.0)
    assert _got(acc, "checkout-funnel", "test") == (1.0, 1.0, 0.0)  # no cart after exposure
    # control: p2 (one pageview before), p3 (converted after, nothing before)
    assert _got(acc, "pageviews", "control") == (1.0, 1.0, 0.0)
    assert _got(acc, "checkout-funnel", "control") == (0.0, 0.0, 0.0)
    assert _got(acc, "revenue", "control") == (0.0, 0.0, 0.0)
    # a ratio is not adjusted
    ratio = by_key(summary.metrics["per-order"])["test"]
    assert (ratio.pre_sum, ratio.pre_sum_squares, ratio.pre_post_sum_product) == (None,) * 3


def test_a_funnel_covariate_reads_its_last_step_with_its_filters() -> None:
    funnel = {
        "uuid": "checkout-funnel",
        "metric_type": "funnel",
        "series": [
            {"event": "cart"},
            {"event": "purchase", "properties": [{"key": "plan", "value": "pro"}]},
        ],
    }
    acc = ExperimentAccumulator([cuped(metrics=[funnel], metrics_secondary=[])])
    acc.add_many(
        [
            called("a", "test", DAY),
            called("b", "test", DAY),
            event("a", "purchase", DAY - 5, plan="free"),  # late, filtered out
            event("b", "purchase", DAY - 5, plan="pro"),  # late, counts: x = 1 once
            event("b", "purchase", DAY - 4, plan="pro"),
        ]
    )
    assert _got(acc, "checkout-funnel", "test") == (1.0, 1.0, 0.0)


def test_late_events_and_excluded_persons() -> None:
    """Events of the window that arrive after the exposure count (in any order); a person
    seen with two variants takes their covariates out of the totals."""
    rng = random.Random(5)
    exposures: dict[str, tuple[str, int]] = {}
    events: list[ExperimentEvent] = []
    for n in range(60):
        person = f"p{n}"
        at = rng.randint(0, 5 * DAY)
        exposures[person] = (rng.choice(["control", "test"]), at)
        for _ in range(rng.randint(0, 8)):
            when = at + rng.randint(-5 * DAY, DAY)
            if rng.random() < 0.5:
                events.append(event(person, "purchase", when, amount=rng.randint(1, 50)))
            else:
                events.append(event(person, rng.choice(["$pageview", "cart"]), when))
    twice = {"p3", "p17", "p40"}
    calls = [called(p, v, at) for p, (v, at) in exposures.items()]
    calls += [called(p, "test" if exposures[p][0] == "control" else "control", 1) for p in twice]
    acc = ExperimentAccumulator([cuped()])
    one = ExperimentAccumulator([cuped()])
    # all exposures first, then the metric events shuffled: those of a window arrive late
    acc.add_many(sorted(calls, key=lambda e: e.timestamp_ms))
    assert acc.covariate_requests() is not None
    acc.add_covariates([])  # nothing stored before
    rng.shuffle(events)
    acc.add_many(events)
    # the same, with what happened before each exposure given as stored events
    one.add_many(sorted(calls, key=lambda e: e.timestamp_ms))
    requests = one.covariate_requests()
    assert requests is not None
    assert requests.events == frozenset({"purchase", "$pageview"})
    stored = [
        e
        for e in events
        if e.person_id in requests.windows
        and requests.windows[e.person_id][0] <= e.timestamp_ms < requests.windows[e.person_id][1]
    ]
    one.add_covariates(stored)
    one.add_many(e for e in events if e not in stored)
    persons = acc.state(7).persons
    for metric in ("revenue", "avg-basket", "pageviews", "checkout-funnel"):
        for variant in ("control", "test"):
            pairs = []
            for person, (v, at) in exposures.items():
                if v != variant or person in twice:
                    continue
                x = _x(metric, [*events, *calls], person, START + at - LOOKBACK, START + at)
                rule = acc.spec(7).rules[acc.spec(7).metric_uuids.index(metric)]
                pairs.append((x, rule.contribution(persons[person].slots)[0]))
            want = _sums(pairs)
            assert _got(acc, metric, variant) == pytest.approx(want, abs=1e-9)
            assert _got(one, metric, variant) == pytest.approx(want, abs=1e-9)
    assert acc.summary(7).multiple_variant_persons == len(twice)


def test_an_earlier_exposure_arriving_late_asks_for_its_window_again() -> None:
    acc = ExperimentAccumulator([cuped()])
    acc.add_many([called("p", "test", 2 * DAY), event("p", "$pageview", 2 * DAY - 1)])
    acc.add_covariates([])
    assert _got(acc, "pageviews", "test") == (1.0, 1.0, 0.0)
    acc.drain()
    acc.add(called("p", "test", DAY))  # earlier: the window is now the day before it
    requests = acc.covariate_requests()
    assert requests is not None
    assert requests.windows == {"p": (START + DAY - LOOKBACK, START + DAY)}
    assert _got(acc, "pageviews", "test") == (0.0, 0.0, 0.0)  # taken out until given again
    acc.add_covariates([event("p", "$pageview", DAY - 3), event("p", "$pageview", 2 * DAY - 1)])
    # the first is in the new window, the second (now after exposure) is not a covariate
    assert _got(acc, "pageviews", "test")[:2] == (1.0, 1.0)


def test_merged_persons_ask_for_their_covariates_again() -> None:
    acc = ExperimentAccumulator([cuped()])
    acc.add_many([called("a", "test", DAY), called("b", "test", 2 * DAY)])
    acc.add_covariates([event("a", "$pageview", DAY - 1), event("b", "$pageview", DAY)])
    assert _got(acc, "pageviews", "test") == (2.0, 2.0, 0.0)
    acc.drain()
    acc.merge_persons("b", "a")
    requests = acc.covariate_requests()
    assert requests is not None and list(requests.windows) == ["a"]
    assert _got(acc, "pageviews", "test") == (0.0, 0.0, 0.0)
    # the stored events of both identities, now the person's: b's pageview is after exposure
    acc.add_covariates([event("a", "$pageview", DAY - 1), event("a", "$pageview", DAY)])
    assert _got(acc, "pageviews", "test") == (1.0, 1.0, 0.0)


def test_without_cuped_nothing_is_collected_and_states_stay_as_stored() -> None:
    plain = ExperimentSpec(7, parse_experiment(experiment()))
    off = ExperimentSpec(7, parse_experiment(experiment(stats_config={"cuped": False})))
    assert plain.fingerprint == off.fingerprint  # stored aggregates stay valid
    assert cuped().fingerprint != plain.fingerprint  # turning it on recomputes
    assert cuped().fingerprint != cuped(stats_config={"cuped": True}).fingerprint  # 3 vs 14 days
    acc = ExperimentAccumulator([plain])
    acc.add_many([event("p", "purchase", 5, amount=3), called("p", "test", 10)])
    assert acc.covariate_requests() is None
    assert acc.state(7).persons["p"].pre == []
    row = by_key(acc.summary(7).metrics["revenue"])["test"]
    assert row.pre_sum is None
    # states stored before covariates existed decode (without any)
    old = msgspec.msgpack.encode(["test", 10, False, [1.0, 2.0]])
    assert msgspec.msgpack.decode(old, type=PersonState) == PersonState("test", 10, False, [1, 2])
    state = acc.state(7)
    assert decode_state(encode_state(state)) == state
    totals = msgspec.msgpack.decode(msgspec.msgpack.encode([1.0, 1.0]), type=MetricTotals)
    assert (totals.pre_sum, totals.pre_sum_squares, totals.pre_post_sum_product) == (0, 0, 0)


def test_stats_config_cuped_lookback_is_validated() -> None:
    with pytest.raises(Exception, match="between 1 and 180"):
        parse_experiment(experiment(stats_config={"cuped": True, "cuped_lookback_days": 0}))
    assert cuped().lookback_ms == LOOKBACK
    default = ExperimentSpec(7, parse_experiment(experiment(stats_config={"cuped": True})))
    assert default.lookback_ms == 14 * DAY


def test_counted_covariate_events_may_come_as_timestamps() -> None:
    """A store may give the events that covariates only count as timestamps per person."""
    rng = random.Random(9)
    calls = [
        called(f"p{n}", ("control", "test")[n % 2], rng.randint(0, 3 * DAY)) for n in range(20)
    ]
    stored = [
        event(f"p{rng.randrange(20)}", name, rng.randint(-4 * DAY, 4 * DAY), amount=3)
        for name in ("$pageview", "purchase", "cart")
        for _ in range(60)
    ]
    # another experiment on the same flag reads no pageview
    revenue = cuped(metrics_secondary=[])
    revenue.experiment_id = 8
    one = ExperimentAccumulator([cuped(), revenue])
    other = ExperimentAccumulator([cuped(), revenue])
    for acc in (one, other):
        acc.add_many(sorted(calls, key=lambda e: e.timestamp_ms))
    requests = other.covariate_requests()
    assert requests is not None and requests.counted == frozenset({"$pageview"})
    one.add_covariates(stored)
    stamps: dict[tuple[str, str], list[int]] = {}
    for e in stored:
        if e.event in requests.counted:
            stamps.setdefault((e.person_id, e.event), []).append(e.timestamp_ms)
    other.add_covariates(
        [e for e in stored if e.event not in requests.counted],
        [(person, name, at) for (person, name), at in stamps.items()],
    )
    assert _got(other, "pageviews", "test")[0] > 0
    for metric in ("revenue", "avg-basket", "pageviews", "checkout-funnel"):
        for variant in ("control", "test"):
            assert _got(other, metric, variant) == _got(one, metric, variant)
    assert other.state(7).persons == one.state(7).persons
    assert other.state(8).persons == one.state(8).persons
