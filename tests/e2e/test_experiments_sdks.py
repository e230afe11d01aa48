"""An experiment as users run it: posthog-python on a backend and posthog-js in headless Chromium
read the experiment's flag with their normal calls (``get_feature_flag`` / ``getFeatureFlag``
send ``$feature_flag_called``), the buyers capture a goal event, and the results endpoint
reports the exposures and goal counts exactly and the statistics the pure computation gives
for the same events."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from posthog import Posthog

from flagstaff.experiments.exposure import ExperimentAccumulator, ExperimentEvent, ExperimentSpec
from flagstaff.experiments.model import parse_experiment
from flagstaff.experiments.results import build_results, to_json
from tests.e2e.deps import ARRAY_JS
from tests.e2e.drivers import run_driver
from tests.e2e.site import PAGES, Site
from tests.server import PROJECT_TOKEN, Api, Server

FLAG = "pricing-page"
STARTED = "2024-01-01T00:00:00Z"
METRICS = [
    {
        "kind": "ExperimentMetric",
        "metric_type": "funnel",
        "uuid": "bought",
        "series": [{"kind": "EventsNode", "event": "purchase"}],
    },
    {
        "kind": "ExperimentMetric",
        "metric_type": "mean",
        "uuid": "revenue",
        "source": {
            "kind": "EventsNode",
            "event": "purchase",
            "math": "sum",
            "math_property": "amount",
        },
    },
]
PY_VISITORS = [f"py-{n}" for n in range(140)]
"""Enough for 50 exposed persons per variant, below which no statistics are computed."""
JS_VISITORS = [f"js-{n}" for n in range(6)]
JS_AMOUNT = 30


def _launch(mgmt: Api) -> dict[str, Any]:
    r = mgmt.post(
        "/api/projects/@current/experiments/",
        json={
            "name": "Pricing page",
            "feature_flag_key": FLAG,
            "start_date": STARTED,
            "metrics": METRICS,
        },
    )
    assert r.status_code == 201, r.text
    return r.json()


def _amount(n: int) -> float:
    return 10.0 + n % 7


def _python_visitors(server: Server) -> dict[str, Any]:
    """Each backend visitor reads the flag; every third buys."""
    client = Posthog(PROJECT_TOKEN, host=server.url, max_retries=0)
    seen: dict[str, Any] = {}
    try:
        for n, distinct_id in enumerate(PY_VISITORS):
            seen[distinct_id] = client.get_feature_flag(FLAG, distinct_id)
            if n % 3 == 0:
                client.capture(
                    "purchase", distinct_id=distinct_id, properties={"amount": _amount(n)}
                )
    finally:
        client.flush()
        client.shutdown()
    return seen


def _browser_visitors(server: Server, buyers: list[str]) -> dict[str, Any]:
    settings = {
        "token": PROJECT_TOKEN,
        "apiHost": server.url,
        "flagKey": FLAG,
        "visitors": JS_VISITORS,
        "buyers": buyers,
        "amount": JS_AMOUNT,
    }
    page = (PAGES / "experiment.html").read_text().replace("__SETTINGS__", json.dumps(settings))
    with Site() as site:
        site.add("/array.full.js", ARRAY_JS.read_bytes(), "application/javascript")
        url = site.add("/experiment.html", page.encode())
        report = run_driver(
            "e2e_browser_sdk.mjs",
            {
                "pageUrl": url,
                "apiOrigin": server.url,
                "readyWhen": "window.__e2e.ready === true",
                "collect": "window.__e2e.visit()",
            },
        )
    assert not report.raw.get("problems"), report.raw.get("problems")
    sent = Counter(name for r in report.to("/e") for name in r.event_names())
    assert sent["$feature_flag_called"] == len(JS_VISITORS), sent
    return report.results


def _pure_results(
    experiment: dict[str, Any], seen: dict[str, Any], buys: dict[str, float]
) -> dict[str, Any]:
    """What experiments/ computes for the same exposures and purchases (exposure first)."""
    definition = parse_experiment(experiment)
    spec = ExperimentSpec(1, definition)
    accumulator = ExperimentAccumulator([spec])
    t0 = 1_800_000_000_000  # after the start date
    for n, (distinct_id, variant) in enumerate(seen.items()):
        props = {"$feature_flag": FLAG, "$feature_flag_response": variant}
        exposure = ExperimentEvent(distinct_id, distinct_id, "$feature_flag_called", t0 + n, props)
        accumulator.add(exposure)
    for n, (distinct_id, amount) in enumerate(buys.items()):
        bought = {"amount": amount}
        accumulator.add(
            ExperimentEvent(distinct_id, distinct_id, "purchase", t0 + 10**6 + n, bought)
        )
    return to_json(build_results(definition, accumulator.summary(1)))


@pytest.mark.usefixtures("chromium")
# The user path is get_feature_flag; newer posthog-python prefers evaluate_flags.
@pytest.mark.filterwarnings("ignore:`get_feature_flag` is deprecated:DeprecationWarning")
def test_sdk_exposures_and_goals_give_exact_results(flagstaff: Server, mgmt: Api) -> None:
    experiment = _launch(mgmt)
    assert experiment["feature_flag"]["active"] is True

    py_seen = _python_visitors(flagstaff)
    js_buyers = JS_VISITORS[::2]
    js_seen = _browser_visitors(flagstaff, js_buyers)
    assert set(js_seen) == set(JS_VISITORS)
    seen = {**py_seen, **js_seen}
    assert set(seen.values()) <= {"control", "test"} and len(set(seen.values())) == 2
    buys = {d: _amount(n) for n, d in enumerate(PY_VISITORS) if n % 3 == 0}
    buys.update({d: float(JS_AMOUNT) for d in js_buyers})

    r = mgmt.get(f"/api/projects/@current/experiments/{experiment['id']}/results/")
    assert r.status_code == 200, r.text
    got = r.json()
    exposed = Counter(seen.values())
    assert got["exposures"] == {"control": exposed["control"], "test": exposed["test"]}
    assert got["multiple_variant_persons"] == 0
    funnel, revenue = got["metrics"]
    for row in [funnel["baseline"], *funnel["variant_results"]]:
        buyers = [d for d in buys if seen[d] == row["key"]]
        assert row["number_of_samples"] == exposed[row["key"]]
        assert row["sum"] == len(buyers)
    for row in [revenue["baseline"], *revenue["variant_results"]]:
        amounts = [a for d, a in buys.items() if seen[d] == row["key"]]
        assert row["sum"] == pytest.approx(sum(amounts))
        assert row["sum_squares"] == pytest.approx(sum(a * a for a in amounts))

    want = _pure_results(experiment, seen, buys)
    srm, want_srm = got["sample_ratio_mismatch"], want["sample_ratio_mismatch"]
    assert srm["observed"] == want_srm["observed"] and srm["mismatch"] == want_srm["mismatch"]
    assert srm["p_value"] == pytest.approx(want_srm["p_value"], rel=1e-9)
    for g, w in zip(got["metrics"], want["metrics"], strict=True):
        for gv, wv in zip(g["variant_results"], w["variant_results"], strict=True):
            assert gv["validation_failures"] == wv["validation_failures"]
            assert gv["chance_to_win"] is not None and 0 <= gv["chance_to_win"] <= 1
            for field in ("chance_to_win", "effect", "credible_interval"):
                assert gv[field] == pytest.approx(wv[field], rel=1e-9, abs=1e-12), field
