"""Experiments and holdouts over real HTTP: management, validation, and results computed from
events captured through the public endpoints (on the backend the run selects)."""

from __future__ import annotations

import calendar
import random
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from flagstaff.experiments.exposure import ExperimentAccumulator, ExperimentEvent, ExperimentSpec
from flagstaff.experiments.model import parse_experiment
from flagstaff.experiments.results import build_results, to_json
from tests.api.test_cli import cli
from tests.server import PROJECT_TOKEN, Api, Server

EXPERIMENTS = "/api/projects/@current/experiments/"
HOLDOUTS = "/api/projects/@current/experiment_holdouts/"
FLAGS = "/api/projects/@current/feature_flags/"
STARTED = "2024-01-01T00:00:00Z"


def _key() -> str:
    return f"exp-{uuid.uuid4().hex[:10]}"


def _error(r: httpx.Response, status: int, attr: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["detail"] and body["type"] == "validation_error", body
    assert body["attr"] == attr, body
    return body


def _funnel(uuid_: str = "m-funnel", event: str = "purchase") -> dict[str, Any]:
    return {
        "kind": "ExperimentMetric",
        "metric_type": "funnel",
        "uuid": uuid_,
        "series": [{"kind": "EventsNode", "event": event}],
    }


def _mean(uuid_: str = "m-revenue", event: str = "purchase", prop: str = "amount") -> dict:
    return {
        "kind": "ExperimentMetric",
        "metric_type": "mean",
        "uuid": uuid_,
        "source": {"kind": "EventsNode", "event": event, "math": "sum", "math_property": prop},
    }


def _create(api: Api, **fields: Any) -> dict[str, Any]:
    body = {"name": "Checkout test", "feature_flag_key": _key(), **fields}
    r = api.post(EXPERIMENTS, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def _capture(http: httpx.Client, events: list[dict[str, Any]]) -> None:
    r = http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": events})
    assert r.status_code == 200, r.text


def _exposure(key: str, distinct_id: str, variant: str, ts: str, **extra: Any) -> dict:
    return {
        "event": "$feature_flag_called",
        "distinct_id": distinct_id,
        "timestamp": ts,
        "properties": {"$feature_flag": key, "$feature_flag_response": variant, **extra},
    }


def _event(name: str, distinct_id: str, ts: str, **props: Any) -> dict[str, Any]:
    return {"event": name, "distinct_id": distinct_id, "timestamp": ts, "properties": props}


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


# management --------------------------------------------------------------------------------


def test_experiment_lifecycle_creates_and_launches_its_flag(api: Api) -> None:
    created = _create(api, metrics=[_funnel()])
    eid, flag = created["id"], created["feature_flag"]
    assert created["start_date"] is None and created["archived"] is False
    assert flag["key"] == created["feature_flag_key"] and flag["active"] is False
    variants = flag["filters"]["multivariate"]["variants"]
    assert [(v["key"], v["rollout_percentage"]) for v in variants] == [
        ("control", 50),
        ("test", 50),
    ]
    assert created["metrics"][0]["uuid"] == "m-funnel"
    # The experiment shows the variants its flag serves (PostHog's defaults here), not [].
    shown = created["parameters"]["feature_flag_variants"]
    assert [(v["key"], v["rollout_percentage"]) for v in shown] == [("control", 50), ("test", 50)]

    got = api.get(f"{EXPERIMENTS}{eid}/").json()
    assert got["id"] == eid and got["name"] == "Checkout test"
    assert eid in [e["id"] for e in api.get(EXPERIMENTS).json()["results"]]

    r = api.patch(f"{EXPERIMENTS}{eid}/", json={"description": "v2 checkout"})
    assert r.status_code == 200, r.text
    assert r.json()["description"] == "v2 checkout" and r.json()["metrics"][0]["uuid"] == "m-funnel"

    r = api.patch(f"{EXPERIMENTS}{eid}/", json={"start_date": STARTED})
    assert r.status_code == 200, r.text
    assert r.json()["start_date"].startswith("2024-01-01T00:00:00")
    assert r.json()["feature_flag"]["active"] is True
    assert api.get(f"{FLAGS}{flag['id']}/").json()["active"] is True
    # the experiment's writes to its flag are in the flag's activity log, newest first
    log = api.get(f"{FLAGS}{flag['id']}/activity/").json()["results"]
    assert [entry["activity"] for entry in log][-1] == "created"
    assert log[0]["activity"] == "updated" and not log[0]["is_system"]
    assert any(c["field"] == "active" for c in log[0]["detail"]["changes"])

    r = api.patch(f"{EXPERIMENTS}{eid}/", json={"archived": True})
    assert r.status_code == 200 and r.json()["archived"] is True

    put = {**r.json(), "name": "Checkout, replaced", "metrics": [_funnel(), _mean()]}
    r = api.client.put(f"{EXPERIMENTS}{eid}/", json=put)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "Checkout, replaced" and len(r.json()["metrics"]) == 2

    assert api.delete(f"{EXPERIMENTS}{eid}/").status_code == 204
    assert api.get(f"{EXPERIMENTS}{eid}/").status_code == 404
    assert api.get(f"{EXPERIMENTS}{eid}/results/").status_code == 404
    assert eid not in [e["id"] for e in api.get(EXPERIMENTS).json()["results"]]


def test_custom_variants_make_the_flag(api: Api) -> None:
    variants = [
        {"key": "control", "rollout_percentage": 34},
        {"key": "blue", "rollout_percentage": 33},
        {"key": "green", "rollout_percentage": 33},
    ]
    created = _create(api, parameters={"feature_flag_variants": variants}, start_date=STARTED)
    flag = created["feature_flag"]
    assert flag["active"] is True
    assert [v["key"] for v in flag["filters"]["multivariate"]["variants"]] == [
        "control",
        "blue",
        "green",
    ]
    r = api.patch(
        f"{EXPERIMENTS}{created['id']}/",
        json={"parameters": {"feature_flag_variants": [*variants[:2], variants[2] | {"key": "x"}]}},
    )
    _error(r, 400, "parameters.feature_flag_variants")


def test_an_existing_multivariate_flag_is_linked(api: Api) -> None:
    key = _key()
    variants = [
        {"key": "control", "rollout_percentage": 50},
        {"key": "new-ui", "rollout_percentage": 50},
    ]
    flag = api.create_flag(
        key=key,
        filters={
            "groups": [{"properties": [], "rollout_percentage": 100}],
            "multivariate": {"variants": variants},
        },
    )
    created = _create(api, feature_flag_key=key)
    assert created["feature_flag"]["id"] == flag["id"]
    assert [v["key"] for v in created["parameters"]["feature_flag_variants"]] == [
        "control",
        "new-ui",
    ]

    boolean = api.create_flag(key=_key(), filters={"groups": [{"rollout_percentage": 100}]})
    r = api.post(EXPERIMENTS, json={"name": "x", "feature_flag_key": boolean["key"]})
    _error(r, 400, "feature_flag_key")


@pytest.mark.parametrize(
    ("body", "attr"),
    [
        ({"feature_flag_key": "k-1"}, "name"),
        ({"name": "   ", "feature_flag_key": "k-1"}, "name"),
        ({"name": "x", "feature_flag_key": "has space"}, "feature_flag_key"),
        ({"name": "x", "feature_flag_key": "k-1", "start_date": "yesterday"}, "start_date"),
        (
            {
                "name": "x",
                "feature_flag_key": "k-1",
                "start_date": "2024-02-01T00:00:00Z",
                "end_date": "2024-01-01T00:00:00Z",
            },
            "end_date",
        ),
        (
            {
                "name": "x",
                "feature_flag_key": "k-1",
                "parameters": {"feature_flag_variants": [{"key": "a", "rollout_percentage": 100}]},
            },
            "parameters.feature_flag_variants",
        ),
        (
            {
                "name": "x",
                "feature_flag_key": "k-1",
                "metrics": [{"kind": "ExperimentMetric", "metric_type": "mean", "source": {}}],
            },
            "metrics[0].source.event",
        ),
        (
            {
                "name": "x",
                "feature_flag_key": "k-1",
                "metrics": [_mean() | {"source": {"event": "e", "math": "sum"}}],
            },
            "metrics[0].source.math_property",
        ),
        ({"name": "x", "feature_flag_key": "k-1", "holdout": 987654}, "holdout"),
        ({"name": "x", "feature_flag_key": "k-1", "stats_config": {"method": "p"}}, None),
        ([1, 2], None),
    ],
)
def test_invalid_experiments_are_rejected_naming_the_field(
    api: Api, body: Any, attr: str | None
) -> None:
    r = api.post(EXPERIMENTS, json=body)
    if attr is None:
        assert r.status_code == 400, r.text
        assert r.json()["detail"]
    else:
        _error(r, 400, attr)
    assert api.get(FLAGS + "?limit=1000").json()["results"] is not None  # nothing half-made
    assert "k-1" not in [f["key"] for f in api.get(FLAGS, params={"limit": 1000}).json()["results"]]


def test_bad_requests_on_existing_experiments(api: Api, http: httpx.Client) -> None:
    created = _create(api)
    url = f"{EXPERIMENTS}{created['id']}/"
    _error(api.patch(url, json={"feature_flag_key": "other"}), 400, "feature_flag_key")
    _error(
        api.patch(url, json={"metrics": [{"metric_type": "nope"}]}), 400, "metrics[0].metric_type"
    )
    r = api.client.patch(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "parse_error"
    assert api.get(f"{EXPERIMENTS}999999/").status_code == 404
    assert api.get(f"{EXPERIMENTS}abc/").status_code == 404
    assert http.get(EXPERIMENTS).status_code == 401


def test_holdouts_are_managed_and_written_into_experiment_flags(api: Api) -> None:
    r = api.post(HOLDOUTS, json={"name": "Global 10%", "filters": [{"rollout_percentage": 10}]})
    assert r.status_code == 201, r.text
    holdout = r.json()
    hid = holdout["id"]
    assert holdout["filters"][0]["variant"] == f"holdout-{hid}"
    assert hid in [h["id"] for h in api.get(HOLDOUTS).json()["results"]]
    assert api.get(f"{HOLDOUTS}{hid}/").json()["name"] == "Global 10%"

    created = _create(api, holdout=hid)
    assert created["holdout_id"] == hid and created["holdout"]["id"] == hid
    assert created["feature_flag"]["filters"]["holdout"] == {"id": hid, "exclusion_percentage": 10}

    r = api.patch(f"{HOLDOUTS}{hid}/", json={"filters": [{"rollout_percentage": 20}]})
    assert r.status_code == 200, r.text
    assert r.json()["filters"] == [{"rollout_percentage": 20, "variant": f"holdout-{hid}"}]
    flag = api.get(f"{FLAGS}{created['feature_flag']['id']}/").json()
    assert flag["filters"]["holdout"] == {"id": hid, "exclusion_percentage": 20.0}

    _error(api.post(HOLDOUTS, json={"name": "x", "filters": []}), 400, "filters")
    _error(
        api.post(HOLDOUTS, json={"name": "x", "filters": [{"rollout_percentage": 120}]}),
        400,
        "filters[0].rollout_percentage",
    )
    _error(api.patch(f"{HOLDOUTS}{hid}/", json={"name": ""}), 400, "name")
    _error(api.delete(f"{HOLDOUTS}{hid}/"), 400, "holdout")

    r = api.patch(f"{EXPERIMENTS}{created['id']}/", json={"holdout": None})
    assert r.status_code == 200 and r.json()["holdout_id"] is None
    assert r.json()["feature_flag"]["filters"]["holdout"] is None
    assert api.delete(f"{HOLDOUTS}{hid}/").status_code == 204
    assert api.get(f"{HOLDOUTS}{hid}/").status_code == 404


# results -----------------------------------------------------------------------------------


def _expected(definition: dict[str, Any], events: list[ExperimentEvent]) -> dict[str, Any]:
    """The results the pure modules give for the same events, in time order."""
    parsed = parse_experiment(definition)
    spec = ExperimentSpec(1, parsed)
    accumulator = ExperimentAccumulator([spec])
    accumulator.add_many(sorted(events, key=lambda e: e.timestamp_ms))
    return to_json(build_results(parsed, accumulator.summary(1)))


def test_results_count_exposed_persons_and_goals_exactly(api: Api, http: httpx.Client) -> None:
    created = _create(api, start_date=STARTED, metrics=[_funnel(), _mean()])
    key, eid = created["feature_flag_key"], created["id"]
    tag = uuid.uuid4().hex[:8]
    t0 = int(time.time() * 1000) - 600_000
    events: list[dict[str, Any]] = []
    # 6 control persons, 2 buy (amount 10 and 30); 4 test persons, 3 buy (5, 5+7, 20)
    for i in range(6):
        events.append(_exposure(key, f"c{i}-{tag}", "control", _iso(t0 + i)))
    for i in range(4):
        events.append(_exposure(key, f"t{i}-{tag}", "test", _iso(t0 + i)))
    events += [
        _event("purchase", f"c0-{tag}", _iso(t0 + 1000), amount=10),
        _event("purchase", f"c1-{tag}", _iso(t0 + 1000), amount=30),
        _event("purchase", f"t0-{tag}", _iso(t0 + 1000), amount=5),
        _event("purchase", f"t0-{tag}", _iso(t0 + 2000), amount=7),
        _event("purchase", f"t1-{tag}", _iso(t0 + 1000), amount=20),
        # before its person's exposure: does not count
        _event("purchase", f"late-{tag}", _iso(t0 - 1000), amount=99),
        _exposure(key, f"late-{tag}", "test", _iso(t0 + 500)),
        # seen with both variants: excluded and counted apart
        _exposure(key, f"both-{tag}", "control", _iso(t0 + 1)),
        _exposure(key, f"both-{tag}", "test", _iso(t0 + 2)),
        # another flag's call and an unknown variant expose nobody
        _exposure("other-flag", f"c0-{tag}", "test", _iso(t0 + 3)),
        _exposure(key, f"x-{tag}", "nonsense", _iso(t0 + 3)),
    ]
    _capture(http, events)
    # an anonymous id exposed, then identified as another exposed id: one person
    anon, user = f"anon-{tag}", f"t2-{tag}"
    _capture(http, [_exposure(key, anon, "test", _iso(t0 + 10))])
    _capture(
        http,
        [
            _event("$identify", user, _iso(t0 + 3000), **{"$anon_distinct_id": anon}),
            _event("purchase", anon, _iso(t0 + 4000), amount=1),
        ],
    )
    # a retried request (same uuids) counts once
    retry = [
        _event("purchase", f"t3-{tag}", _iso(t0 + 5000), amount=2) | {"uuid": str(uuid.uuid4())}
    ]
    _capture(http, retry)
    _capture(http, retry)

    r = api.get(f"{EXPERIMENTS}{eid}/results/")
    assert r.status_code == 200, r.text
    results = r.json()
    assert results["exposures"] == {"control": 6, "test": 5}
    assert results["multiple_variant_persons"] == 1
    funnel, mean = results["metrics"]
    assert funnel["baseline"]["number_of_samples"] == 6 and funnel["baseline"]["sum"] == 2
    test_funnel = funnel["variant_results"][0]
    assert (test_funnel["key"], test_funnel["number_of_samples"], test_funnel["sum"]) == (
        "test",
        5,
        4,
    )
    assert (mean["baseline"]["sum"], mean["baseline"]["sum_squares"]) == (40, 10**2 + 30**2)
    test_mean = mean["variant_results"][0]
    assert (test_mean["sum"], test_mean["sum_squares"]) == (35, 12**2 + 20**2 + 1**2 + 2**2)

    # a recompute from the stored events gives the same answer
    r = api.patch(f"{EXPERIMENTS}{eid}/", json={"metrics": [_mean(), _funnel()]})
    assert r.status_code == 200
    again = api.get(f"{EXPERIMENTS}{eid}/results/").json()
    assert again["metrics"][0]["baseline"]["sum"] == 40
    assert again["metrics"][1]["variant_results"][0]["sum"] == 4
    assert again["exposures"] == {"control": 6, "test": 5}


def test_results_statistics_match_the_pure_computation(api: Api, http: httpx.Client) -> None:
    definition = {
        "name": "Stats",
        "feature_flag_key": _key(),
        "start_date": STARTED,
        "metrics": [_funnel()],
        "metrics_secondary": [_mean()],
    }
    r = api.post(EXPERIMENTS, json=definition)
    assert r.status_code == 201, r.text
    created = r.json()
    key = created["feature_flag_key"]
    tag = uuid.uuid4().hex[:8]
    t0 = int(time.time() * 1000) - 600_000
    wire: list[dict[str, Any]] = []
    pure: list[ExperimentEvent] = []
    for i in range(240):
        variant = "control" if i % 2 else "test"
        did = f"p{i}-{tag}"
        buys = (i % 5 == 0) if variant == "control" else (i % 3 == 0)
        wire.append(_exposure(key, did, variant, _iso(t0 + i)))
        props = {"$feature_flag": key, "$feature_flag_response": variant}
        pure.append(ExperimentEvent(did, did, "$feature_flag_called", t0 + i, props))
        if buys:
            amount = 10 + i % 7
            wire.append(_event("purchase", did, _iso(t0 + 10_000 + i), amount=amount))
            pure.append(ExperimentEvent(did, did, "purchase", t0 + 10_000 + i, {"amount": amount}))
    _capture(http, wire)
    got = api.get(f"{EXPERIMENTS}{created['id']}/results/").json()
    want = _expected(created, pure)
    for field in ("exposures", "multiple_variant_persons", "sample_ratio_mismatch"):
        assert got[field] == want[field]
    for section in ("metrics", "metrics_secondary"):
        for g, w in zip(got[section], want[section], strict=True):
            assert g["baseline"] == w["baseline"]
            for gv, wv in zip(g["variant_results"], w["variant_results"], strict=True):
                assert gv["number_of_samples"] == wv["number_of_samples"]
                assert gv["sum"] == wv["sum"] and gv["sum_squares"] == wv["sum_squares"]
                assert gv["chance_to_win"] == pytest.approx(wv["chance_to_win"], abs=1e-9)
                assert gv["credible_interval"] == pytest.approx(wv["credible_interval"])
                assert 0 <= gv["chance_to_win"] <= 1
    assert got["metrics"][0]["variant_results"][0]["significant"] is not None

    r = api.patch(
        f"{EXPERIMENTS}{created['id']}/", json={"stats_config": {"method": "frequentist"}}
    )
    assert r.status_code == 200
    frequentist = api.get(f"{EXPERIMENTS}{created['id']}/results/").json()
    result = frequentist["metrics"][0]["variant_results"][0]
    assert frequentist["stats_method"] == "frequentist" and 0 <= result["p_value"] <= 1
    assert len(result["confidence_interval"]) == 2


def test_recompute_command_counts_events_that_arrived_out_of_order(tmp_path: Path) -> None:
    """Aggregates kept at ingestion drop a goal event that arrives before its person's
    exposure; `flagstaff experiments recompute` reads the events in time order."""
    data = tmp_path / "d"
    srv = Server(data_dir=data).start()
    try:
        api = Api(srv.url)
        created = _create(api, start_date=STARTED, metrics=[_funnel()])
        key, eid = created["feature_flag_key"], created["id"]
        t0 = int(time.time() * 1000) - 600_000
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            _capture(http, [_event("purchase", "u1", _iso(t0 + 200))])
            _capture(http, [_exposure(key, "u1", "test", _iso(t0 + 100))])
            _capture(http, [_exposure(key, "u2", "control", _iso(t0 + 100))])
        before = api.get(f"{EXPERIMENTS}{eid}/results/").json()
        assert before["exposures"] == {"control": 1, "test": 1}
        assert before["metrics"][0]["variant_results"][0]["sum"] == 0

        extra = ["--database-url", srv.database_url] if srv.database_url else []
        r = cli(data, "experiments", "recompute", "--experiment", str(eid), *extra)
        assert r.returncode == 0, r.stderr
        assert f"experiment {eid}: 3 events read" in r.stdout

        after = api.get(f"{EXPERIMENTS}{eid}/results/").json()
        assert after["exposures"] == {"control": 1, "test": 1}
        assert after["metrics"][0]["variant_results"][0]["sum"] == 1
        r = cli(data, "experiments", "recompute", "--experiment", "424242", *extra)
        assert r.returncode != 0 and "no experiment with id 424242" in r.stderr
    finally:
        srv.stop()


def test_sequential_corrected_results_agree_with_gbstats_end_to_end(
    api: Api, http: httpx.Client
) -> None:
    """Events through /batch/, results through the API, against gbstats 0.8.0 and statsmodels
    on summary statistics the test computes from the same events."""
    from gbstats.frequentist.tests import (
        FrequentistConfig,
        SequentialConfig,
        SequentialTwoSidedTTest,
        TwoSidedTTest,
    )
    from gbstats.models import statistics as gb
    from statsmodels.stats.multitest import multipletests

    ratio = {
        "kind": "ExperimentMetric",
        "metric_type": "ratio",
        "uuid": "m-per-view",
        "numerator": {"event": "purchase", "math": "sum", "math_property": "amount"},
        "denominator": {"event": "$pageview"},
    }
    created = _create(
        api,
        start_date=STARTED,
        metrics=[_funnel()],
        metrics_secondary=[_mean(), ratio],
        stats_config={
            "method": "frequentist",
            "sequential": True,
            "sequential_tuning_parameter": 2000,
            "multiple_testing_correction": "holm",
        },
    )
    key, tag = created["feature_flag_key"], uuid.uuid4().hex[:8]
    t0 = int(time.time() * 1000) - 600_000
    wire: list[dict[str, Any]] = []
    persons: dict[str, list[tuple[float, float, float, float]]] = {"control": [], "test": []}
    for i in range(400):
        variant = "control" if i % 2 else "test"
        did = f"q{i}-{tag}"
        wire.append(_exposure(key, did, variant, _iso(t0 + i)))
        buys = i % 3 if variant == "test" else (i % 5) // 2
        views = 1 + i % 4
        amounts = [10.0 + (i + b) % 7 for b in range(buys)]
        for b, amount in enumerate(amounts):
            wire.append(_event("purchase", did, _iso(t0 + 10_000 + i * 10 + b), amount=amount))
        for v in range(views):
            wire.append(_event("$pageview", did, _iso(t0 + 20_000 + i * 10 + v)))
        persons[variant].append((float(buys > 0), sum(amounts), sum(amounts), float(views)))
    _capture(http, wire)
    got = api.get(f"{EXPERIMENTS}{created['id']}/results/").json()
    assert got["stats_config_applied"]["sequential"] is True
    assert got["stats_config_applied"]["multiple_testing_correction"] == "holm"

    def stats(variant: str, column: int) -> tuple[int, float, float]:
        xs = [p[column] for p in persons[variant]]
        return len(xs), sum(xs), sum(x * x for x in xs)

    def reference(kind: str, variant: str) -> object:
        if kind == "funnel":
            n, s, _ = stats(variant, 0)
            return gb.ProportionStatistic(n=n, sum=s)
        if kind == "mean":
            n, s, q = stats(variant, 1)
            return gb.SampleMeanStatistic(n=n, sum=s, sum_squares=q)
        n, ms, mq = stats(variant, 2)
        _, ds, dq = stats(variant, 3)
        product = sum(p[2] * p[3] for p in persons[variant])
        return gb.RatioStatistic(
            n=n,
            m_statistic=gb.SampleMeanStatistic(n=n, sum=ms, sum_squares=mq),
            d_statistic=gb.SampleMeanStatistic(n=n, sum=ds, sum_squares=dq),
            m_d_sum_of_products=product,
        )

    config = SequentialConfig(alpha=0.05, sequential_tuning_parameter=2000)
    tested = []
    for metric in [*got["metrics"], *got["metrics_secondary"]]:
        (variant,) = metric["variant_results"]
        kind = metric["metric_type"]
        expected = SequentialTwoSidedTTest(
            reference(kind, "control"),  # type: ignore[arg-type]
            reference(kind, "test"),  # type: ignore[arg-type]
            config,
        ).compute_result()
        assert variant["sequential"] is True
        assert variant["p_value"] == pytest.approx(expected.p_value, abs=1e-6, rel=1e-6)
        assert variant["confidence_interval"] == pytest.approx(expected.ci, abs=1e-6, rel=1e-6)
        tested.append(variant)
    assert {m["metric_type"] for m in got["metrics"] + got["metrics_secondary"]} == {
        "funnel",
        "mean",
        "ratio",
    }
    holm = multipletests([v["p_value"] for v in tested], method="holm")[1]
    for variant, adjusted in zip(tested, holm, strict=True):
        assert variant["p_value_adjusted"] == pytest.approx(adjusted, abs=1e-12)
        assert variant["significant"] == (adjusted < 0.05)
    size = got["metrics"][0]["sample_size"]
    assert size["minimum_detectable_effect"] == 0.05 and size["per_variant"] > 200

    # the same events read fixed-horizon at PostHog's frequentist.alpha 0.1, with BH
    fixed = {
        "method": "frequentist",
        "frequentist": {"alpha": 0.1},
        "multiple_testing_correction": "benjamini_hochberg",
    }
    r = api.patch(f"{EXPERIMENTS}{created['id']}/", json={"stats_config": fixed})
    assert r.status_code == 200, r.text
    got = api.get(f"{EXPERIMENTS}{created['id']}/results/").json()
    assert got["stats_config_applied"]["alpha"] == 0.1
    tested = []
    for metric in [*got["metrics"], *got["metrics_secondary"]]:
        (variant,) = metric["variant_results"]
        kind = metric["metric_type"]
        expected = TwoSidedTTest(
            reference(kind, "control"),  # type: ignore[arg-type]
            reference(kind, "test"),  # type: ignore[arg-type]
            FrequentistConfig(alpha=0.1),
        ).compute_result()
        assert variant["sequential"] is False
        assert variant["p_value"] == pytest.approx(expected.p_value, abs=1e-6, rel=1e-6)
        assert variant["confidence_interval"] == pytest.approx(expected.ci, abs=1e-6, rel=1e-6)
        tested.append(variant)
    bh = multipletests([v["p_value"] for v in tested], method="fdr_bh")[1]
    for variant, adjusted in zip(tested, bh, strict=True):
        assert variant["p_value_adjusted"] == pytest.approx(adjusted, abs=1e-12)
        assert variant["significant"] == (adjusted < 0.1)


def test_project_stats_defaults_fill_what_a_new_experiment_leaves_out(api: Api) -> None:
    project = "/api/projects/@current/"
    r = api.patch(project, json={"experiment_stats_defaults": {"sequential": "on"}})
    _error(r, 400, "experiment_stats_defaults.sequential")
    r = api.patch(project, json={"experiment_stats_defaults": {"cuped_lookback_days": 999}})
    _error(r, 400, "experiment_stats_defaults.cuped_lookback_days")
    defaults = {"method": "frequentist", "sequential": True, "multiple_testing_correction": "holm"}
    try:
        r = api.patch(project, json={"experiment_stats_defaults": defaults})
        assert r.status_code == 200, r.text
        assert r.json()["experiment_stats_defaults"] == defaults
        assert api.get(project).json()["experiment_stats_defaults"] == defaults
        # left out: the project's default; given: the request's
        created = _create(api, stats_config={"multiple_testing_correction": "none"})
        config = created["stats_config"]
        assert (config["method"], config["sequential"]) == ("frequentist", True)
        assert config["multiple_testing_correction"] == "none"
        applied = api.get(f"{EXPERIMENTS}{created['id']}/results/").json()["stats_config_applied"]
        assert applied["sequential"] is True and applied["multiple_testing_correction"] == "none"
    finally:
        assert api.patch(project, json={"experiment_stats_defaults": None}).status_code == 200
    # without project defaults, a left-out field means what it means in PostHog
    plain = _create(api)
    applied = api.get(f"{EXPERIMENTS}{plain['id']}/results/").json()["stats_config_applied"]
    assert applied["method"] == "bayesian" and applied["sequential"] is False
    assert applied["cuped"] is False and applied["multiple_testing_correction"] == "none"
    r = api.post(
        EXPERIMENTS,
        json={"name": "x", "feature_flag_key": _key(), "stats_config": {"cuped_lookback_days": 0}},
    )
    _error(r, 400, "stats_config.cuped_lookback_days")


# CUPED covariates ------------------------------------------------------------------------


def _covariates(results: dict[str, Any]) -> dict[str, dict[str, tuple[Any, Any, Any]]]:
    """Per metric uuid and variant: (pre_sum, pre_sum_squares, pre_post_sum_product)."""
    out: dict[str, dict[str, tuple[Any, Any, Any]]] = {}
    for metric in [*results["metrics"], *results["metrics_secondary"]]:
        rows = [metric["baseline"], *metric["variant_results"]]
        out[metric["uuid"]] = {
            row["key"]: (row["pre_sum"], row["pre_sum_squares"], row["pre_post_sum_product"])
            for row in rows
        }
    return out


def _cuped_expected(
    events: list[dict[str, Any]], lookback_ms: int
) -> dict[str, dict[str, tuple[float, float, float]]]:
    """The covariates from the events sent: per person, x over the window before their first
    exposure and y from it on, for the revenue mean and the purchase funnel."""
    exposed: dict[str, tuple[int, str]] = {}
    purchases: dict[str, list[tuple[int, float]]] = {}
    for e in events:
        ms = _ms(e["timestamp"])
        if e["event"] == "$feature_flag_called":
            variant = e["properties"]["$feature_flag_response"]
            exposed[e["distinct_id"]] = min(
                exposed.get(e["distinct_id"], (ms, variant)), (ms, variant)
            )
        else:
            purchases.setdefault(e["distinct_id"], []).append((ms, e["properties"]["amount"]))
    want: dict[str, dict[str, tuple[float, float, float]]] = {
        uuid_: {"control": (0, 0, 0), "test": (0, 0, 0)} for uuid_ in ("m-revenue", "m-funnel")
    }
    for person, (at, variant) in exposed.items():
        mine = purchases.get(person, [])
        before = [amount for ms, amount in mine if at - lookback_ms <= ms < at]
        after = [amount for ms, amount in mine if ms >= at]
        for uuid_, x, y in (
            ("m-revenue", sum(before), sum(after)),
            ("m-funnel", float(bool(before)), float(bool(after))),
        ):
            s, s2, sxy = want[uuid_][variant]
            want[uuid_][variant] = (s + x, s2 + x * x, sxy + x * y)
    return want


def _ms(iso: str) -> int:
    """The milliseconds of an :func:`_iso` timestamp."""
    return calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) * 1000 + int(iso[20:23])


def test_cuped_covariates_collected_at_ingestion_and_by_turning_it_on(
    api: Api, http: httpx.Client
) -> None:
    """History before each person's first exposure (some before the experiment's start,
    some outside the window), exposures, purchases after them; CUPED turned on later
    rebuilds from the stored events, then late events of the windows and new persons are
    added at ingestion."""
    hour = 3_600_000
    t0 = int(time.time() * 1000) - 600_000
    created = _create(
        api,
        start_date=_iso(t0 - hour),
        metrics=[_mean(), _funnel()],
        metrics_secondary=[
            {
                "kind": "ExperimentMetric",
                "metric_type": "ratio",
                "uuid": "m-ratio",
                "numerator": {"kind": "EventsNode", "event": "purchase"},
                "denominator": {"kind": "EventsNode", "event": "$pageview"},
            }
        ],
    )
    key, eid = created["feature_flag_key"], created["id"]
    tag = uuid.uuid4().hex[:8]
    rng = random.Random(38)
    history, exposures, late = [], [], []
    for i in range(30):
        did, variant, at = f"cu{i}-{tag}", ("control", "test")[i % 2], t0 + i * 1000
        exposures.append(_exposure(key, did, variant, _iso(at)))
        for _ in range(rng.randint(0, 4)):  # up to two days before: some outside the window
            when = at - rng.randint(1, 48 * hour)
            history.append(_event("purchase", did, _iso(when), amount=rng.randint(1, 40)))
        for _ in range(rng.randint(0, 2)):
            when = at + rng.randint(0, 60_000)
            exposures.append(_event("purchase", did, _iso(when), amount=rng.randint(1, 40)))
        if i % 3 == 0:  # arrives after the exposure, inside the window
            late.append(_event("purchase", did, _iso(at - rng.randint(1, 23 * hour)), amount=i))
    _capture(http, history)
    _capture(http, exposures)
    sent = history + exposures
    off = _covariates(api.get(f"{EXPERIMENTS}{eid}/results/").json())
    assert off["m-revenue"]["test"] == (None, None, None)  # not collected

    r = api.patch(f"{EXPERIMENTS}{eid}/", json={"stats_config": {"cuped": True}})
    assert r.status_code == 200, r.text
    results = api.get(f"{EXPERIMENTS}{eid}/results/").json()
    want = _cuped_expected(sent, 14 * 24 * hour)  # the default lookback
    assert {u: _covariates(results)[u] for u in want} == want

    r = api.patch(
        f"{EXPERIMENTS}{eid}/", json={"stats_config": {"cuped": True, "cuped_lookback_days": 1}}
    )
    assert r.status_code == 200, r.text
    want = _cuped_expected(sent, 24 * hour)
    assert {u: _covariates(api.get(f"{EXPERIMENTS}{eid}/results/").json())[u] for u in want} == want
    # late events of the windows; a new person with history, exposed in the same request
    newcomer = f"cu-new-{tag}"
    more = [
        *late,
        _event("purchase", newcomer, _iso(t0 - 2 * hour), amount=11),  # before the start
        _exposure(key, newcomer, "test", _iso(t0 + 90_000)),
        _event("purchase", newcomer, _iso(t0 + 95_000), amount=5),
    ]
    _capture(http, more)
    sent += more
    results = api.get(f"{EXPERIMENTS}{eid}/results/").json()
    got = _covariates(results)
    want = _cuped_expected(sent, 24 * hour)
    assert {u: got[u] for u in want} == want
    assert got["m-ratio"]["test"] == (None, None, None)  # ratios are not adjusted
    assert want["m-revenue"]["test"][0] > 0 and want["m-funnel"]["control"][0] > 0
    r = api.patch(f"{EXPERIMENTS}{eid}/", json={"stats_config": {"cuped_lookback_days": 0}})
    assert _error(r, 400, "stats_config.cuped_lookback_days")


def test_cuped_results_agree_with_gbstats_end_to_end(api: Api, http: httpx.Client) -> None:
    """Each person's purchases in the 14 days before their exposure (some before the start)
    and after it, through /batch/; the CUPED results through the API against gbstats 0.8.0's
    regression-adjusted tests on the per-person values the test computes from the same events,
    fixed-horizon and then sequential."""
    from gbstats.frequentist.tests import (
        FrequentistConfig,
        SequentialConfig,
        SequentialTwoSidedTTest,
        TwoSidedTTest,
    )
    from gbstats.models import statistics as gb

    hour, day = 3_600_000, 86_400_000
    t0 = int(time.time() * 1000) - 600_000
    created = _create(
        api,
        start_date=_iso(t0 - hour),
        metrics=[_mean(), _funnel()],
        stats_config={"method": "frequentist", "cuped": True},
    )
    key, eid, tag = created["feature_flag_key"], created["id"], uuid.uuid4().hex[:8]
    rng = random.Random(3838)
    wire: list[dict[str, Any]] = []
    # per variant, per person: (pre revenue, post revenue, bought before, bought after)
    persons: dict[str, list[tuple[float, float, float, float]]] = {"control": [], "test": []}
    for i in range(240):
        variant = ("control", "test")[i % 2]
        did, at = f"cg{i}-{tag}", t0 + i * 500
        habit = rng.randint(0, 3)  # what a person buys before predicts what they buy after
        pre = [float(rng.randint(5, 30)) for _ in range(rng.randint(0, habit + 1))]
        post = [
            float(rng.randint(5, 30) + (4 if variant == "test" else 0))
            for _ in range(rng.randint(0, habit + 1))
        ]
        for amount in pre:  # inside the window, some days before the experiment started
            wire.append(_event("purchase", did, _iso(at - rng.randint(1, 13 * day)), amount=amount))
        wire.append(_event("purchase", did, _iso(at - 15 * day), amount=99))  # outside it
        wire.append(_exposure(key, did, variant, _iso(at)))
        for k, amount in enumerate(post):
            wire.append(_event("purchase", did, _iso(at + 1_000 + k), amount=amount))
        persons[variant].append((sum(pre), sum(post), float(bool(pre)), float(bool(post))))
    _capture(http, wire)

    def group(variant: str, funnel: bool) -> gb.RegressionAdjustedStatistic:
        rows = persons[variant]
        pre = [r[2] if funnel else r[0] for r in rows]
        post = [r[3] if funnel else r[1] for r in rows]
        n = len(rows)
        pre_stat: Any
        post_stat: Any
        if funnel:
            pre_stat, post_stat = (
                gb.ProportionStatistic(n=n, sum=sum(pre)),
                gb.ProportionStatistic(n=n, sum=sum(post)),
            )
        else:
            pre_stat = gb.SampleMeanStatistic(
                n=n, sum=sum(pre), sum_squares=sum(x * x for x in pre)
            )
            post_stat = gb.SampleMeanStatistic(
                n=n, sum=sum(post), sum_squares=sum(y * y for y in post)
            )
        return gb.RegressionAdjustedStatistic(
            n=n,
            post_statistic=post_stat,
            pre_statistic=pre_stat,
            post_pre_sum_of_products=sum(x * y for x, y in zip(pre, post, strict=True)),
            theta=0,
        )

    def check(results: dict[str, Any], sequential: bool) -> None:
        assert results["stats_config_applied"]["cuped"] is True
        assert results["stats_config_applied"]["sequential"] is sequential
        for metric in results["metrics"]:
            funnel = metric["metric_type"] == "funnel"
            control, test = group("control", funnel), group("test", funnel)
            expected = (
                SequentialTwoSidedTTest(control, test, SequentialConfig())
                if sequential
                else TwoSidedTTest(control, test, FrequentistConfig())
            ).compute_result()
            (variant,) = metric["variant_results"]
            assert 0 < variant["cuped_variance_reduction"] < 1
            assert variant["p_value"] == pytest.approx(expected.p_value, abs=1e-6, rel=1e-6)
            assert variant["confidence_interval"] == pytest.approx(expected.ci, abs=1e-6, rel=1e-6)

    check(api.get(f"{EXPERIMENTS}{eid}/results/").json(), sequential=False)
    r = api.patch(
        f"{EXPERIMENTS}{eid}/",
        json={"stats_config": {"method": "frequentist", "cuped": True, "sequential": True}},
    )
    assert r.status_code == 200, r.text
    check(api.get(f"{EXPERIMENTS}{eid}/results/").json(), sequential=True)
