"""CUPED's covariates in both stores, through ``Store.ingest``: history stored before the
exposure (read back at exposure time, from the distinct-id index and past its watermark),
events of the window in the exposure's batch or arriving later, a retried one, a person
merged with an identity that has history, a person without a profile; checked against values
computed here from the events sent, and against a recompute."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flagstaff.common.units import DAY_MS
from flagstaff.experiments.exposure import ExperimentSpec, ExperimentTotals, summarize
from flagstaff.experiments.model import parse_experiment
from flagstaff.ingest.model import Event
from flagstaff.store.base import Store
from tests.events import T0, event
from tests.unit.test_experiments_store import flag_write, open_store, run

__all__ = ["open_store"]

LOOKBACK_DAYS = 2
LOOKBACK = LOOKBACK_DAYS * DAY_MS
START_MS = T0 - 5 * DAY_MS // 2
"""Two and a half days before the exposures: some windows begin before the start."""
METRICS = [
    {
        "uuid": "spend",
        "metric_type": "mean",
        "source": {"event": "buy", "math": "sum", "math_property": "amount"},
    },
    {"uuid": "views", "metric_type": "mean", "source": {"event": "$pageview"}},
    {"uuid": "bought", "metric_type": "funnel", "series": [{"event": "buy"}]},
    {
        "uuid": "per-view",
        "metric_type": "ratio",
        "numerator": {"event": "buy", "math": "sum", "math_property": "amount"},
        "denominator": {"event": "$pageview"},
    },
]


def definition() -> Any:
    return parse_experiment(
        {
            "name": "e",
            "feature_flag_key": "exp",
            "start_date": datetime.fromtimestamp(START_MS / 1000, UTC).isoformat(),
            "stats_config": {"cuped": True, "cuped_lookback_days": LOOKBACK_DAYS},
            "metrics": METRICS,
        }
    )


def buy(distinct_id: str, amount: float, ts: int, **kw: Any) -> Event:
    return event("buy", distinct_id, props={"amount": amount}, ts=ts, **kw)


def view(distinct_id: str, ts: int, **kw: Any) -> Event:
    return event("$pageview", distinct_id, ts=ts, **kw)


def flag_call(distinct_id: str, variant: str, ts: int, **kw: Any) -> Event:
    props = {"$feature_flag": "exp", "$feature_flag_response": variant}
    return event("$feature_flag_called", distinct_id, props=props, ts=ts, **kw)


def batches() -> list[list[Event]]:
    retried = view("a1", T0 - 1)
    return [
        [  # history, before anyone is exposed
            buy("a1", 10, T0 - LOOKBACK - 1),  # just outside a1's window
            buy("a1", 4, T0 - LOOKBACK),  # exactly the lookback: inside
            retried,
            buy("a2", 6, T0 - DAY_MS),  # a2 turns out to be a1
            view("c1", T0 - 5, process_person=False),
            buy("d1", 1, T0 - 7),
            view("e1", T0 - 3 * DAY_MS),  # before the start; in e1's window once known
        ],
        [
            flag_call("a1", "test", T0),
            view("b1", T0 + 5),  # b1's window, in its exposure's batch
            flag_call("b1", "control", T0 + 10),
            buy("a1", 3, T0 + 20),
            flag_call("d1", "test", T0),
            flag_call("e1", "test", T0),
        ],
        [
            buy("b1", 2, T0 - 100),  # late: inside b1's window, after its exposure arrived
            retried,  # a retry: counts once
            view("a1", T0),  # at the exposure's instant: after, not a covariate
            flag_call("d1", "control", T0 + 1),  # d1 saw both variants: excluded
            flag_call("e1", "test", T0 - 2 * DAY_MS),  # late, earlier: e1's window moves
        ],
        [event("$identify", "a1", props={"$anon_distinct_id": "a2"}, ts=T0 + 40)],
        [flag_call("c1", "control", T0 + 50, process_person=False)],
    ]


def expected(sent: list[list[Event]]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per metric and variant, (sum x, sum x², sum x·y) from the events alone."""
    person = {"a2": "a1"}  # who is who in the end
    unique = {e.uuid: e for batch in sent for e in batch}.values()
    events = [(person.get(e.distinct_id, e.distinct_id), e) for e in unique]
    exposures: dict[str, list[tuple[int, str]]] = {}
    for who, e in events:
        if e.event == "$feature_flag_called":
            exposures.setdefault(who, []).append(
                (e.timestamp_ms, e.properties["$feature_flag_response"])
            )
    values: dict[str, dict[str, tuple[float, float, float]]] = {}
    for metric in ("spend", "views", "bought"):
        sums: dict[str, tuple[float, float, float]] = {"control": (0, 0, 0), "test": (0, 0, 0)}
        for who, seen in exposures.items():
            if len({variant for _, variant in seen}) > 1:
                continue
            at, variant = min(seen)
            mine = [e for p, e in events if p == who]
            before = [e for e in mine if at - LOOKBACK <= e.timestamp_ms < at]
            after = [e for e in mine if e.timestamp_ms >= at]
            x, y = (_value(metric, before), _value(metric, after))
            s, s2, sxy = sums[variant]
            sums[variant] = (s + x, s2 + x * x, sxy + x * y)
        values[metric] = sums
    return values


def _value(metric: str, events: list[Event]) -> float:
    buys = [float(e.properties["amount"]) for e in events if e.event == "buy"]
    if metric == "spend":
        return sum(buys)
    if metric == "views":
        return float(sum(e.event == "$pageview" for e in events))
    return 1.0 if buys else 0.0


def _covariates(spec: ExperimentSpec, totals: ExperimentTotals) -> dict[str, Any]:
    summary = summarize(spec, totals)
    out: dict[str, Any] = {}
    for uuid, rows in summary.metrics.items():
        out[uuid] = {
            row.key: (row.pre_sum, row.pre_sum_squares, row.pre_post_sum_product) for row in rows
        }
    return out


def test_covariates_kept_at_ingestion_equal_the_events_and_a_recompute(
    open_store: Callable[[], Store],
) -> None:
    sent = batches()

    async def scenario(store: Store) -> tuple[dict[str, Any], dict[str, Any]]:
        project = await store.create_project("p")
        parsed = definition()
        record = await store.create_experiment(project.id, parsed, flag_write(parsed))
        spec = ExperimentSpec(record.id, parsed)
        for batch in sent:
            await store.ingest(project.id, batch, [])
        kept = _covariates(spec, await store.experiment_totals(record.id, spec.fingerprint))
        await store.recompute_experiment(project.id, record.id)
        again = _covariates(spec, await store.experiment_totals(record.id, spec.fingerprint))
        return kept, again

    kept, recomputed = run(open_store, scenario)
    want = expected(sent)
    for metric in ("spend", "views", "bought"):
        assert kept[metric] == want[metric], metric  # sums of small integers: exact
    assert kept["per-view"] == {"control": (None, None, None), "test": (None, None, None)}
    # the scenario reaches what it is about: a1's window holds a2's buy, b1's the late one
    assert want["spend"] == {"test": (10.0, 100.0, 30.0), "control": (2.0, 4.0, 0.0)}
    assert want["views"]["test"] == (2.0, 2.0, 1.0)  # a1 (1 before, 1 after) and e1
    assert recomputed == kept
