"""The capture body's Structs (ingest/body.py): what they refuse, the batch read in one call,
and the OpenAPI document they make."""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from flagstaff.ingest.body import CaptureBatch, CaptureEvent
from flagstaff.ingest.model import Drop, Event
from flagstaff.ingest.normalize import normalize_batch, normalize_event, parse_envelope

NOW = 1_780_000_000_000
UUID = "01930001-0000-7000-8001-0000000000{:02x}"


def _event(n: int, **fields: Any) -> dict[str, Any]:
    raw = {
        "event": f"e{n}",
        "distinct_id": f"u{n}",
        "uuid": UUID.format(n),
        "timestamp": "2026-05-28T20:00:00Z",
        "properties": {"n": n, "$set": {"a": n}},
    }
    raw.update(fields)
    return raw


def _batch(items: list[Any]) -> tuple[list[Event], list[Drop]]:
    env = parse_envelope({"api_key": "phc_a", "batch": items}, {})
    return normalize_batch(env, now_ms=NOW, ip="203.0.113.9", geoip=None)


def _one_by_one(items: list[Any]) -> tuple[list[Event], list[Drop]]:
    env = parse_envelope({"api_key": "phc_a", "batch": items}, {})
    results = [
        normalize_event(raw, env, now_ms=NOW, ip="203.0.113.9", geoip=None) for raw in env.events
    ]
    return [r for r in results if type(r) is Event], [r for r in results if type(r) is Drop]


def test_a_well_formed_batch_is_read_in_one_call_with_the_same_events() -> None:
    items = [_event(n, **({"$set": {"b": 1}} if n % 2 else {})) for n in range(5)]
    env = parse_envelope({"api_key": "phc_a", "batch": copy.deepcopy(items)}, {})
    assert env.fields is not None and len(env.fields) == 5
    assert _batch(copy.deepcopy(items)) == _one_by_one(copy.deepcopy(items))


def test_a_refused_name_is_that_events_drop_naming_the_field() -> None:
    items = [_event(0), _event(1, event=7), "junk", _event(3)]
    env = parse_envelope({"api_key": "phc_a", "batch": copy.deepcopy(items)}, {})
    assert env.fields is None  # one refused item: each is read alone
    events, drops = _batch(copy.deepcopy(items))
    assert [e.event for e in events] == ["e0", "e3"]
    assert [d.reason for d in drops] == ["invalid_event", "invalid_event"]
    assert "`event`" in drops[0].detail and drops[0].uuid == UUID.format(1)
    assert (events, drops) == _one_by_one(copy.deepcopy(items))


def test_an_event_with_a_refused_name_still_gives_its_token() -> None:
    env = parse_envelope([{"event": 7, "token": "phc_t", "distinct_id": "u"}], {})
    assert env.token == "phc_t"
    [drop] = normalize_batch(env, now_ms=NOW, ip=None, geoip=None)[1]
    assert drop.reason == "invalid_event"


def test_lenient_fields_take_any_value() -> None:
    odd = {
        "distinct_id": 5,
        "$distinct_id": [1],
        "properties": "x",
        "timestamp": 3,
        "offset": "soon",
        "uuid": {},
        "$set": 1,
        "$set_once": [],
        "$unset": "k",
        "token": 1,
        "$token": None,
        "api_key": True,
    }
    fields = msgspec.convert(odd, CaptureEvent)
    assert (fields.distinct_id, fields.properties, fields.unset) == (5, "x", "k")
    body = msgspec.convert(
        {"batch": "x", "historical_migration": "yes", "sent_at": []}, CaptureBatch
    )
    assert (body.batch, body.historical_migration, body.sent_at) == ("x", "yes", [])


def test_the_document_shows_the_structs_capture_reads_with() -> None:
    from flagstaff.app import PATTERN_ROUTES, public_routes
    from flagstaff.http.openapi import openapi_document

    document = openapi_document([], [*public_routes().values(), *PATTERN_ROUTES])
    body = document["paths"]["/batch"]["post"]["requestBody"]["content"]["application/json"]
    refs = [option.get("$ref") or option["items"]["$ref"] for option in body["schema"]["anyOf"]]
    assert [ref.rsplit("/", 1)[1] for ref in refs] == [
        "CaptureBatch",
        "CaptureEvent",
        "CaptureEvent",
    ]
    components = document["components"]["schemas"]
    assert {"event", "distinct_id", "$distinct_id", "$set", "$unset", "token", "$token"} <= set(
        components["CaptureEvent"]["properties"]
    )
    assert components["CaptureEvent"]["properties"]["event"]["anyOf"] == [
        {"type": "string"},
        {"type": "null"},
    ]
    assert components["CaptureBatch"]["required"] == ["batch"]
    assert "CaptureRequest" not in components
