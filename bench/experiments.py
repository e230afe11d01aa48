"""Cost of experiment attribution per ingested event, and of the results computation.

    python -m bench.experiments [--persons N] [--events N] [--repeat N]

Part 1, per event, with five running experiments (each: a mean metric, a funnel, a ratio; one
also counts `$pageview`): the accumulator's cost for events that concern no experiment
(`$autocapture`), for `$feature_flag_called` of a flag without an experiment, for exposures
(first and repeated `$feature_flag_called` of an experiment's flag) and for metric events of
exposed persons (`purchase`, read by all five experiments). An empty loop over the same events
is timed too and subtracted. One process, one core, no store.

Part 2, results for one experiment with `--persons` exposed persons (1M by default): the
state is built by the accumulator (exposures and one to three metric events per person), then
the results are computed from the totals, which is what a results request does when the store
keeps the aggregates: summary, both statistics methods, SRM. Also the msgpack size and the
encode/decode time of the whole per-person state, for the storage design.
Times are CPU time of this process (`time.process_time`), so that other work on a shared
machine inflates them less; the best of `--repeat` runs is printed.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable
from typing import Any

from bench.ingest_rules import BATCH_SIZE, js_event, make_body, run_case
from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    decode_state,
    encode_state,
)
from flagstaff.experiments.model import parse_experiment
from flagstaff.experiments.results import build_results

START_MS = 1_704_067_200_000
EXPERIMENTS = 5


def definition(index: int, method: str = "bayesian") -> Any:
    metrics: list[dict[str, Any]] = [
        {
            "uuid": f"revenue-{index}",
            "metric_type": "mean",
            "source": {"event": "purchase", "math": "sum", "math_property": "amount"},
        },
        {
            "uuid": f"funnel-{index}",
            "metric_type": "funnel",
            "series": [{"event": "cart"}, {"event": "purchase"}],
        },
        {
            "uuid": f"per-order-{index}",
            "metric_type": "ratio",
            "numerator": {"event": "purchase", "math": "sum", "math_property": "amount"},
            "denominator": {"event": "purchase"},
        },
    ]
    secondary = (
        [{"uuid": "views", "metric_type": "mean", "source": {"event": "$pageview"}}]
        if index == 0
        else []
    )
    return parse_experiment(
        {
            "name": f"Experiment {index}",
            "feature_flag_key": f"exp-{index}",
            "start_date": "2024-01-01T00:00:00Z",
            "stats_config": {"method": method},
            "metrics": metrics,
            "metrics_secondary": secondary,
        }
    )


def flag_call(person: str, flag: str, variant: str, at: int) -> ExperimentEvent:
    properties = {
        "$feature_flag": flag,
        "$feature_flag_response": variant,
        f"$feature/{flag}": variant,
        "$lib": "posthog-python",
    }
    return ExperimentEvent(person, person, "$feature_flag_called", START_MS + at, properties)


def best_of(repeat: int, run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.process_time()
        run()
        best = min(best, time.process_time() - began)
    return best


def per_event(events: int, repeat: int) -> None:
    rng = random.Random(1)
    specs = [ExperimentSpec(index, definition(index)) for index in range(EXPERIMENTS)]
    persons = [f"person-{index}" for index in range(events)]
    unrelated = [
        ExperimentEvent(p, p, "$autocapture", START_MS + i, {"$event_type": "click"})
        for i, p in enumerate(persons)
    ]
    other_flag = [flag_call(p, "other-flag", "on", i) for i, p in enumerate(persons)]
    exposures = [
        flag_call(p, f"exp-{i % EXPERIMENTS}", rng.choice(("control", "test")), i)
        for i, p in enumerate(persons)
    ]
    purchases = [
        ExperimentEvent(p, p, "purchase", START_MS + events + i, {"amount": rng.randint(1, 99)})
        for i, p in enumerate(persons)
    ]

    def loop_only(batch: list[ExperimentEvent]) -> Callable[[], None]:
        def run() -> None:
            for _item in batch:
                pass

        return run

    def feed(batch: list[ExperimentEvent], prepare: list[ExperimentEvent]) -> float:
        """Best time to add `batch` to an accumulator that has seen `prepare` first."""
        best = float("inf")
        for _ in range(repeat):
            acc = ExperimentAccumulator(specs)
            for item in prepare:
                acc.add(item)
            add = acc.add
            began = time.process_time()
            for item in batch:
                add(item)
            best = min(best, time.process_time() - began)
        return best

    empty = best_of(repeat, loop_only(unrelated))
    rows = [
        ("no experiment ($autocapture)", feed(unrelated, [])),
        ("$feature_flag_called, flag without experiment", feed(other_flag, [])),
        ("exposure, first (new person)", feed(exposures, [])),
        ("exposure, repeated (same variant)", feed(exposures, exposures)),
        ("metric event of an exposed person (5 exps)", feed(purchases, exposures)),
        ("metric event of a person exposed nowhere", feed(purchases, [])),
    ]
    bodies = [make_body(js_event, seed, False) for seed in range(4)]
    batches = max(1, events // BATCH_SIZE)
    rules = float("inf")
    for _ in range(repeat):
        began = time.process_time()  # run_case's own split is wall time: take CPU time here
        run_case(bodies, None, batches)
        rules = min(rules, time.process_time() - began)
    rules_us = rules / (batches * BATCH_SIZE) * 1e6
    print(f"Part 1: {EXPERIMENTS} running experiments, {events:,} events per row, best of {repeat}")
    print(f"  empty loop: {empty / events * 1e6:.3f} µs/event (subtracted below)")
    print(f"  reference, ingest rules (decode + normalize a posthog-js event): {rules_us:.2f} µs")
    for label, seconds in rows:
        cost = (seconds - empty) / events * 1e6
        print(f"  {label:<48} {cost:7.3f} µs/event  {cost / rules_us:6.1%} of the rules")


def results_at_scale(persons: int, repeat: int) -> None:
    rng = random.Random(2)
    spec = ExperimentSpec(1, definition(0))
    acc = ExperimentAccumulator([spec])
    began = time.process_time()
    fed = 0
    for index in range(persons):
        person = f"person-{index:07d}"
        variant = "control" if rng.random() < 0.5 else "test"
        acc.add(flag_call(person, "exp-0", variant, index))
        fed += 1
        if rng.random() < 0.4:
            acc.add(ExperimentEvent(person, person, "cart", START_MS + index + 1, {}))
            fed += 1
            for order in range(rng.randint(0, 2)):
                amount = {"amount": rng.randint(5, 120)}
                at = START_MS + index + 2 + order
                acc.add(ExperimentEvent(person, person, "purchase", at, amount))
                fed += 1
    built = time.process_time() - began
    bayes = definition(0)
    freq = definition(0, "frequentist")

    def compute(which: Any) -> Callable[[], None]:
        def run() -> None:
            build_results(which, acc.summary(1))

        return run

    bayesian_s = best_of(repeat, compute(bayes))
    frequentist_s = best_of(repeat, compute(freq))
    state = acc.state(1)
    encoded = encode_state(state)
    gc.collect()
    gc.freeze()  # the live state is long-lived: keep collections from rescanning it
    encode_s = best_of(max(1, repeat // 2), lambda: encode_state(state))
    decode_s = best_of(max(1, repeat // 2), lambda: decode_state(encoded))
    results = build_results(bayes, acc.summary(1))
    print(
        f"Part 2: {persons:,} exposed persons, {fed:,} events fed in {built:.1f} s "
        f"({built / fed * 1e6:.1f} µs/event)"
    )
    print(f"  exposures: {results.exposures}")
    print(f"  results from totals, bayesian:    {bayesian_s * 1e3:8.2f} ms")
    print(f"  results from totals, frequentist: {frequentist_s * 1e3:8.2f} ms")
    print(
        f"  whole state: {len(encoded) / 1e6:.1f} MB msgpack, "
        f"encode {encode_s * 1e3:.0f} ms, decode {decode_s * 1e3:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    per_event(args.events, args.repeat)
    results_at_scale(args.persons, args.repeat)


if __name__ == "__main__":
    main()
