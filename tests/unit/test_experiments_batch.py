"""A batch applied the way stores apply it (``batch_work``, ``apply_work``: exposures first,
counted events folded per person, the rest one by one) gives the same persons and totals as
the same events added one at a time in time order, exposures first at equal times."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    ExperimentTotals,
    add_totals,
    summarize,
)
from flagstaff.experiments.model import parse_experiment
from flagstaff.ingest.model import Event
from flagstaff.ingest.persons import PersonState, person_uuid
from flagstaff.store.experiment_batch import SpecCache, apply_work, batch_work
from flagstaff.store.sqlite.protocol import for_writer
from tests.unit.test_experiments_exposure import CALLED, END, START, experiment

PROJECT = 1


def _definition(**overrides: Any) -> Any:
    body = experiment(**overrides)
    body["metrics_secondary"] = [
        *body["metrics_secondary"],
        # a second count of the same event, within a day of exposure
        {
            "uuid": "pageviews-first-day",
            "metric_type": "mean",
            "source": {"event": "$pageview"},
            "conversion_window": 1,
            "conversion_window_unit": "day",
        },
        {"uuid": "carts", "metric_type": "mean", "source": {"event": "cart"}},
    ]
    return parse_experiment(body)


def _history(seed: int) -> list[Event]:
    """Bursts of pageviews and carts per person around flag calls, over the experiment and a
    day either side, in time order."""
    rng = random.Random(seed)
    events: list[Event] = []
    for index in range(120):
        distinct_id = f"user-{index}"
        for _ in range(rng.randint(1, 4)):
            at = START + rng.randint(-86_400_000, 11 * 86_400_000)
            for step in range(rng.randint(1, 12)):
                at += rng.choice([0, 0, 1, 1000, 3_600_000])
                roll = rng.random()
                if roll < 0.12:
                    variant = rng.choice(["control", "control", "test", "test", "false"])
                    name = CALLED
                    props: dict[str, Any] = {
                        "$feature_flag": "checkout",
                        "$feature_flag_response": variant,
                        "plan": rng.choice(["pro", "free"]),
                    }
                elif roll < 0.22:
                    name, props = "purchase", {"amount": rng.randint(1, 100)}
                elif roll < 0.4:
                    name, props = "cart", {}
                else:
                    name, props = "$pageview", {"$current_url": f"/p/{step}"}
                events.append(
                    Event(
                        f"{seed}-{len(events)}",
                        name,
                        distinct_id,
                        props,
                        at,
                        at,
                        None,
                        None,
                        None,
                        True,
                        False,
                    )
                )
    events.sort(key=lambda e: e.timestamp_ms)
    # as the SQLite ingest writer receives them: properties as JSON, a few keys decoded
    return for_writer(events)


def _batches(events: list[Event], size: int) -> list[list[Event]]:
    """Consecutive batches of about ``size`` events, never parting events of one millisecond
    (an event that arrives in a batch before its exposure's does not count, as documented)."""
    out: list[list[Event]] = []
    begin = 0
    while begin < len(events):
        end = min(begin + size, len(events))
        while end < len(events) and events[end].timestamp_ms == events[end - 1].timestamp_ms:
            end += 1
        out.append(events[begin:end])
        begin = end
    return out


def _one_at_a_time(spec: ExperimentSpec, events: list[Event]) -> ExperimentTotals:
    ordered = sorted(events, key=lambda e: (e.timestamp_ms, e.event != CALLED))
    accumulator = ExperimentAccumulator([spec])
    accumulator.add_many(
        ExperimentEvent(
            person_uuid(PROJECT, e.distinct_id),
            e.distinct_id,
            e.event,
            e.timestamp_ms,
            orjson.loads(e.properties_json or b"{}"),
        )
        for e in ordered
    )
    return accumulator.state(spec.experiment_id).totals


def _plain(spec: ExperimentSpec, totals: ExperimentTotals) -> dict[str, Any]:
    summary = summarize(spec, totals)
    return {
        "exposures": summary.exposures,
        "excluded": summary.multiple_variant_persons,
        "metrics": {
            uuid: [
                (row.key, round(row.sum, 6), round(row.sum_squares, 6), row.step_counts)
                for row in rows
            ]
            for uuid, rows in summary.metrics.items()
        },
    }


PRO_ONLY = {
    "exposure_config": {
        "event": CALLED,
        "properties": [{"key": "plan", "value": "pro", "operator": "exact"}],
    }
}
"""Exposed only by flag calls with ``plan: pro``: a property the writer is not sent decoded."""


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("batch_size", [25, 400])
@pytest.mark.parametrize("filtered", [False, True], ids=["all-calls", "pro-calls"])
def test_batches_applied_by_parts_equal_one_event_at_a_time(
    seed: int, batch_size: int, filtered: bool
) -> None:
    spec = ExperimentSpec(7, _definition(**({"exposure_criteria": PRO_ONLY} if filtered else {})))
    assert spec.end_ms == END
    running = SpecCache().put("db", PROJECT, 1, [spec])
    events = _history(seed)
    expected = _plain(spec, _one_at_a_time(spec, events))
    if filtered:  # the filter holds back some exposures
        unfiltered = ExperimentSpec(7, _definition())
        everyone = _plain(unfiltered, _one_at_a_time(unfiltered, events))["exposures"]
        assert sum(expected["exposures"].values()) < sum(everyone.values())
    # as the SQLite ingest writer keeps it: one accumulator holding the stored totals
    kept = ExperimentAccumulator([spec], increments=False)
    # as a stateless node does: a fresh accumulator per batch, persons loaded, totals added
    stored_persons: dict[str, Any] = {}
    stored_totals = ExperimentTotals()
    for batch in _batches(events, batch_size):
        work = batch_work(running, PROJECT, {}, [], batch)
        if work is None:
            continue
        apply_work(kept, work, {}, set())
        fresh = ExperimentAccumulator([spec])
        wanted = work.wanted.get(7, set())
        loaded = {7: {p: stored_persons[p] for p in wanted if p in stored_persons}}
        for change in apply_work(fresh, work, loaded, set()):
            stored_persons.update(change.persons)
            add_totals(stored_totals, change.totals)
    assert _plain(spec, kept.state(7).totals) == expected
    assert _plain(spec, stored_totals) == expected


def test_a_retried_batch_counts_once() -> None:
    spec = ExperimentSpec(7, _definition())
    running = SpecCache().put("db", PROJECT, 1, [spec])
    events = _history(11)
    kept = ExperimentAccumulator([spec], increments=False)
    half = len(events) // 2
    while events[half].timestamp_ms == events[half - 1].timestamp_ms:
        half += 1
    for batch, duplicates in [
        (events[:half], set()),
        (events[:half], {e.uuid for e in events[:half]}),  # the same request, retried
        (events[half:], set()),
    ]:
        work = batch_work(running, PROJECT, {}, [], batch)
        assert work is not None
        apply_work(kept, work, {}, duplicates)
    assert _plain(spec, kept.state(7).totals) == _plain(spec, _one_at_a_time(spec, events))


def test_counted_events_of_two_distinct_ids_of_one_person_add_up() -> None:
    """A person identified earlier has two distinct ids; the pageviews each sends in one batch
    (two pairs of one person) count for the person together, as one at a time."""
    spec = ExperimentSpec(7, _definition())
    running = SpecCache().put("db", PROJECT, 1, [spec])
    uuid = person_uuid(PROJECT, "anon-1")
    person = PersonState(1, uuid, {}, True, START)
    book = {"anon-1": person, "user@example.com": person}

    def event(n: int, name: str, distinct_id: str, at: int, **props: Any) -> Event:
        return Event(f"e-{n}", name, distinct_id, props, at, at, None, None, None, True, False)

    exposure = event(
        0,
        CALLED,
        "anon-1",
        START + 1000,
        **{"$feature_flag": "checkout", "$feature_flag_response": "test"},
    )
    views = [
        event(n, "$pageview", distinct_id, START + 60_000 + n)
        for n, distinct_id in enumerate(["anon-1", "user@example.com"] * 3, start=1)
    ]
    kept = ExperimentAccumulator([spec], increments=False)
    for batch in ([exposure], views):  # exposed before the batch of pageviews: counted
        work = batch_work(running, PROJECT, book, [], for_writer(batch))
        assert work is not None
        apply_work(kept, work, {}, set())
    one = ExperimentAccumulator([spec])
    one.add_many(
        ExperimentEvent(uuid, e.distinct_id, e.event, e.timestamp_ms, e.properties)
        for e in [exposure, *views]
    )
    assert kept.state(7).persons[uuid].slots == one.state(7).persons[uuid].slots
    assert _plain(spec, kept.state(7).totals) == _plain(spec, one.state(7).totals)
    # six pageviews of one person in the test variant: sum 6, sum of squares 36
    assert _plain(spec, kept.state(7).totals)["metrics"]["pageviews-first-day"] == [
        ("control", 0.0, 0.0, None),
        ("test", 6.0, 36.0, None),
    ]
