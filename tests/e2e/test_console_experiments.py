"""Experiments in the console, in a real browser against the real server (SQLite or PostgreSQL
by ``FLAGSTAFF_TEST_BACKEND``): an editor makes and launches an experiment with two metrics
picked from the events seen; posthog-python visitors read the flag (exposures) and buy (goal
events); the page's figures are the results endpoint's, its charts are drawn; shipping "test"
makes /flags answer "test" for new persons, recorded in the flag's history. A viewer sees the
page without any action."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from posthog import Posthog

from tests.e2e.test_console_editor import (
    ADMIN_EMAIL,
    EDITOR_EMAIL,
    PASSWORD,
    VIEWER_EMAIL,
    _cli,
    _log_in,
    browser,
    page,
)
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server

__all__ = ["browser", "page"]

P = "/api/projects/@current"
FLAG = "checkout-button"
VISITORS = [f"visitor-{n}" for n in range(140)]
"""Enough for 50 exposed persons per variant, below which no statistics are computed."""
SCREENSHOTS = Path(__file__).parent / "screenshots"


def screenshot(page: Any, name: str) -> None:
    """Write the page as PNG into the git-ignored screenshots folder."""
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


class Seeded:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.url = server.url
        self.api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"}, timeout=30
        )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    server = Server(
        tmp_path_factory.mktemp("experiments-console") / "data",
        env={"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD},
    ).start()
    try:
        for email, role in ((EDITOR_EMAIL, "editor"), (VIEWER_EMAIL, "viewer")):
            _cli(server, "user", "create", "--email", email, "--password", PASSWORD, "--role", role)
        client = Posthog(PROJECT_TOKEN, host=server.url, max_retries=0)
        client.capture("purchase", distinct_id="earlier", properties={"amount": 5})  # seen
        client.flush()
        client.shutdown()
        seeded = Seeded(server)
        _wait(lambda: _events(seeded, "purchase") >= 1)
        yield seeded
    finally:
        server.stop()


def _events(seeded: Seeded, name: str) -> int:
    answer = seeded.api.get(f"{P}/events/", params={"event": name, "limit": 1000})
    return len(answer.json()["results"])


def _wait(ready: Any, tries: int = 300) -> None:
    for _ in range(tries):
        if ready():
            return
        time.sleep(0.1)
    assert ready()


def _visit(server: Server) -> None:
    """Each visitor reads the flag (posthog-python sends $feature_flag_called); every third
    buys."""
    client = Posthog(PROJECT_TOKEN, host=server.url, max_retries=0)
    try:
        for n, distinct_id in enumerate(VISITORS):
            client.get_feature_flag(FLAG, distinct_id)
            if n % 3 == 0:
                amount = 10.0 + n % 7
                client.capture("purchase", distinct_id=distinct_id, properties={"amount": amount})
    finally:
        client.flush()
        client.shutdown()


def _check_again(server: Server, distinct_ids: list[str]) -> None:
    """A second $feature_flag_called of the same day by each of these visitors (another
    client: posthog-python reports a flag once per person and value)."""
    client = Posthog(PROJECT_TOKEN, host=server.url, max_retries=0)
    try:
        for distinct_id in distinct_ids:
            answer = httpx.post(
                f"{server.url}/flags?v=2",
                json={"api_key": PROJECT_TOKEN, "distinct_id": distinct_id},
            )
            variant = answer.json()["flags"][FLAG]["variant"]
            properties = {"$feature_flag": FLAG, "$feature_flag_response": variant}
            client.capture("$feature_flag_called", distinct_id=distinct_id, properties=properties)
    finally:
        client.flush()
        client.shutdown()


def _percent(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _expected_cells(metric: dict[str, Any], variant: dict[str, Any]) -> dict[str, str]:
    """The figures the page must show for one variant, formatted from the endpoint's JSON."""
    mean = variant["mean"]
    value = f"{mean * 100:.1f}%" if metric["metric_type"] == "funnel" else f"{mean:,.2f}"
    cells = {"exposures": f"{variant['number_of_samples']:,}", "value": value}
    if variant["key"] != "control":
        cells["chance"] = f"{variant['chance_to_win'] * 100:.1f}%"
        low, high = variant["credible_interval"]
        cells["interval"] = f"{_percent(low)} to {_percent(high)}"
    return cells


@pytest.mark.filterwarnings("ignore:`get_feature_flag` is deprecated:DeprecationWarning")
def test_an_experiment_from_the_form_to_a_shipped_variant(page: Any, seeded: Seeded) -> None:
    url = seeded.url
    _log_in(page, url, EDITOR_EMAIL)
    page.get_by_role("link", name="Experiments").click()
    page.wait_for_url(f"{url}/experiments")
    page.get_by_text("No experiments yet.").wait_for()
    page.get_by_role("link", name="New experiment").click()
    page.wait_for_url(f"{url}/experiments/new")
    assert page.locator("#events-seen option[value='purchase']").count() == 1
    assert page.locator("#properties-seen option[value='amount']").count() == 1
    page.get_by_label("Name", exact=True).fill("Checkout button")
    page.get_by_label("New flag key").fill(FLAG)
    assert page.get_by_label("Variant 1 key").input_value() == "control"
    assert page.get_by_label("Variant 2 rollout %").input_value() == "50"
    page.get_by_role("button", name="Add metric").click()
    page.get_by_label("Metric 1 name").fill("Bought")
    page.get_by_label("Metric 1 type").select_option("funnel")
    page.get_by_label("Metric 1 event").fill("purchase")
    page.get_by_role("button", name="Add metric").click()
    page.get_by_label("Metric 2 name").fill("Revenue")
    page.get_by_label("Metric 2 type").select_option("mean")
    page.get_by_label("Metric 2 event").fill("purchase")
    page.get_by_label("Metric 2 aggregation").select_option("sum")
    page.get_by_label("Metric 2 property").fill("amount")
    page.get_by_label("Method").select_option("bayesian")  # the console's default: frequentist
    page.get_by_label("Launch now").check()
    page.get_by_role("button", name="Create experiment").click()
    page.wait_for_url(re.compile(r".*/experiments/\d+$"))
    experiment_id = int(page.url.rsplit("/", 1)[1])

    stored = seeded.api.get(f"{P}/experiments/{experiment_id}/").json()
    assert stored["start_date"] is not None and stored["feature_flag"]["active"] is True
    kinds = [(m["name"], m["metric_type"]) for m in stored["metrics"]]
    assert kinds == [("Bought", "funnel"), ("Revenue", "mean")]
    assert stored["metrics"][1]["source"]["math_property"] == "amount"
    page.locator("[data-too-few]").first.wait_for()  # nobody exposed yet

    _visit(seeded.server)
    _check_again(seeded.server, VISITORS[:10])
    results_url = f"{P}/experiments/{experiment_id}/results/"
    _wait(lambda: sum(seeded.api.get(results_url).json()["exposures"].values()) == 140)
    _wait(lambda: _events(seeded, "$feature_flag_called") == 150)
    buyers = len(VISITORS[::3])
    _wait(lambda: _events(seeded, "purchase") == buyers + 1)
    results = seeded.api.get(results_url).json()
    page.reload()
    assert page.locator("[data-exposed-total]").inner_text() == "140"
    for metric in results["metrics"]:
        section = page.locator(f'[data-metric-result="{metric["uuid"]}"]')
        for variant in [metric["baseline"], *metric["variant_results"]]:
            row = section.locator(f'tr[data-variant="{variant["key"]}"]')
            for cell, text in _expected_cells(metric, variant).items():
                assert row.locator(f'[data-cell="{cell}"]').inner_text() == text, (cell, variant)
        chart = section.locator("[data-delta-chart] svg")
        assert chart.locator('rect[data-variant="test"]').count() == 1
    # the lines count persons, not checks: 150 $feature_flag_called, 140 persons
    lines = page.locator("[data-exposure-chart] polyline")
    assert lines.count() == 2
    ends = {
        lines.nth(i).get_attribute("data-series"): int(lines.nth(i).get_attribute("data-last"))
        for i in range(2)
    }
    assert ends == results["exposures"] and sum(ends.values()) == 140
    assert page.locator("[data-undated]").count() == 0
    screenshot(page, "console-experiment")
    metrics = page.locator("section", has=page.locator("#metrics-heading"))
    metrics.screenshot(path=str(SCREENSHOTS / "console-experiment-metrics.png"))
    page.set_viewport_size({"width": 390, "height": 800})
    screenshot(page, "console-experiment-390")
    page.set_viewport_size({"width": 1280, "height": 800})

    # The metrics can change while it runs: a name, and a third metric (a ratio).
    page.get_by_label("Metric 1 name").fill("Bought something")
    page.get_by_role("button", name="Add metric").click()
    page.get_by_label("Metric 3 type").select_option("ratio")
    page.get_by_label("Metric 3 event").fill("purchase")
    page.get_by_label("Metric 3 aggregation").select_option("sum")
    page.get_by_label("Metric 3 property").fill("amount")
    page.get_by_label("Metric 3 denominator event").fill("purchase")
    page.get_by_role("button", name="Save metrics").click()
    page.get_by_role("heading", name=re.compile("Bought something")).wait_for()
    edited = seeded.api.get(f"{P}/experiments/{experiment_id}/").json()["metrics"]
    assert [m["uuid"] for m in edited[:2]] == [m["uuid"] for m in stored["metrics"]]
    assert edited[2]["metric_type"] == "ratio" and edited[2]["denominator"]["event"] == "purchase"

    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_label("Variant to ship to everyone").select_option("test")
    page.get_by_role("button", name="Ship variant").click()
    page.locator("[data-status]", has_text="complete").wait_for()
    flag = seeded.api.get(f"{P}/feature_flags/{stored['feature_flag']['id']}/").json()
    assert flag["filters"]["groups"] == [
        {"properties": [], "rollout_percentage": 100, "variant": "test"}
    ]

    def served(distinct_id: str) -> Any:
        answer = httpx.post(
            f"{url}/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": distinct_id}
        )
        return answer.json()["flags"][FLAG]["variant"]

    _wait(lambda: all(served(f"new-person-{n}") == "test" for n in range(20)))
    page.goto(f"{url}/feature_flags/{flag['id']}/history")
    assert EDITOR_EMAIL in page.locator("[data-flag-history]").inner_text()

    page.goto(f"{url}/experiments")
    row = page.locator(f'tr[data-experiment="{experiment_id}"]')
    assert "complete" in row.inner_text() and "140" in row.inner_text()
    screenshot(page, "console-experiments")


def test_a_viewer_sees_an_experiment_and_changes_nothing(page: Any, seeded: Seeded) -> None:
    made = seeded.api.post(
        f"{P}/experiments/", json={"name": "Viewer's view", "feature_flag_key": "viewer-view"}
    )
    assert made.status_code == 201, made.text
    _log_in(page, seeded.url, VIEWER_EMAIL)
    page.goto(f"{seeded.url}/experiments")
    assert page.get_by_role("link", name="New experiment").count() == 0
    page.get_by_role("link", name="Viewer's view").click()
    page.locator("[data-status]", has_text="draft").wait_for()
    assert page.get_by_role("button").filter(has_text=re.compile("experiment|Ship")).count() == 0
    assert page.get_by_role("button", name="Save metrics").count() == 0
    page.goto(f"{seeded.url}/experiments/new")
    assert page.get_by_role("heading", name="No access").is_visible()


def test_the_nav_holds_one_line_at_1280_px_and_the_favicon_answers(
    page: Any, seeded: Seeded
) -> None:
    page.set_viewport_size({"width": 1280, "height": 800})
    _log_in(page, seeded.url, ADMIN_EMAIL)  # an admin's nav is the longest (Webhooks)
    links = page.get_by_role("navigation", name="Main").get_by_role("link")
    assert links.count() == 13
    tops = {round(links.nth(i).bounding_box()["y"]) for i in range(links.count())}
    assert len(tops) == 1, tops  # one row, no label broken over two lines
    heights = {round(links.nth(i).bounding_box()["height"]) for i in range(links.count())}
    assert len(heights) == 1, heights
    icon = httpx.get(f"{seeded.url}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def test_the_form_starts_trusted_and_the_page_decides(page: Any, seeded: Seeded) -> None:
    """The new-experiment form starts with sequential testing, CUPED over 14 days and Holm;
    the page shows the inference, always-valid intervals, adjusted p-values, the guardrails'
    state and the decision panel (here: stop, a guardrail is harmed)."""
    url = seeded.url
    _log_in(page, url, EDITOR_EMAIL)
    page.goto(f"{url}/experiments/new")
    assert page.get_by_label("Method").input_value() == "frequentist"
    form = page.locator("[data-inference-options]")
    assert form.locator('input[name="sequential"]').is_checked()
    assert form.locator('input[name="cuped"]').is_checked()
    assert page.get_by_label("CUPED look-back (days)").input_value() == "14"
    assert form.locator('select[name="multiple_testing_correction"]').input_value() == "holm"
    assert not form.locator('input[name="auto_stop"]').is_checked()
    assert "however often you look" in form.inner_text()  # each choice explained in a line
    key = "new-checkout"
    page.get_by_label("Name", exact=True).fill("New checkout")
    page.get_by_label("New flag key").fill(key)
    page.get_by_role("button", name="Add metric").click()
    page.get_by_label("Metric 1 name").fill("Bought")
    page.get_by_label("Metric 1 type").select_option("funnel")
    page.get_by_label("Metric 1 event").fill("purchase")
    page.get_by_label("Launch now").check()
    page.get_by_role("button", name="Create experiment").click()
    page.wait_for_url(re.compile(r".*/experiments/\d+$"))
    experiment_id = int(page.url.rsplit("/", 1)[1])
    stored = seeded.api.get(f"{P}/experiments/{experiment_id}/").json()
    config = stored["stats_config"]
    assert (config["method"], config["sequential"], config["cuped"]) == ("frequentist", True, True)
    assert config["cuped_lookback_days"] == 14 and config["multiple_testing_correction"] == "holm"

    guardrail = {
        "kind": "ExperimentMetric",
        "metric_type": "mean",
        "uuid": "errors",
        "name": "Checkout errors",
        "goal": "decrease",
        "source": {"kind": "EventsNode", "event": "checkout_error"},
    }
    patched = seeded.api.patch(
        f"{P}/experiments/{experiment_id}/", json={"metrics_guardrail": [guardrail]}
    )
    assert patched.status_code == 200, patched.text
    t0 = int(time.time() * 1000) + 500  # just after the launch: the exposures count
    events: list[dict[str, Any]] = []
    for i in range(600):
        variant = "control" if i % 2 else "test"
        did = f"shopper-{i}"
        events.append(
            {"event": "$feature_flag_called", "distinct_id": did, "timestamp": _iso(t0 + i),
             "properties": {"$feature_flag": key, "$feature_flag_response": variant}}
        )  # fmt: skip
        if i % 4 < 2:
            events.append(
                {"event": "purchase", "distinct_id": did, "timestamp": _iso(t0 + 700 + i),
                 "properties": {}}
            )  # fmt: skip
        errors = (
            3 if variant == "test" and i % 4 == 0 else int(variant == "control" and i % 10 == 1)
        )
        for e in range(errors):
            events.append(
                {"event": "checkout_error", "distinct_id": did,
                 "timestamp": _iso(t0 + 1_400 + i * 4 + e), "properties": {}}
            )  # fmt: skip
    sent = httpx.post(f"{url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": events})
    assert sent.status_code == 200, sent.text
    results_url = f"{P}/experiments/{experiment_id}/results/"
    _wait(lambda: sum(seeded.api.get(results_url).json()["exposures"].values()) == 600)
    results = seeded.api.get(results_url).json()
    assert results["decision"]["kind"] == "stop"

    page.reload()
    inference = page.locator("[data-inference]").inner_text()
    assert "sequential" in inference and "Holm-Bonferroni" in inference and "CUPED" in inference
    panel = page.locator("[data-decision]")
    assert panel.get_attribute("data-decision") == "stop"
    assert "stop: harm on a guardrail" in panel.inner_text()
    assert page.locator("[data-decision-reason]").inner_text() == results["decision"]["reason"]
    metric = page.locator(f'[data-metric-result="{stored["metrics"][0]["uuid"]}"]')
    assert metric.get_by_role("columnheader", name="Always-valid interval").count() == 1
    (variant,) = results["metrics"][0]["variant_results"]
    row = metric.locator('tr[data-variant="test"]')
    assert row.locator('[data-cell="p-value-adjusted"]').inner_text() == (
        f"{variant['p_value_adjusted']:.4f}"
    )
    guard = page.locator("[data-guardrails]")
    assert guard.locator('tr[data-variant="test"] [data-cell="guardrail"]').inner_text() == "Harmed"
    screenshot(page, "console-experiment-decision")
    # the README's picture (docs/console-experiment-decision.png) is a copy of this one
    page.locator("main").screenshot(path=str(SCREENSHOTS / "console-experiment-decision-main.png"))
