"""Envelope and token rules, and the enrichment of one event: ids, time, ip, person updates."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import orjson
import pytest

from flagstaff.http.payload import decode_body
from flagstaff.ingest.model import Drop, Envelope, Event
from flagstaff.ingest.normalize import (
    TokenError,
    client_ip,
    normalize_event,
    parse_envelope,
    parse_iso_ms,
)
from flagstaff.ingest.validate import MAX_EVENT_BYTES

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sdk"
NOW = 1_780_000_000_000  # 2026-05-28T20:26:40Z
HOUR = 3_600_000
ENV = Envelope("phc_x", [], False, None)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def event(**fields: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"event": "clicked", "distinct_id": "user-1", "properties": {}}
    raw.update(fields)
    return raw


def normalized(raw: Any, env: Envelope = ENV, **kwargs: Any) -> Event:
    result = normalize_event(
        raw, env, now_ms=kwargs.get("now_ms", NOW), ip=kwargs.get("ip"), geoip=kwargs.get("geoip")
    )
    assert isinstance(result, Event), result
    return result


# --- tokens -------------------------------------------------------------------------------

TOKENS = [
    ("batch api_key", {"api_key": "phc_a", "batch": []}, {}, "phc_a"),
    ("batch token", {"token": "phc_a", "batch": []}, {}, "phc_a"),
    (
        "batch api_key wins over events",
        {"api_key": "phc_a", "batch": [{"token": "phc_b"}]},
        {},
        "phc_a",
    ),
    ("event token", [{"event": "e", "token": "phc_a"}], {}, "phc_a"),
    ("event $token", {"event": "e", "$token": "phc_a"}, {}, "phc_a"),
    ("event api_key", {"event": "e", "api_key": "phc_a"}, {}, "phc_a"),
    ("properties.token", [{"event": "e", "properties": {"token": "phc_a"}}], {}, "phc_a"),
    (
        "non-string properties.token ignored",
        [{"properties": {"token": 5}}, {"token": "phc_a"}],
        {},
        "phc_a",
    ),
    (
        "batch without token falls back to events",
        {"batch": [{"event": "e", "token": "phc_a"}]},
        {},
        "phc_a",
    ),
    ("events agree", [{"token": "phc_a"}, {"properties": {"token": "phc_a"}}, "junk"], {}, "phc_a"),
    ("query token", [{"event": "e"}], {"token": "phc_q"}, "phc_q"),
    ("surrounding whitespace trimmed", {"api_key": " phc_a\n", "batch": []}, {}, "phc_a"),
    ("64 bytes is fine", {"api_key": "p" * 64, "batch": []}, {}, "p" * 64),
]


@pytest.mark.parametrize(
    ("payload", "query", "token"), [c[1:] for c in TOKENS], ids=[c[0] for c in TOKENS]
)
def test_token_resolution(payload: Any, query: dict[str, str], token: str) -> None:
    assert parse_envelope(payload, query).token == token


BAD_TOKENS = [
    ("missing", [{"event": "e"}], "missing_token"),
    ("missing in scalar body", "hello", "missing_token"),
    ("empty", {"api_key": "", "batch": [{"token": "phc_b"}]}, "empty_token"),
    ("whitespace only", {"api_key": " \n", "batch": []}, "empty_token"),
    ("not a string", {"api_key": 123, "batch": []}, "invalid_token"),
    ("non-ASCII", {"api_key": "phc_é", "batch": []}, "token_not_ascii"),
    ("over 64 bytes", {"api_key": "p" * 65, "batch": []}, "token_too_long"),
    ("non-ASCII over 64 bytes", {"api_key": "é" * 33, "batch": []}, "token_too_long"),
    ("personal API key", {"api_key": "phx_secret", "batch": []}, "personal_api_key"),
    ("NUL byte", {"api_key": "phc_\x00x", "batch": []}, "token_null_byte"),
    ("events disagree", [{"token": "phc_a"}, {"token": "phc_b"}], "multiple_tokens"),
]


@pytest.mark.parametrize(
    ("payload", "code"), [c[1:] for c in BAD_TOKENS], ids=[c[0] for c in BAD_TOKENS]
)
def test_token_rejections(payload: Any, code: str) -> None:
    with pytest.raises(TokenError) as caught:
        parse_envelope(payload, {})
    assert (caught.value.status, caught.value.code) == (401, code)
    assert caught.value.detail


# --- envelope shapes ----------------------------------------------------------------------


def test_envelope_shapes() -> None:
    single = {"event": "e", "token": "phc_a"}
    assert parse_envelope(single, {}).events == [single]
    assert parse_envelope([single, 3], {}).events == [single, 3]
    assert parse_envelope({"api_key": "phc_a", "batch": []}, {}).events == []
    assert parse_envelope({"api_key": "phc_a", "batch": single}, {}).events == [single]
    assert parse_envelope({"api_key": "phc_a", "batch": "junk"}, {}).events == ["junk"]


@pytest.mark.parametrize(
    ("flag", "historical"),
    [(True, True), (False, False), ("true", False), (1, False), (None, False)],
)
def test_historical_flag_must_be_true(flag: Any, historical: bool) -> None:
    env = parse_envelope({"api_key": "phc_a", "batch": [], "historical_migration": flag}, {})
    assert env.historical is historical


SENT_AT = [
    ("batch ISO Z", {"sent_at": "2026-05-28T20:26:40.500Z"}, {}, NOW + 500),
    ("batch ISO offset", {"sent_at": "2026-05-28T22:26:40+02:00"}, {}, NOW),
    ("query _ ms", {}, {"_": str(NOW)}, NOW),
    ("query _ in seconds ignored", {}, {"_": str(NOW // 1000)}, None),
    ("query _ not a number", {}, {"_": "abc"}, None),
    ("batch epoch ms", {"sent_at": NOW}, {}, NOW),
    ("batch wins over query", {"sent_at": "2026-05-28T20:26:40Z"}, {"_": str(NOW + 9)}, NOW),
    ("invalid batch value, query used", {"sent_at": "yesterday"}, {"_": str(NOW)}, NOW),
    ("none", {}, {}, None),
]


@pytest.mark.parametrize(
    ("fields", "query", "sent_at_ms"), [c[1:] for c in SENT_AT], ids=[c[0] for c in SENT_AT]
)
def test_sent_at(fields: dict[str, Any], query: dict[str, str], sent_at_ms: int | None) -> None:
    env = parse_envelope({"api_key": "phc_a", "batch": [], **fields}, query)
    assert env.sent_at_ms == sent_at_ms


# --- timestamps ---------------------------------------------------------------------------

ISO = [
    ("2026-05-28T20:26:40.123Z", NOW + 123),
    ("2026-05-28T20:26:40.123456+00:00", NOW + 123),
    ("2026-05-28T22:26:40+02:00", NOW),
    ("2026-05-28T20:26:40", NOW),
    ("2026-05-28 20:26:40.5", NOW + 500),
    ("2026-05-28", NOW - (20 * HOUR + 26 * 60_000 + 40_000)),
    ("20260528T202640Z", NOW),
    ("Thu, 28 May 2026 20:26:40 GMT", NOW),
    (" 2026-05-28t20:26:40z\n", NOW),
    ("2026-05-28 20:26:40 +0000", NOW),
    ("2026-05-28T20:26:40.123456789Z", NOW + 123),
    ("1969-12-31T23:59:59.999Z", -1),
    ("not a date", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "ms"), ISO)
def test_parse_iso_ms(text: str, ms: int | None) -> None:
    assert parse_iso_ms(text) == ms


TIMES = [
    ("no timestamp -> now", {}, None, NOW),
    ("timestamp only", {"timestamp": "2026-05-28T19:26:40Z"}, None, NOW - HOUR),
    ("skew corrected", {"timestamp": "2026-05-28T19:26:40Z"}, NOW - HOUR + 5000, NOW - 5000),
    ("client clock ahead", {"timestamp": "2026-05-29T20:26:40Z"}, NOW + 24 * HOUR + 10, NOW - 10),
    ("offset only", {"offset": 1500}, None, NOW - 1500),
    (
        "offset wins over skew correction",
        {"timestamp": "2026-05-28T19:26:40Z", "offset": 700},
        NOW,
        NOW - 700,
    ),
    (
        "offset wins over a timestamp without sent_at",
        {"timestamp": "2026-05-28T19:26:40Z", "offset": 700},
        None,
        NOW - 700,
    ),
    (
        "zero offset wins over a timestamp",
        {"timestamp": "2026-05-28T19:26:40Z", "offset": 0},
        NOW - 5000,
        NOW,
    ),
    (
        "null offset ignored",
        {"timestamp": "2026-05-28T19:26:40Z", "offset": None},
        None,
        NOW - HOUR,
    ),
    ("float offset", {"offset": 10.9}, None, NOW - 10),
    ("zero offset", {"offset": 0}, None, NOW),
    ("bool offset ignored", {"offset": True}, None, NOW),
    ("invalid timestamp -> now", {"timestamp": "garbage"}, NOW - 5000, NOW),
    ("invalid timestamp with offset", {"timestamp": "garbage", "offset": 99}, None, NOW - 99),
    ("numeric timestamp -> now", {"timestamp": 1_780_000_000}, None, NOW),
    ("22h ahead kept", {"timestamp": iso(NOW + 22 * HOUR)}, None, NOW + 22 * HOUR),
    ("24h ahead -> now", {"timestamp": iso(NOW + 24 * HOUR)}, None, NOW),
    ("24h ahead via offset -> now", {"offset": -24 * HOUR}, None, NOW),
    (
        "$ignore_sent_at",
        {"timestamp": "2026-05-28T19:26:40Z", "properties": {"$ignore_sent_at": True}},
        NOW + 5000,
        NOW - HOUR,
    ),
    ("before year 1 -> epoch", {"timestamp": "0001-01-01T00:00:00+01:00"}, None, 0),
    ("year 1 kept", {"timestamp": "0001-01-01T00:00:00Z"}, None, -62_135_596_800_000),
    ("skewed before year 1 -> epoch", {"timestamp": "0001-01-01T00:00:00Z"}, NOW + HOUR, 0),
    ("year 9999 is in the future -> now", {"timestamp": "9999-12-31T23:59:59Z"}, None, NOW),
    ("offset before year 1 -> epoch", {"offset": 600_000_000_000_000}, None, 0),
    ("huge float offset -> epoch", {"offset": 1e300}, None, 0),
    ("year 99999 unparseable -> now", {"timestamp": "99999-01-01T00:00:00Z"}, None, NOW),
]


@pytest.mark.parametrize(
    ("fields", "sent_at", "expected"), [c[1:] for c in TIMES], ids=[c[0] for c in TIMES]
)
def test_event_time(fields: dict[str, Any], sent_at: int | None, expected: int) -> None:
    env = Envelope("phc_x", [], False, sent_at)
    result = normalized(event(**fields), env)
    assert result.timestamp_ms == expected
    assert result.received_ms == NOW


# --- distinct_id --------------------------------------------------------------------------

DISTINCT_IDS = [
    ("top level", {"distinct_id": "a"}, "a"),
    ("$distinct_id", {"distinct_id": None, "$distinct_id": "b"}, "b"),
    ("properties", {"distinct_id": None, "properties": {"distinct_id": "c"}}, "c"),
    ("top level wins", {"distinct_id": 23, "properties": {"distinct_id": "c"}}, "23"),
    ("integer", {"distinct_id": 42}, "42"),
    ("float", {"distinct_id": 23.5}, "23.5"),
    ("boolean", {"distinct_id": True}, "true"),
    ("list", {"distinct_id": ["a", "b"]}, '["a","b"]'),
    ("object, keys sorted", {"distinct_id": {"s": "a", "n": 3}}, '{"n":3,"s":"a"}'),
    ("NUL replaced", {"distinct_id": "a\x00b"}, "a\ufffdb"),
    ("cut to 200", {"distinct_id": "x" * 250}, "x" * 200),
    ("whitespace kept", {"distinct_id": " "}, " "),
]


@pytest.mark.parametrize(
    ("fields", "expected"), [c[1:] for c in DISTINCT_IDS], ids=[c[0] for c in DISTINCT_IDS]
)
def test_distinct_id(fields: dict[str, Any], expected: str) -> None:
    assert normalized(event(**fields)).distinct_id == expected


# --- uuid ---------------------------------------------------------------------------------

KEPT = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
UUIDS = [
    ("canonical kept", KEPT, KEPT),
    ("uppercase lowered", KEPT.upper(), KEPT),
    ("braces", "{" + KEPT + "}", KEPT),
    ("no hyphens", KEPT.replace("-", ""), KEPT),
    ("urn", "urn:uuid:" + KEPT, KEPT),
    ("invalid replaced", "not-a-uuid", None),
    ("empty replaced", "", None),
    ("number replaced", 12345, None),
    ("missing", None, None),
]


@pytest.mark.parametrize(("sent", "expected"), [c[1:] for c in UUIDS], ids=[c[0] for c in UUIDS])
def test_uuid(sent: Any, expected: str | None) -> None:
    fields = {} if sent is None else {"uuid": sent}
    result = normalized(event(**fields)).uuid
    if expected is not None:
        assert result == expected
    else:
        parsed = uuid.UUID(result)
        assert (str(parsed), parsed.version) == (result, 7)


def test_generated_uuids_are_unique() -> None:
    assert len({normalized(event()).uuid for _ in range(1000)}) == 1000


# --- ip and geoip -------------------------------------------------------------------------

IPS = [
    ("added", {}, "203.0.113.9", "203.0.113.9"),
    ("client value kept", {"$ip": "198.51.100.1"}, "203.0.113.9", "198.51.100.1"),
    ("empty client value replaced", {"$ip": ""}, "203.0.113.9", "203.0.113.9"),
    ("null client value replaced", {"$ip": None}, "203.0.113.9", "203.0.113.9"),
    ("no request ip", {}, None, "absent"),
]


@pytest.mark.parametrize(
    ("properties", "ip", "expected"), [c[1:] for c in IPS], ids=[c[0] for c in IPS]
)
def test_ip_property(properties: dict[str, Any], ip: str | None, expected: str) -> None:
    result = normalized(event(properties=dict(properties)), ip=ip)
    assert result.properties.get("$ip", "absent") == expected


def test_geoip_fills_gaps_only() -> None:
    seen: list[str] = []

    def geoip(address: str) -> dict[str, Any]:
        seen.append(address)
        return {"$geoip_country_code": "FR", "$geoip_city_name": "Paris"}

    result = normalized(
        event(properties={"$ip": "198.51.100.1", "$geoip_city_name": "Lyon"}),
        ip="203.0.113.9",
        geoip=geoip,
    )
    assert seen == ["198.51.100.1"]
    assert result.properties["$geoip_country_code"] == "FR"
    assert result.properties["$geoip_city_name"] == "Lyon"


@pytest.mark.parametrize(
    ("properties", "ip"), [({"$geoip_disable": True}, "203.0.113.9"), ({}, None)]
)
def test_geoip_skipped(properties: dict[str, Any], ip: str | None) -> None:
    def geoip(address: str) -> dict[str, Any]:
        raise AssertionError("geoip must not be called")

    result = normalized(event(properties=properties), ip=ip, geoip=geoip)
    assert not any(
        key.startswith("$geoip_") and key != "$geoip_disable" for key in result.properties
    )


CLIENT_IPS = [
    ("leftmost forwarded", "203.0.113.9, 10.0.0.1", "10.0.0.2", True, "203.0.113.9"),
    ("invalid entries skipped", "unknown, 203.0.113.9", "10.0.0.2", True, "203.0.113.9"),
    ("port removed", "203.0.113.9:4711", "10.0.0.2", True, "203.0.113.9"),
    ("bracketed ipv6 with port", "[2001:db8::1]:443", "10.0.0.2", True, "2001:db8::1"),
    ("ipv6 normalized", "2001:DB8:0:0::1", None, True, "2001:db8::1"),
    ("ipv4-mapped ipv6", "::ffff:203.0.113.9", None, True, "203.0.113.9"),
    ("quoted", '"203.0.113.9"', None, True, "203.0.113.9"),
    ("untrusted header ignored", "203.0.113.9", "10.0.0.2", False, "10.0.0.2"),
    ("no header", None, "10.0.0.2", True, "10.0.0.2"),
    ("only junk in header", "unknown, , x", "10.0.0.2", True, "10.0.0.2"),
    ("peer not an address", None, "testclient", True, None),
    ("nothing", None, None, True, None),
]


@pytest.mark.parametrize(
    ("xff", "peer", "trusted", "expected"),
    [c[1:] for c in CLIENT_IPS],
    ids=[c[0] for c in CLIENT_IPS],
)
def test_client_ip(xff: str | None, peer: str | None, trusted: bool, expected: str | None) -> None:
    assert client_ip(xff, peer, trust_forwarded=trusted) == expected


# --- $set / $set_once / $unset and person processing ----------------------------------------

PERSON_UPDATES = [
    ("none", {}, {}, (None, None, None)),
    ("properties $set", {}, {"$set": {"a": 1}}, ({"a": 1}, None, None)),
    ("top-level $set", {"$set": {"a": 1}}, {}, ({"a": 1}, None, None)),
    (
        "top-level wins",
        {"$set": {"a": 2, "c": 3}},
        {"$set": {"a": 1, "b": 1}},
        ({"a": 2, "b": 1, "c": 3}, None, None),
    ),
    (
        "set_once merged",
        {"$set_once": {"x": 1}},
        {"$set_once": {"x": 0, "y": 2}},
        (None, {"x": 1, "y": 2}, None),
    ),
    ("non-object $set ignored", {"$set": "oops"}, {"$set": [1]}, (None, None, None)),
    ("unset list", {}, {"$unset": ["a", 3, "b"]}, (None, None, ["a", "b"])),
    ("unset object keys", {}, {"$unset": {"a": None}}, (None, None, ["a"])),
    ("unset from both levels", {"$unset": ["b"]}, {"$unset": ["a"]}, (None, None, ["a", "b"])),
]


@pytest.mark.parametrize(
    ("top", "properties", "expected"),
    [c[1:] for c in PERSON_UPDATES],
    ids=[c[0] for c in PERSON_UPDATES],
)
def test_person_updates(
    top: dict[str, Any], properties: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    result = normalized(event(properties=properties, **top))
    assert (result.set, result.set_once, result.unset) == expected
    if result.set is not None:
        assert result.properties["$set"] == result.set


def test_group_identify_updates_no_person() -> None:
    properties = {"$group_type": "company", "$group_key": "acme"}
    properties = {**properties, "$set": {"a": 1}, "$set_once": {"b": 1}, "$unset": ["c"]}
    result = normalized(event(event="$groupidentify", properties=properties, **{"$set": {"d": 1}}))
    assert (result.set, result.set_once, result.unset) == (None, None, None)


def test_anonymous_events_keep_updates_for_the_person_rules() -> None:
    """The person rules apply them only if the distinct id is already identified."""
    properties = {"$process_person_profile": False, "$set": {"a": 1}, "$unset": ["c"]}
    result = normalized(event(event="clicked", properties=properties, **{"$set": {"d": 1}}))
    assert result.process_person is False
    assert (result.set, result.unset) == ({"a": 1, "d": 1}, ["c"])


@pytest.mark.parametrize(
    ("value", "expected"), [(None, True), (True, True), (False, False), ("false", True), (0, True)]
)
def test_process_person(value: Any, expected: bool) -> None:
    properties = {} if value is None else {"$process_person_profile": value}
    assert normalized(event(properties=properties)).process_person is expected


# --- event shape --------------------------------------------------------------------------


def test_shape_and_in_place_enrichment() -> None:
    raw = event(event="e" * 250, properties={"plan": "pro"})
    result = normalized(raw, ip="203.0.113.9")
    assert result.event == "e" * 200
    assert result.properties is raw["properties"]
    assert result.properties == {"plan": "pro", "$ip": "203.0.113.9"}
    assert normalized(event(properties=None)).properties == {}


def test_historical_flag_is_copied() -> None:
    old = event(timestamp="2020-01-01T00:00:00Z")
    assert normalized(old, Envelope("phc_x", [], True, None)).historical is True
    assert normalized(event(), ENV).historical is False


def test_drop_carries_what_was_found() -> None:
    raw = {"event": "e", "uuid": KEPT, "properties": {}}
    first = normalize_event(raw, ENV, now_ms=NOW, ip=None, geoip=None)
    again = normalize_event(dict(raw), ENV, now_ms=NOW + 1, ip=None, geoip=None)
    assert isinstance(first, Drop)
    assert (first.reason, first.uuid, first.event, first.distinct_id) == (
        "missing_distinct_id",
        KEPT,
        "e",
        None,
    )
    assert len(first.digest) == 16 and int(first.digest, 16) >= 0
    assert again.digest == first.digest  # type: ignore[union-attr]


# --- recorded SDK requests ----------------------------------------------------------------


def _capture_fixtures() -> list[Path]:
    return sorted(
        p for p in FIXTURES.glob("*.json") if json.loads(p.read_text()).get("events") is not None
    )


@pytest.mark.parametrize("path", _capture_fixtures(), ids=lambda path: path.stem)
def test_recorded_sdk_requests_normalize_without_drops(path: Path) -> None:
    recorded = json.loads(path.read_text())
    headers = {name.lower(): value for name, value in recorded["headers"].items()}
    query = dict(parse_qsl(recorded["query"]))
    payload = decode_body(
        base64.b64decode(recorded["body_base64"]),
        content_type=headers.get("content-type"),
        content_encoding=headers.get("content-encoding"),
        query=query,
        limit=20 * 1024 * 1024,
    )
    env = parse_envelope(payload, query)
    assert env.token == "phc_flagstaff_fixture_token"
    assert env.historical is (recorded["scenario"] == "historical")
    assert env.sent_at_ms is not None
    results = [
        normalize_event(raw, env, now_ms=env.sent_at_ms, ip="203.0.113.9", geoip=None)
        for raw in env.events
    ]
    assert all(isinstance(r, Event) for r in results), results
    events = [r for r in results if isinstance(r, Event)]
    assert [e.event for e in events] == recorded["events"]
    for raw, result in zip(env.events, events, strict=True):
        assert result.uuid == raw["uuid"]  # every SDK sends a valid uuid
        assert result.distinct_id in ("user-42", "anon-7") or result.distinct_id == raw[
            "properties"
        ].get("$device_id")
        if result.event in ("$identify", "$set"):
            assert result.set is not None and result.set["email"] == "ada@example.com"
        if not env.historical:
            assert abs(result.timestamp_ms - env.sent_at_ms) < 60_000


# --- hostile events (issue 18) ------------------------------------------------------------


def _nested(depth: int, kind: type = dict) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value} if kind is dict else [value]
    return value


@pytest.mark.parametrize("depth", [300, 1000, 5000])
@pytest.mark.parametrize(
    "where",
    ["properties", "distinct_id", "$set", "item"],
)
def test_deeply_nested_event_is_dropped_not_raised(depth: int, where: str) -> None:
    deep = _nested(depth, list if where == "item" else dict)
    if where == "item":
        raw: Any = deep
    elif where == "properties":
        raw = event(properties={"deep": deep})
    else:
        raw = event(**{where: deep})
    result = normalize_event(raw, ENV, now_ms=NOW, ip=None, geoip=None)
    assert isinstance(result, Drop)
    assert result.reason == "invalid_event"
    assert len(result.digest) == 16
    if where == "properties":
        assert (result.event, result.distinct_id) == ("clicked", "user-1")


# --- the limits at their edges -----------------------------------------------------------


def _limit_depth() -> int:
    """The smallest depth of nested objects in properties that orjson refuses in an event."""
    depth = 1
    while True:
        try:
            orjson.dumps(event(properties={"deep": _nested(depth)}))
        except orjson.JSONEncodeError:
            return depth
        depth += 1


def test_nesting_at_orjsons_limit_is_judged_on_the_whole_event() -> None:
    """Properties that would encode alone but not inside the event are dropped: a store that
    encodes the properties alone must not nest them deeper than the check allowed."""
    depth = _limit_depth()
    orjson.dumps({"deep": _nested(depth)})  # the properties alone encode
    dropped = normalize_event(
        event(properties={"deep": _nested(depth)}), ENV, now_ms=NOW, ip=None, geoip=None
    )
    assert isinstance(dropped, Drop) and dropped.reason == "invalid_event"
    kept = normalized(event(properties={"deep": _nested(depth - 1)}))
    assert orjson.dumps(kept.properties)


@pytest.mark.parametrize("extra", [0, 1])
def test_size_limit_counts_the_whole_encoded_event(extra: int) -> None:
    raw = event(uuid="not-a-uuid", properties={"blob": ""})
    blob = "x" * (MAX_EVENT_BYTES - len(orjson.dumps(raw)) + extra)
    raw["properties"]["blob"] = blob
    assert len(orjson.dumps(raw)) == MAX_EVENT_BYTES + extra
    result = normalize_event(raw, ENV, now_ms=NOW, ip=None, geoip=None)
    if extra:
        assert isinstance(result, Drop) and result.reason != "invalid_event"
    else:
        assert isinstance(result, Event)
        assert raw["properties"]["blob"] is blob  # the event was left as it came
