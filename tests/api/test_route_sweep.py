"""Every route, swept with malformed and oversized input: answers are never a 500 and every
failure is a JSON error naming the problem (issue 13 part 4).

The routes come from the app's own tables (the public dispatcher and the management ROUTES),
so a new route is swept without touching this file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from flagstaff.app import PATTERN_ROUTES, public_routes
from flagstaff.http.admin import ROUTES
from tests.server import PERSONAL_KEY, PROJECT_TOKEN

_PARAM = re.compile(r"\{(\w+)\}")
_BODY_METHODS = {"POST", "PATCH", "PUT"}


def _all_routes() -> list[tuple[str, str]]:
    routes: set[tuple[str, str]] = set()
    for route in [*public_routes().values(), *PATTERN_ROUTES]:
        for method in route.methods - {"HEAD"}:
            routes.add((method, route.name))
    for method, path, _, _ in ROUTES:
        routes.add((method, path))
    return sorted(routes)


ROUTES_SWEPT = _all_routes()

BAD_PARAMS = ["99999999999999999999999", "abc", "-1", "0", "x" * 3000, "%00", "%FF%FE", "1.5"]
GOOD_PARAMS = {
    "project_id": "@current",
    "token": PROJECT_TOKEN,
    "name": "array.js",
    # a well-formed id of no key: sweeping DELETE must not revoke the suite's own key (id 1)
    "key_id": "999999",
    "user_id": "999999",  # nor remove a member
}

BAD_QUERIES: list[dict[str, str]] = [
    {"limit": "abc", "offset": "-5"},
    {"limit": "9" * 40, "offset": "9" * 40},
    {"after": "not-a-time", "before": "99999-99-99"},
    {"distinct_id": "x" * 20_000},
    {"data": "%%%not-base64%%%", "compression": "gzip-js"},
    {"data": "QUJD", "compression": "lz64"},
    {"v": "abc", "config": "maybe", "group_type_index": "zz", "group_key": "\x00"},
    {"token": "phx_" + "k" * 100, "ip": "not-an-ip", "_": "-1"},
    {"cursor": "9" * 30 + "_" + "9" * 30, "event": "\x00" * 10},
    {"cursor": "nonsense", "distinct_id": "\xff\ufffe"},
]

BAD_BODIES: list[tuple[bytes, dict[str, str]]] = [
    (b"{", {"Content-Type": "application/json"}),
    (b"null", {"Content-Type": "application/json"}),
    (b'"text"', {"Content-Type": "application/json"}),
    (b"[1, 2, 3]", {"Content-Type": "application/json"}),
    (b"abcde", {"Content-Type": "application/json"}),
    (b"[" * 5000, {"Content-Type": "application/json"}),
    (b'{"a":' * 2000 + b"1" + b"}" * 2000, {"Content-Type": "application/json"}),
    (b"\xff\xfe\x00garbage", {"Content-Type": "application/octet-stream"}),
    (b"not gzip at all", {"Content-Encoding": "gzip"}),
    (b"\x1f\x8b\x08\x00" + b"\x00" * 40, {}),
    (b"data=%ZZ%ZZ&compression=lz64", {"Content-Type": "application/x-www-form-urlencoded"}),
    (b'{"key": ' + b'"' + b"k" * 300_000 + b'"}', {"Content-Type": "application/json"}),
    (
        b'{"api_key": "' + PROJECT_TOKEN.encode() + b'", "distinct_id": {"a": [1, {"b": null}]},'
        b' "event": 5, "groups": "x", "person_properties": [], "batch": 7}',
        {"Content-Type": "application/json"},
    ),
]

BAD_HEADERS: list[dict[str, str]] = [
    {"Authorization": "Bearer " + "x" * 8000},
    {"Authorization": "Basic Zm9vOmJhcg=="},
    {"Authorization": "Bearer phc_notapersonalkey"},
    {"Content-Type": "multipart/form-data; boundary=zzz", "X-Forwarded-For": "not, an, ip"},
    {"Content-Length": "0", "Origin": "https://" + "o" * 3000},
]


def _fill(path: str, bad: str | None) -> Iterator[str]:
    """The path with good values in its parameters, then with `bad` in each one in turn."""
    names = _PARAM.findall(path)

    def build(override: str | None) -> str:
        out = path
        for name in names:
            value = GOOD_PARAMS.get(name, "1")
            if override == name:
                value = bad or value
            out = out.replace("{" + name + "}", value)
        return out

    if bad is None:
        yield build(None)
        return
    for name in names:
        yield build(name)


def _check(r: httpx.Response, what: str) -> None:
    # 503 is a deliberate answer (store down, bundles not installed, busy), never a crash.
    assert r.status_code < 500 or r.status_code == 503, f"{what}: {r.status_code} {r.text[:300]}"
    if r.status_code >= 400:
        assert r.headers.get("content-type", "").startswith("application/json"), what
        body: Any = r.json()
        if what.split(" ")[1].startswith("/ofrep/"):
            # OpenFeature's protocol names the problem its own way
            assert body["errorCode"] and body["errorDetails"], f"{what}: {r.text[:300]}"
            return
        assert body.get("code") and body.get("detail"), f"{what}: {r.text[:300]}"


def _ids(items: list[tuple[str, str]]) -> list[str]:
    return [f"{m} {p}" for m, p in items]


@pytest.fixture(scope="module")
def client(server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {PERSONAL_KEY}"}
    with httpx.Client(base_url=server.url, timeout=30.0, headers=headers) as c:
        yield c


@pytest.mark.parametrize(("method", "path"), ROUTES_SWEPT, ids=_ids(ROUTES_SWEPT))
def test_sweep_route(client: httpx.Client, method: str, path: str) -> None:
    body_ok = method in _BODY_METHODS
    for bad in BAD_PARAMS:
        for url in _fill(path, bad):
            _check(client.request(method, url), f"{method} {url[:80]}")
    url = next(_fill(path, None))
    for query in BAD_QUERIES:
        _check(client.request(method, url, params=query), f"{method} {url} ?{list(query)}")
    for headers in BAD_HEADERS:
        _check(client.request(method, url, headers=headers), f"{method} {url} {list(headers)}")
    if body_ok:
        for content, headers in BAD_BODIES:
            r = client.request(method, url, content=content, headers=headers)
            _check(r, f"{method} {url} body {content[:30]!r}")
    for other in ("PUT", "DELETE", "PATCH"):
        if (other, path) not in ROUTES_SWEPT:
            _check(client.request(other, url), f"{other} {url}")


def test_sweep_covers_every_route() -> None:
    paths = {p for _, p in ROUTES_SWEPT}
    assert "/flags" in paths and "/batch" in paths
    assert "/api/projects/{project_id}/feature_flags/{flag_id}/" in paths
    assert len(ROUTES_SWEPT) >= len(ROUTES) + len(public_routes())


def test_long_query_data_is_a_json_414_or_decoded(client: httpx.Client) -> None:
    """Within the server's URL limit, oversized `?data=` is a JSON error, never a bare status."""
    r = client.get("/e/", params={"data": "A" * 60_000})
    _check(r, "GET /e/?data=<60 KB>")


@pytest.mark.parametrize("path", ["/e/", "/flags/", "/api/projects/@current/feature_flags/"])
def test_a_url_over_8_kb_is_a_json_414_on_every_route(client: httpx.Client, path: str) -> None:
    """The app answers URLs over its limit itself (granian's own 414, past 64 KB, has no body)."""
    r = client.get(path, params={"data": "A" * 8192})
    assert r.status_code == 414, r.text
    _check(r, f"GET {path}?data=<8 KB>")
    assert r.json()["code"] == "uri_too_long"
    # Just under the limit the request is read as usual.
    r = client.get(path, params={"data": "A" * 7000})
    assert r.status_code != 414
