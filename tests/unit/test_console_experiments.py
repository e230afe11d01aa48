"""The experiment pages' pure parts: statuses, the figures taken from a results response, the
delta bars and the favicon."""

from __future__ import annotations

import re
import struct
from datetime import UTC, datetime, timedelta

from flagstaff.console import experiment_charts, experiment_views
from flagstaff.console.experiment_charts import Delta
from flagstaff.console.favicon import icon
from flagstaff.experiments.model import parse_experiment
from flagstaff.store.experiment_batch import ExperimentRecord

NOW = datetime(2026, 1, 10, tzinfo=UTC)


def _record(**fields: object) -> ExperimentRecord:
    definition = parse_experiment({"name": "E", "feature_flag_key": "e", **fields})
    return ExperimentRecord(1, 2, None, definition, False, False, "", "")


def test_statuses_follow_the_dates() -> None:
    assert experiment_views.status_of(_record(), NOW) == "draft"
    started = (NOW - timedelta(days=3)).isoformat()
    assert experiment_views.status_of(_record(start_date=started), NOW) == "running"
    ended = (NOW - timedelta(days=1)).isoformat()
    record = _record(start_date=started, end_date=ended)
    assert experiment_views.status_of(record, NOW) == "complete"
    assert experiment_views.status_of(_record(start_date=started, archived=True), NOW) == (
        "archived"
    )


def _variant(key: str, **fields: object) -> dict[str, object]:
    return {
        "key": key,
        "number_of_samples": 1200,
        "mean": 0.25,
        "validation_failures": [],
        **fields,
    }


def test_a_metric_shows_the_response_figures_and_a_decrease_goal_flips_the_chance() -> None:
    metric = {
        "uuid": "m",
        "name": None,
        "metric_type": "funnel",
        "goal": "decrease",
        "baseline": _variant("control"),
        "variant_results": [
            _variant(
                "test",
                mean=0.2,
                chance_to_win=0.1,
                credible_interval=[-0.3, -0.1],
                effect=-0.2,
                significant=True,
            )
        ],
        "holdout_results": [],
    }
    view = experiment_views.metric_view(0, metric)
    control, test = view.rows
    assert (control.exposures, control.value, control.significance) == (1200, "25.0%", "Baseline")
    assert test.value == "20.0%" and test.chance_to_win == "90.0%"
    assert test.interval == "-30.0% to -10.0%"
    assert test.significance == "Significant: better" and not view.too_few
    assert view.chart is not None and 'fill="#1b7f3b"' in view.chart  # green: a win


def test_too_few_samples_draws_no_chart() -> None:
    short = _variant("test", number_of_samples=3, validation_failures=["not-enough-exposures"])
    metric = {
        "uuid": "m",
        "name": "Bought",
        "metric_type": "mean",
        "goal": "increase",
        "baseline": _variant("control", number_of_samples=4),
        "variant_results": [short],
        "holdout_results": [],
    }
    view = experiment_views.metric_view(0, metric)
    assert view.too_few and view.chart is None
    assert view.rows[1].significance.startswith("Too few samples")


def test_delta_bars_place_each_interval_around_zero() -> None:
    svg = experiment_charts.delta_bars(
        "d",
        "t",
        [Delta("test", 0.1, -0.05, 0.25, False, True), Delta("b", -0.2, -0.3, -0.1, True, False)],
    )
    bars = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"[^>]*fill="(#\w+)"', svg)
    (x1, w1, c1), (x2, w2, c2) = bars
    assert c1 == experiment_charts.NEUTRAL and c2 == experiment_charts.LOSS
    zero = float(re.search(r'<line x1="([\d.]+)"[^>]*stroke="#1d1f23"', svg).group(1))
    assert float(x1) < zero < float(x1) + float(w1)  # the interval spans zero
    assert float(x2) + float(w2) < zero  # wholly below
    assert "test: +10.0% (interval -5.0% to +25.0%), not significant" in svg


def test_the_favicon_is_an_ico_of_one_32px_image() -> None:
    data = icon()
    reserved, kind, count = struct.unpack_from("<HHH", data)
    width, height, _, _, _, bits, size, offset = struct.unpack_from("<BBBBHHII", data, 6)
    assert (reserved, kind, count, width, height, bits) == (0, 1, 1, 32, 32, 32)
    assert offset + size == len(data)


def test_the_exposure_chart_draws_cumulative_unique_persons_per_variant() -> None:
    day = 86_400_000
    start = 19_000 * day
    days = {"control": {19_000: 3, 19_002: 1}, "test": {19_001: 2, 18_999: 1}}
    # from the day before the start date (an exposure before it widens it) to today
    span = experiment_views.exposure_days_span(days, start + 5, None, start + 3 * day)
    assert span == range(18_999, 19_004)
    assert experiment_views.cumulative(days["control"], span) == [0, 3, 3, 4, 4]
    days["test"] = {19_001: 2, 18_998: 1}
    span = experiment_views.exposure_days_span(days, start + 5, None, start + 3 * day)
    assert span == range(18_998, 19_004)
    assert experiment_views.cumulative(days["test"], span) == [1, 1, 1, 3, 3, 3]
    assert experiment_views.cumulative(days["test"], range(19_001, 19_003)) == [3, 3]
    ended = experiment_views.exposure_days_span({}, start, start + day, start + 9 * day)
    assert ended == range(18_999, 19_002)  # stops at the end date
    chart = str(experiment_views.exposure_chart(days, span))
    lasts = dict(re.findall(r'data-series="([^"]+)" data-last="(\d+)"', chart))
    assert lasts == {"control": "4", "test": "3"}  # each line ends at the variant's persons
    assert ">01-06<" in chart  # the first day (18,998) on the axis
    assert chart.count("<circle") == 4  # a point where a line rises: 0-3-4 and 1-3
    # years of days: drawn every few days back from the last, which ends each line
    days["test"][19_500] = 5
    long = experiment_views.exposure_days_span(days, start, None, start + 900 * day)
    drawn = str(experiment_views.exposure_chart(days, long))
    assert drawn.count("<circle") <= 4 and "drawn every 8 days" in drawn
    lasts = dict(re.findall(r'data-series="([^"]+)" data-last="(\d+)"', drawn))
    assert lasts == {"control": "4", "test": "8"}
    points = re.findall(r'<polyline points="([^"]+)"', drawn)[0].split()
    assert len(points) <= experiment_views.MAX_POINTS
