"""The workers' /flags answer cache (``server/answers.py``), from outside.

A request repeated while nothing it read has changed is answered from the cache (counted by
``flagstaff_flag_answers_reused_total``), with a new ``requestId``; a request that differs only
in what the answer depends on beyond its body (the runtime from its headers) is not; and an
answer that compared against the clock is kept only within its second. On PostgreSQL nothing
is reused (nodes cannot see each other's person writes), and the answers are the same. The
read-your-writes cases (persons, groups, static cohorts after a change) are in
``test_flag_context_cache.py`` and ``test_flags.py``, which repeat identical requests around
each change.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from tests.server import PROJECT_TOKEN, Api, Server, storage_backend

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
REUSES = storage_backend() == "sqlite"


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One worker, so every repeat lands where the first answer was kept."""
    srv = Server(data_dir=tmp_path_factory.mktemp("answers") / "data").start()
    try:
        yield srv
    finally:
        srv.stop()


def _reused(url: str) -> int:
    text = httpx.get(f"{url}/metrics").text
    match = re.search(r"^flagstaff_flag_answers_reused_total (\d+)$", text, re.M)
    assert match is not None, text
    return int(match.group(1))


def _project(url: str) -> tuple[str, Api]:
    r = Api(url).post("/api/projects/", json={"name": f"answers-{uuid.uuid4().hex[:8]}"})
    assert r.status_code == 201, r.text
    body = r.json()
    return body["api_token"], Api(url, body["personal_api_key"])


def _flag(api: Api, token: str, key: str, **fields: object) -> None:
    api.create_flag(key=key, **fields)
    for _ in range(100):
        r = api.get(f"/flags/definitions?token={token}")
        if key in {f["key"] for f in r.json()["flags"]}:
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} never became visible")


def _flags(url: str, body: dict[str, object], **headers: str) -> dict[str, object]:
    r = httpx.post(f"{url}/flags/?v=2", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def _on(**condition: object) -> dict[str, object]:
    return {"groups": [{"properties": [], "rollout_percentage": 100, **condition}]}


def test_a_repeated_request_is_answered_again_with_a_new_request_id(one_worker: Server) -> None:
    url = one_worker.url
    token, api = _project(url)
    _flag(api, token, "half", filters={"groups": [{"properties": [], "rollout_percentage": 50}]})
    body = {"api_key": token, "distinct_id": "repeat-1", "person_properties": {"plan": "pro"}}
    before = _reused(url)
    answers = [_flags(url, body) for _ in range(5)]
    assert len({a["requestId"] for a in answers}) == 5
    assert all(a["flags"] == answers[0]["flags"] for a in answers)
    assert all(a["errorsWhileComputingFlags"] is False for a in answers)
    stamps = [a["evaluatedAt"] for a in answers]
    assert stamps == sorted(stamps)
    assert _reused(url) - before == (4 if REUSES else 0)
    # The legacy shape of the same body is its own answer, also with a new request id.
    legacy = [httpx.post(f"{url}/flags/?v=1", json=body).json() for _ in range(2)]
    assert legacy[0]["featureFlags"] == legacy[1]["featureFlags"]
    assert legacy[0]["featureFlags"]["half"] == answers[0]["flags"]["half"]["enabled"]
    assert legacy[0]["requestId"] != legacy[1]["requestId"]


def test_the_same_body_from_another_runtime_is_not_answered_from_the_cache(
    one_worker: Server,
) -> None:
    url = one_worker.url
    token, api = _project(url)
    _flag(api, token, "browser-only", evaluation_runtime="client", filters=_on())
    body = {"api_key": token, "distinct_id": "runtime-1"}
    for _ in range(3):
        assert "browser-only" in _flags(url, body, **{"User-Agent": FIREFOX})["flags"]
        assert (
            "browser-only" not in _flags(url, body, **{"User-Agent": "posthog-python/7"})["flags"]
        )


def test_an_answer_read_against_the_clock_is_kept_within_its_second_only(
    one_worker: Server,
) -> None:
    """A relative date ("seen in the last 30 days") is resolved once a second by the engine;
    its answer is reused within that second at most. An absolute one is kept on."""
    url = one_worker.url
    token, api = _project(url)
    seen = datetime.now(UTC).isoformat()
    relative = {"key": "seen", "value": "-30d", "operator": "is_date_after", "type": "person"}
    absolute = {"key": "seen", "value": "2020-01-01", "operator": "is_date_after", "type": "person"}
    _flag(api, token, "recent", filters=_on(properties=[relative]))
    body = {"api_key": token, "distinct_id": "clock-1", "person_properties": {"seen": seen}}
    assert _flags(url, body)["flags"]["recent"]["enabled"] is True
    time.sleep(1.1)
    before = _reused(url)
    assert _flags(url, body)["flags"]["recent"]["enabled"] is True
    assert _reused(url) == before  # a second later: evaluated again

    token2, api2 = _project(url)
    _flag(api2, token2, "since-2020", filters=_on(properties=[absolute]))
    body2 = {"api_key": token2, "distinct_id": "clock-1", "person_properties": {"seen": seen}}
    assert _flags(url, body2)["flags"]["since-2020"]["enabled"] is True
    time.sleep(1.1)
    before = _reused(url)
    assert _flags(url, body2)["flags"]["since-2020"]["enabled"] is True
    assert _reused(url) - before == (1 if REUSES else 0)


def test_a_definitions_change_is_answered_at_once(one_worker: Server) -> None:
    url = one_worker.url
    token, api = _project(url)
    _flag(api, token, "switch", filters=_on())
    body = {"api_key": token, "distinct_id": "switch-1"}
    assert _flags(url, body)["flags"]["switch"]["enabled"] is True
    assert _flags(url, body)["flags"]["switch"]["enabled"] is True
    flag_id = next(
        f["id"] for f in api.get("/api/projects/@current/feature_flags/").json()["results"]
    )
    r = api.patch(
        f"/api/projects/@current/feature_flags/{flag_id}/",
        json={"filters": {"groups": [{"properties": [], "rollout_percentage": 0}]}},
    )
    assert r.status_code == 200, r.text
    assert _flags(url, body)["flags"]["switch"]["enabled"] is False


def test_the_cache_can_be_turned_off(tmp_path_factory: pytest.TempPathFactory) -> None:
    srv = Server(
        data_dir=tmp_path_factory.mktemp("no-answers") / "data",
        env={"FLAGSTAFF_FLAGS_ANSWER_CACHE_MB": "0"},
    ).start()
    try:
        body = {"api_key": PROJECT_TOKEN, "distinct_id": "off-1"}
        answers = [_flags(srv.url, body) for _ in range(3)]
        assert answers[0]["flags"] == answers[2]["flags"]
        assert _reused(srv.url) == 0
    finally:
        srv.stop()
