"""Flag usage without storage: the rule of what a check counts for, the tallies a batch and a
recompute make, the console's view of the rollup, and the SVG charts drawn from it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import msgspec
import pytest

from flagstaff.application import flag_usage
from flagstaff.common.units import DAY_MS
from flagstaff.console import usage, views
from flagstaff.console import usage_charts as charts
from flagstaff.ingest.flag_usage import (
    MAX_VALUE_LENGTH,
    NO_RESPONSE,
    Tally,
    check_of,
    day_of,
    response_text,
    tally,
)
from flagstaff.store.flag_usage import (
    BatchChecks,
    Check,
    DailyChecks,
    ValueChecks,
    batch_checks,
    recompute_tally,
)
from tests.events import T0, event

SVG = "{http://www.w3.org/2000/svg}"
NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z
TODAY = NOW // DAY_MS
EVIL = '<script>alert("x")</script>&'


# the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (False, "false"),
        (None, NO_RESPONSE),
        ("control", "control"),
        (3, "3"),
        ({"a": 1}, '{"a":1}'),
        ("x" * 500, "x" * MAX_VALUE_LENGTH),
    ],
)
def test_response_text(value: Any, text: str) -> None:
    assert response_text(value) == text


def test_what_counts_as_a_check() -> None:
    called = "$feature_flag_called"
    assert check_of(called, {"$feature_flag": "beta", "$feature_flag_response": True}) == (
        "beta",
        "true",
    )
    assert check_of(called, {"$feature_flag": "beta"}) == ("beta", NO_RESPONSE)
    assert check_of("$pageview", {"$feature_flag": "beta"}) is None
    for key in ("", 7, None, ["beta"], "k" * 401):
        assert check_of(called, {"$feature_flag": key}) is None
    assert check_of(called, {"$feature_flag": "k" * 400}) == ("k" * 400, NO_RESPONSE)


def test_days_are_utc_days() -> None:
    midnight = 20_000 * DAY_MS
    assert day_of(midnight) == 20_000
    assert day_of(midnight - 1) == 19_999
    assert day_of(midnight + DAY_MS - 1) == 20_000
    assert day_of(-1) == -1


def test_a_tally_adds_up_per_key_day_and_value_in_sorted_rows() -> None:
    t = tally(
        [
            ("b", "true", T0 + 5),
            ("a", "false", T0),
            ("b", "true", T0 + 2),
            ("b", "true", T0 + DAY_MS),
            ("b", "false", T0 + 1),
        ]
    )
    day = T0 // DAY_MS
    assert t.rows() == [
        ("a", day, "false", 1, T0),
        ("b", day, "false", 1, T0 + 1),
        ("b", day, "true", 2, T0 + 5),
        ("b", day + 1, "true", 1, T0 + DAY_MS),
    ]
    assert len(t) == 4


def _check(key: str, value: Any, uid: str | None = None, ts: int = T0) -> Any:
    props = {"$feature_flag": key, "$feature_flag_response": value}
    return event("$feature_flag_called", "u", props=props, uid=uid, ts=ts)


def test_a_batch_finds_its_checks_and_counts_each_uuid_once() -> None:
    events = [
        _check("a", True, "u1"),
        event("$pageview", "u"),
        _check("a", True, "u1"),  # repeated in the batch: stored once
        _check("a", "x", "u2"),
        _check("", True, "u3"),
    ]
    found = batch_checks(events)
    assert found is not None
    assert found.checks == [
        Check("u1", "a", "true", T0),
        Check("u1", "a", "true", T0),
        Check("u2", "a", "x", T0),
    ]
    day = T0 // DAY_MS
    assert found.tally.rows() == [("a", day, "true", 1, T0), ("a", day, "x", 1, T0)]
    assert found.fresh_tally({"u2"}).rows() == [("a", day, "x", 1, T0)]
    assert found.fresh_tally(set()).rows() == []
    assert batch_checks([event("$pageview", "u")]) is None


def test_recompute_reads_json_and_skips_what_is_not_a_check() -> None:
    rows = [
        (b'{"$feature_flag": "a", "$feature_flag_response": "test"}', T0),
        ('{"$feature_flag": "a", "$feature_flag_response": "test"}', T0 + 9),
        (b'{"$feature_flag": ""}', T0),
        (b"[1, 2]", T0),
    ]
    into = Tally()
    assert recompute_tally(rows, into) == 4
    assert into.rows() == [("a", T0 // DAY_MS, "test", 2, T0 + 9)]


def test_batch_checks_tally_is_computed_once() -> None:
    checks = BatchChecks([Check("u1", "a", "true", T0)])
    assert checks.tally is checks.tally


# the console's view -------------------------------------------------------------------------


def test_usage_by_flag_covers_the_window_and_older_last_checks() -> None:
    first = flag_usage.first_day(NOW)
    assert first == TODAY - 29
    rows = [
        DailyChecks("a", first - 1, 100, (first - 1) * DAY_MS),  # before the window
        DailyChecks("a", first, 3, first * DAY_MS + 1),
        DailyChecks("a", TODAY, 27, NOW - 5),
        DailyChecks("b", TODAY, 1, NOW - 9),
    ]
    got = usage.usage_by_flag(rows, {"old": NOW - 90 * DAY_MS}, NOW)
    assert got["a"].checks_per_day == 1.0
    assert got["a"].last_seen_ms == NOW - 5
    assert got["a"].daily[0] == 3 and got["a"].daily[-1] == 27 and sum(got["a"].daily) == 30
    assert len(got["b"].daily) == flag_usage.WINDOW_DAYS
    assert got["old"] == views.FlagUsage(0.0, NOW - 90 * DAY_MS, ())
    flag = {"id": 1, "key": "old", "active": True, "created_at": "2020-01-01T00:00:00Z"}
    assert views.stale_reason(flag, got["old"], NOW) == "not checked for 30 days"


def test_flag_checks_orders_variants_then_booleans_then_the_rest() -> None:
    rows = [
        ValueChecks(TODAY, "", 1, NOW - 1),
        ValueChecks(TODAY, "zeta", 2, NOW - 2),
        ValueChecks(TODAY, "false", 3, NOW - 3),
        ValueChecks(TODAY - 1, "test", 4, NOW - DAY_MS),
        ValueChecks(TODAY - 40, "test", 99, NOW - 40 * DAY_MS),  # outside the window
    ]
    got = flag_usage.flag_checks(rows, NOW, ["test", "control"])
    assert [s.value for s in got.series] == ["test", "control", "false", "zeta", ""]
    assert [s.label for s in got.series][-1] == "no value"
    assert got.series[1].counts == [0] * 30  # a variant never checked still shows
    assert got.series[0].counts[-2:] == [4, 0]
    assert got.total == 10 and got.last_seen_ms == NOW - 1
    assert got.day_labels()[-1] == "2027-01-15"
    assert got.day_totals()[-1] == 6
    assert [(s.value, round(share, 2)) for _, s, share in got.shares()] == [
        ("test", 0.4),
        ("false", 0.3),
        ("zeta", 0.2),
        ("", 0.1),
    ]
    assert [i for i, _, _ in got.shares()] == [0, 2, 3, 4]  # colour of each value kept


def test_variant_keys() -> None:
    filters = {"multivariate": {"variants": [{"key": "a"}, {"key": "b"}]}}
    assert flag_usage.variant_keys(filters) == ["a", "b"]
    assert flag_usage.variant_keys({}) == []


# charts ---------------------------------------------------------------------------------


def _svg(markup: str) -> ET.Element:
    root = ET.fromstring(str(markup))
    assert root.tag == SVG + "svg"
    assert root.get("role") == "img"
    title, desc = root[0], root[1]
    assert title.tag == SVG + "title" and desc.tag == SVG + "desc"
    assert root.get("aria-labelledby") == f"{title.get('id')} {desc.get('id')}"
    return root


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(SVG + "text")]


def test_stacked_bars_are_accessible_scaled_and_escaped() -> None:
    labels = [f"2027-01-{d:02d}" for d in range(1, 11)]
    series = [("control", [1, 2, 3, 0, 0, 0, 0, 0, 0, 10]), (EVIL, [1, 0, 0, 0, 0, 0, 0, 0, 0, 5])]
    root = _svg(
        charts.stacked_bars(
            "c1", f"Checks of {EVIL}", "desc", labels, series, x_title="Day", y_title="Checks"
        )
    )
    assert root[0].text == f"Checks of {EVIL}"
    bars = [r for r in root.iter(SVG + "rect") if r.find(SVG + "title") is not None]
    assert len(bars) == 6  # zero segments are not drawn
    tips = [r.find(SVG + "title").text for r in bars]  # type: ignore[union-attr]
    assert "2027-01-10, control: 10" in tips and f"2027-01-10, {EVIL}: 5" in tips
    heights = {t: float(r.get("height", 0)) for t, r in zip(tips, bars, strict=True)}
    assert heights["2027-01-10, control: 10"] == pytest.approx(
        2 * heights[f"2027-01-10, {EVIL}: 5"]
    )
    texts = _texts(root)
    assert {"Day", "Checks", "0", "15"} <= set(texts)  # axis titles, ticks up to 15
    assert "01-10" in texts and "01-03" in texts  # every 7th day back from the last
    assert EVIL in texts  # the legend (two series)
    assert "<script>" not in str(
        charts.stacked_bars("c", EVIL, EVIL, labels, series, x_title=EVIL, y_title=EVIL)
    )


def test_stacked_bars_of_nothing_still_draw_axes() -> None:
    root = _svg(
        charts.stacked_bars("c", "t", "d", ["2027-01-01"], [("x", [0])], x_title="D", y_title="C")
    )
    assert [r for r in root.iter(SVG + "rect")] == []
    assert "0" in _texts(root) and "1" in _texts(root)


@pytest.mark.parametrize(("top", "step"), [(0, 1), (3, 1), (7, 2), (15, 5), (1500, 500)])
def test_nice_steps(top: int, step: int) -> None:
    assert charts.nice_step(top) == step


def test_sparkline_scales_to_its_peak() -> None:
    root = _svg(charts.sparkline("s", [0, 5, 10], "Checks", "desc", width=104, height=24))
    points = root.find(SVG + "polyline").get("points").split()  # type: ignore[union-attr]
    assert points == ["2.0,22.0", "52.0,12.0", "102.0,2.0"]
    flat = _svg(charts.sparkline("s", [0, 0], "t", "d", width=104, height=24))
    assert flat.find(SVG + "polyline").get("points") == "2.0,22.0 102.0,22.0"  # type: ignore[union-attr]


def test_share_bars_are_proportional_and_keep_colours() -> None:
    root = _svg(
        charts.share_bars(
            "s", "t", "d", [("test", 30, 0.75, 2), (EVIL, 10, 0.25, 0)], x_title="Share"
        )
    )
    bars = [r for r in root.iter(SVG + "rect")]
    assert float(bars[0].get("width", 0)) == pytest.approx(3 * float(bars[1].get("width", 0)))
    assert bars[0].get("fill") == charts.colour(2) and bars[1].get("fill") == charts.colour(0)
    assert {"75.0% (30)", "25.0% (10)", "0%", "50%", "100%", "Share"} <= set(_texts(root))


def test_flag_charts_and_sparkline_of_a_row() -> None:
    rows = [ValueChecks(TODAY, "control", 3, NOW), ValueChecks(TODAY, "test", 1, NOW)]
    drawn = usage.flag_charts(EVIL, flag_usage.flag_checks(rows, NOW, ["control", "test"]))
    timeline = _svg(drawn.timeline)
    assert timeline[0].text == f"Checks of {EVIL} per day, last 30 days"
    assert timeline[1].text == ("4 checks from 2026-12-17 to 2027-01-15 (UTC): control 3; test 1.")
    assert drawn.split is not None
    assert _svg(drawn.split)[1].text == "control 75.0% (3); test 25.0% (1)."
    single = usage.flag_charts("k", flag_usage.flag_checks(rows[:1], NOW))
    assert single.split is None
    row = views.FlagRow(1, "k", "", True, views.FlagType.BOOLEAN, [], "", 0.1, None, None, (0, 2))
    spark = _svg(usage.sparkline(row))
    assert spark[1].text == "2 checks in the last 30 days, at most 2 a day."
    empty = _svg(usage.sparkline(msgspec.structs.replace(row, daily=())))
    assert empty[1].text == "No checks in the last 30 days."
    assert len(empty.find(SVG + "polyline").get("points").split()) == 30  # type: ignore[union-attr]
    assert re.fullmatch(r"spark-1-title", spark[0].get("id", ""))


# the console's pages --------------------------------------------------------------------------


def test_pages_show_the_sparkline_and_the_charts() -> None:
    from tests.unit.test_console import FULL_FLAG, _client, _data, _login
    from tests.unit.test_console import NOW as PAGE_NOW

    data = _data()
    today = PAGE_NOW // DAY_MS
    data.usage = {
        "checkout-v2": views.FlagUsage(1.0, PAGE_NOW - 5, tuple([0] * 29 + [30])),
    }
    data.checks = {
        "checkout-v2": [
            ValueChecks(today, "true", 20, PAGE_NOW - 5),
            ValueChecks(today - 1, "false", 10, PAGE_NOW - DAY_MS),
        ]
    }
    client, _, _ = _client(data=data)
    _login(client)
    listing = client.get("/feature_flags")
    assert listing.status_code == 200
    sparks = re.findall(r"<svg[^>]*class=\"chart spark\".*?</svg>", listing.text, re.S)
    assert len(sparks) == 2  # one per flag, drawn even without checks
    assert "30 checks in the last 30 days, at most 30 a day." in listing.text
    assert "No checks in the last 30 days." in listing.text
    editor = client.get(f"/feature_flags/{FULL_FLAG['id']}")
    assert editor.status_code == 200
    page = editor.text
    assert '<h2 id="usage-heading">Usage</h2>' in page
    assert "30 checks in the last 30 days" in page
    titles = re.findall(r'<title id="(flag-[a-z]+)-title">([^<]*)</title>', page)
    assert [t[0] for t in titles] == ["flag-checks", "flag-split"]
    assert "Checks of checkout-v2 per day, last 30 days" in titles[0][1]
    assert "true 66.7% (20); false 33.3% (10)." in page
    assert "<summary>Checks per day as a table</summary>" in page
    assert client.get("/feature_flags/new").text.count("usage-heading") == 0


def test_pages_of_a_list_keep_the_filters() -> None:
    from flagstaff.console import paging

    rows = list(range(250))
    first = paging.page_of(rows, {"search": "a b", "page": "x"})
    assert (first.number, first.pages, len(first.rows)) == (1, 3, 100)
    assert first.previous is None and first.next == "?search=a+b&page=2"
    last = paging.page_of(rows, {"page": "9", "active": "true"})
    assert (last.number, last.rows[0], len(last.rows)) == (3, 200, 50)
    assert last.previous == "?active=true&page=2" and last.next is None
    assert paging.page_of(rows, {"page": "2"}).previous == "?"
    empty = paging.page_of([], {})
    assert (empty.number, empty.pages, empty.rows) == (1, 1, [])


def test_the_flags_list_pages_but_searches_every_flag() -> None:
    from tests.unit.console_fakes import MemoryData
    from tests.unit.test_console import NOW as PAGE_NOW
    from tests.unit.test_console import _client, _flag, _login

    flags = [_flag(i, f"flag-{i:04d}") for i in range(1, 251)]
    data = MemoryData(flags)
    data.usage = {"flag-0007": views.FlagUsage(2.0, PAGE_NOW - 5, tuple([2] * 30))}
    data.usage["flag-0240"] = views.FlagUsage(1.0, PAGE_NOW - 1, tuple([1] * 30))
    client, _, _ = _client(data=data)
    _login(client)
    first = client.get("/feature_flags").text
    assert "250 of 250 flags" in first and "Page 1 of 3" in first
    assert "flag-0100" in first and "flag-0101" not in first
    assert 'href="?page=2" rel="next"' in first
    assert "60 checks in the last 30 days" in first  # flag-0007's sparkline
    third = client.get("/feature_flags?page=3").text
    assert "flag-0201" in third and "flag-0200" not in third and "Page 3 of 3" in third
    assert "30 checks in the last 30 days" in third  # flag-0240, on its own page
    found = client.get("/feature_flags?search=flag-0240").text
    assert "1 of 250 flags" in found and "Page 1" not in found and "flag-0240" in found
    stale = client.get("/feature_flags?stale=false").text  # checked lately: across pages
    assert "2 of 250 flags" in stale
    assert "flag-0007" in stale and "flag-0240" in stale
