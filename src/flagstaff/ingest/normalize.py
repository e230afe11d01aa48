"""From a decoded capture body to events ready to store: token, distinct_id, uuid, time, ip.

Pure functions, no I/O. They follow the PostHog capture service and ingestion pipeline; where
those leave a choice, the docstrings (and docs/compat-notes.md) say what Flagstaff does.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import ipaddress
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson

from flagstaff.accounts.keys import PERSONAL_KEY_PREFIX
from flagstaff.common.invalid import conversion_problem
from flagstaff.common.units import DAY_MS, HOUR_MS
from flagstaff.ingest.body import AnyNameEvent, CaptureBatch, CaptureEvent
from flagstaff.ingest.event_names import GROUP_IDENTIFY_EVENTS
from flagstaff.ingest.model import Drop, Envelope, Event
from flagstaff.ingest.uuids import canonical_uuid, new_uuid7
from flagstaff.ingest.validate import (
    INVALID_EVENT,
    MAX_EVENT_BYTES,
    RULED_EVENTS,
    check_distinct_id,
    check_event_name,
    check_event_rules,
    check_historical,
    check_size,
)

__all__ = [
    "TokenError",
    "client_ip",
    "normalize_batch",
    "normalize_event",
    "parse_envelope",
    "parse_iso_ms",
    "resolve_timestamp_ms",
]

MAX_TOKEN_BYTES = 64
MAX_DISTINCT_ID_LENGTH = 200
MAX_EVENT_NAME_LENGTH = 200
FUTURE_LIMIT_MS = 23 * HOUR_MS
"""Events dated more than this after `now` are moved to `now` (PostHog warns and does the same)."""
_MIN_SENT_AT_MS = 1_609_459_200_000
"""Query `_` values below 2021-01-01 are taken for seconds from old SDKs and ignored."""
_MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_fromisoformat = datetime.fromisoformat
_dumps = orjson.dumps
_convert = msgspec.convert
_ValidationError = msgspec.ValidationError


class _Items(msgspec.Struct, array_like=True, gc=False):
    """Every item of a batch as a `CaptureEvent`, in one conversion. A Struct, whose type
    msgspec prepares once, where a `list[CaptureEvent]` would be prepared again each call
    (0.6 µs: as much as four events)."""

    events: list[CaptureEvent]


class TokenError(Exception):
    """The request's project token is missing or malformed: answered with 401."""

    status = 401

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def parse_envelope(payload: Any, query: Mapping[str, str]) -> Envelope:
    """Split a decoded body into token, raw events and batch metadata.

    Accepts `{api_key|token, batch, historical_migration?, sent_at?}` (a `CaptureBatch`), a
    JSON array of events, or one event (each read as a `CaptureEvent` by `normalize_event`).
    A batch-level token wins; otherwise the events must agree on one (their
    `token`/`$token`/`api_key`, else `properties.token`), else the query's `token` is used.
    Items that are not objects are kept for `normalize_event` to turn into drops; a `batch` that
    is not a list is one such item, and an empty batch gives an envelope with no events. The
    batch `sent_at` (ISO 8601, or epoch ms) wins over the query's `_` (epoch ms).
    """
    historical = False
    sent_at_ms = None
    token: Any = None
    if isinstance(payload, dict) and "batch" in payload:
        body = _convert(payload, CaptureBatch)  # never refused: its fields take any value
        batch = body.batch
        events: list[Any] = batch if isinstance(batch, list) else [batch]
        token = body.api_key
        if token is None:
            token = body.token
        historical = body.historical_migration is True
        sent_at = body.sent_at
        if isinstance(sent_at, str) and sent_at:
            sent_at_ms = parse_iso_ms(sent_at)
        elif isinstance(sent_at, int) and not isinstance(sent_at, bool):
            sent_at_ms = sent_at if _MIN_SENT_AT_MS <= sent_at <= _MAX_MS else None
    elif isinstance(payload, list):
        events = payload
    else:
        events = [payload]
    fields: list[CaptureEvent] | None
    try:  # every item in one call, the usual case (one refused item: each alone, later)
        fields = _convert((events,), _Items).events
    except _ValidationError:
        fields = None
    if token is None:
        token = _events_token(events if fields is None else fields)
        if token is None:
            token = query.get("token")
            if token is None:
                raise TokenError("missing_token", "request carries no project token (api_key)")
    if sent_at_ms is None:
        sent_at_ms = _query_sent_at_ms(query.get("_"))
    return Envelope(_valid_token(token), events, historical, sent_at_ms, fields)


def _events_token(events: list[Any] | list[CaptureEvent]) -> Any:
    found: Any = None
    for item in events:
        if type(item) is CaptureEvent:
            tokens: CaptureEvent = item
        elif isinstance(item, dict):
            tokens = _convert(item, AnyNameEvent)  # a refused name still gives its token
        else:
            continue
        token = tokens.token
        if token is None:
            token = tokens.dollar_token
            if token is None:
                token = tokens.api_key
                if token is None:
                    properties = tokens.properties
                    if isinstance(properties, dict):
                        token = properties.get("token")
                    if not isinstance(token, str):
                        continue
        if not isinstance(token, str):  # compared below: never a (deep) structure
            raise TokenError("invalid_token", "project token must be a string")
        if found is None:
            found = token
        elif token != found:
            raise TokenError("multiple_tokens", "events in one request carry different tokens")
    return found


def _valid_token(token: Any) -> str:
    if not isinstance(token, str):
        raise TokenError("invalid_token", "project token must be a string")
    token = token.strip()
    if not token:
        raise TokenError("empty_token", "project token is empty")
    if token.isascii():
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenError("token_too_long", f"project token is over {MAX_TOKEN_BYTES} bytes")
    elif len(token.encode("utf-8", "surrogatepass")) > MAX_TOKEN_BYTES:
        raise TokenError("token_too_long", f"project token is over {MAX_TOKEN_BYTES} bytes")
    else:
        raise TokenError("token_not_ascii", "project token contains non-ASCII characters")
    if token.startswith(PERSONAL_KEY_PREFIX):
        raise TokenError(
            "personal_api_key",
            "a personal API key (phx_) cannot capture events: send the project token (phc_)",
        )
    if "\x00" in token:
        raise TokenError("token_null_byte", "project token contains a NUL character")
    return token


def _query_sent_at_ms(value: str | None) -> int | None:
    if not value or not value.isdigit():
        return None
    sent_at_ms = int(value)
    return sent_at_ms if _MIN_SENT_AT_MS <= sent_at_ms <= _MAX_MS else None


def parse_iso_ms(value: str) -> int | None:
    """Epoch milliseconds of an ISO 8601 (or RFC 2822) time; naive times are UTC."""
    try:
        moment = _fromisoformat(value)
    except ValueError:
        try:
            moment = _fromisoformat(value.strip().upper())
        except ValueError:
            try:
                moment = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        delta = moment - _EPOCH
    except OverflowError:
        return None
    return delta.days * DAY_MS + delta.seconds * 1000 + delta.microseconds // 1000


def resolve_timestamp_ms(
    timestamp_ms: int | None,
    timestamp_given: bool,
    offset_ms: int | None,
    sent_at_ms: int | None,
    now_ms: int,
) -> int:
    """PostHog's event time (its capture service's rules, docs/compat-notes.md "Event time").

    An `offset` (ms before sending, 0 included) gives `now - offset` and wins over everything.
    Otherwise a timestamp with a `sent_at` gives `now + (timestamp - sent_at)` (the client's clock
    skew corrected), a timestamp alone is used as is, and an unparseable or missing one is now.
    A result more than 23 hours ahead becomes now; one outside years 1 to 9999 the Unix epoch.
    """
    if offset_ms is not None:
        result = now_ms - offset_ms
    elif not timestamp_given or timestamp_ms is None:
        return now_ms
    elif sent_at_ms is None:
        result = timestamp_ms
    else:
        result = now_ms + timestamp_ms - sent_at_ms
    if result - now_ms > FUTURE_LIMIT_MS:
        return now_ms
    if not _MIN_MS <= result <= _MAX_MS:
        return 0
    return result


def _offset_ms(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return None


_DIGEST_NODES = 10_000


def _digest(raw: Any) -> str:
    try:
        data = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # too deep or not encodable: never recurse on it
        data = _shape(raw)
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _shape(raw: Any) -> bytes:
    """A bounded, non-recursive fingerprint of a value orjson cannot encode."""
    out: list[str] = []
    stack = [raw]
    while stack and len(out) < _DIGEST_NODES:
        value = stack.pop()
        if isinstance(value, dict):
            out.append(f"{{{len(value)}")
            for key, item in value.items():
                out.append(str(key)[:64])
                stack.append(item)
        elif isinstance(value, list):
            out.append(f"[{len(value)}")
            stack.extend(value)
        else:
            out.append(repr(value)[:64])
    return "\x00".join(out).encode("utf-8", "backslashreplace")


def _drop(
    problem: tuple[str, str],
    raw: Any,
    fields: CaptureEvent | None = None,
    event: str | None = None,
    distinct_id: str | None = None,
) -> Drop:
    client_uuid = None if fields is None else fields.uuid
    return Drop(
        problem[0],
        problem[1],
        client_uuid[:64] if isinstance(client_uuid, str) else None,
        _digest(raw),
        event,
        distinct_id,
    )


def _plain_name_and_id(fields: CaptureEvent) -> tuple[str | None, str | None]:
    """The event name and distinct id for a drop, when they are plain strings."""
    name = fields.event if type(fields) is CaptureEvent else None
    found_id = fields.distinct_id
    return (
        name[:MAX_EVENT_NAME_LENGTH] if name else None,
        _stringify_distinct_id(found_id) if isinstance(found_id, str) and found_id else None,
    )


def _stringify_distinct_id(value: Any) -> str:
    if not isinstance(value, str):
        value = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    return value[:MAX_DISTINCT_ID_LENGTH] if len(value) > MAX_DISTINCT_ID_LENGTH else value


def _merge_top_level(properties: dict[str, Any], key: str, top: Any) -> dict[str, Any] | None:
    """`properties[key]` merged with the event's top-level value of the same name (which wins)."""
    inner = properties.get(key)
    if isinstance(top, dict):
        merged = {**inner, **top} if isinstance(inner, dict) else dict(top)
        properties[key] = merged
        return merged
    return inner if isinstance(inner, dict) else None


def _unset_keys(*values: Any) -> list[str] | None:
    keys: list[str] | None = None
    for value in values:
        if isinstance(value, list):
            found = [key for key in value if isinstance(key, str)]
        elif isinstance(value, dict):
            found = list(value)
        else:
            continue
        keys = found if keys is None else keys + found
    return keys


@dataclass(frozen=True, slots=True)
class _PersonUpdates:
    """The `$set`, `$set_once` and `$unset` an event carries (top level merged in)."""

    set: dict[str, Any] | None = None
    set_once: dict[str, Any] | None = None
    unset: list[str] | None = None


_NO_UPDATES = _PersonUpdates()


def normalize_event(
    raw: Any,
    env: Envelope,
    *,
    now_ms: int,
    ip: str | None,
    geoip: Callable[[str], dict[str, Any]] | None,
) -> Event | Drop:
    """Validate and enrich one raw event (a JSON value), or say why it is dropped.

    Its fields are read through `CaptureEvent` (`ingest/body.py`); the one it refuses (a name
    that is not a string) is the event's drop, naming the field. `raw["properties"]` is
    enriched in place (`$ip`, `$geoip_*`, merged `$set`/`$set_once`) and becomes
    `Event.properties`. `geoip(ip)` returns `$geoip_*` properties; they only fill gaps and are
    skipped when the event sets `$geoip_disable`. Each step below returns a Drop to stop.
    """
    if not isinstance(raw, dict):
        return _drop((INVALID_EVENT, f"batch item is a {type(raw).__name__}, not an object"), raw)
    try:
        fields = _convert(raw, CaptureEvent)
    except _ValidationError as exc:  # its name: the rest is still read, for the drop
        return _normalize(raw, _convert(raw, AnyNameEvent), exc, env, now_ms, ip, geoip)
    return _normalize(raw, fields, None, env, now_ms, ip, geoip)


def normalize_batch(
    env: Envelope,
    *,
    now_ms: int,
    ip: str | None,
    geoip: Callable[[str], dict[str, Any]] | None,
) -> tuple[list[Event], list[Drop]]:
    """`normalize_event` for each item of the envelope: the events kept, the drops. The items
    already converted together by `parse_envelope` (`env.fields`) are not converted again."""
    events: list[Event] = []
    drops: list[Drop] = []
    typed = env.fields
    if typed is None:
        for raw in env.events:
            result = normalize_event(raw, env, now_ms=now_ms, ip=ip, geoip=geoip)
            if type(result) is Event:
                events.append(result)
            else:
                drops.append(result)
    else:
        for raw, fields in zip(env.events, typed, strict=True):
            result = _normalize(raw, fields, None, env, now_ms, ip, geoip)
            if type(result) is Event:
                events.append(result)
            else:
                drops.append(result)
    return events, drops


def _normalize(
    raw: dict[str, Any],
    fields: CaptureEvent,
    refused: msgspec.ValidationError | None,
    env: Envelope,
    now_ms: int,
    ip: str | None,
    geoip: Callable[[str], dict[str, Any]] | None,
) -> Event | Drop:
    """`normalize_event` once the event is read: `fields` is a `CaptureEvent`, or, when it
    refused the event's name (`refused`), an `AnyNameEvent`."""
    limits = _check_limits(raw, fields)
    if limits is not None:
        return limits
    if type(fields) is not CaptureEvent:
        return _drop(_refusal(refused), raw, fields)
    name = _event_name(fields, raw)
    if type(name) is Drop:
        return name
    properties = _properties(fields, raw, name)
    if type(properties) is Drop:
        return properties
    distinct_id = _distinct_id(fields, raw, properties, name)
    if type(distinct_id) is Drop:
        return distinct_id
    process_person = properties.get("$process_person_profile") is not False
    if name in RULED_EVENTS:
        problem = check_event_rules(name, properties, process_person)
        if problem is not None:
            return _drop(problem, raw, fields, name, distinct_id)
    timestamp_ms = _event_time(fields, raw, properties, env, now_ms, name, distinct_id)
    if type(timestamp_ms) is Drop:
        return timestamp_ms
    _enrich(properties, ip, geoip)
    updates = _person_updates(fields, properties, name)
    return Event(
        canonical_uuid(fields.uuid) or new_uuid7(),
        name,
        distinct_id,
        properties,
        timestamp_ms,
        now_ms,
        updates.set,
        updates.set_once,
        updates.unset,
        process_person,
        env.historical,
    )


def _refusal(error: msgspec.ValidationError | None) -> tuple[str, str]:
    """A field `CaptureEvent` refused, named, in msgspec's words."""
    if error is None:  # not reached: only a refusal gives an AnyNameEvent
        return INVALID_EVENT, "event could not be read"
    problem = conversion_problem(error)
    return INVALID_EVENT, f"event field `{problem.path}`: {problem.message}"


def _check_limits(raw: dict[str, Any], fields: CaptureEvent) -> Drop | None:
    """Nesting and size, before any step that could walk the event.

    orjson refuses nesting over 254 levels without recursing, so nothing after this ever walks
    a structure deeper than that (the conversion to `CaptureEvent` before it walks none: the
    fields it types are scalars).
    """
    try:
        encoded_bytes = len(_dumps(raw))
    except TypeError:  # orjson.JSONEncodeError: nested over 254 levels, or a lone surrogate
        problem = (INVALID_EVENT, "event is nested too deeply or cannot be encoded")
        return _drop(problem, raw, fields, *_plain_name_and_id(fields))
    if encoded_bytes > MAX_EVENT_BYTES:
        problem = check_size(encoded_bytes) or ("", "")
        return _drop(problem, raw, fields, *_plain_name_and_id(fields))
    return None


def _event_name(fields: CaptureEvent, raw: dict[str, Any]) -> str | Drop:
    name = fields.event
    if not name:
        return _drop(check_event_name(name) or (INVALID_EVENT, ""), raw, fields)
    return name[:MAX_EVENT_NAME_LENGTH] if len(name) > MAX_EVENT_NAME_LENGTH else name


def _properties(fields: CaptureEvent, raw: dict[str, Any], name: str) -> dict[str, Any] | Drop:
    properties = fields.properties
    if properties is None:
        return {}
    if not isinstance(properties, dict):
        return _drop((INVALID_EVENT, "event properties must be an object"), raw, fields, name)
    return properties


def _distinct_id(
    fields: CaptureEvent, raw: dict[str, Any], properties: dict[str, Any], name: str
) -> str | Drop:
    """`distinct_id`, else `$distinct_id`, else `properties.distinct_id`, as text."""
    found_id = fields.distinct_id
    if found_id is None:
        found_id = fields.dollar_distinct_id
        if found_id is None:
            found_id = properties.get("distinct_id")
    if found_id is None or found_id == "":
        return _drop(check_distinct_id(found_id) or ("", ""), raw, fields, name)
    return _stringify_distinct_id(found_id)


def _event_time(
    fields: CaptureEvent,
    raw: dict[str, Any],
    properties: dict[str, Any],
    env: Envelope,
    now_ms: int,
    name: str,
    distinct_id: str,
) -> int | Drop:
    """The event's time (see :func:`resolve_timestamp_ms`); historical batches' age rule."""
    timestamp = fields.timestamp
    parsed_ms = parse_iso_ms(timestamp) if timestamp and isinstance(timestamp, str) else None
    offset = fields.offset
    timestamp_ms = resolve_timestamp_ms(
        parsed_ms,
        bool(timestamp),
        None if offset is None else _offset_ms(offset),
        None if properties.get("$ignore_sent_at") else env.sent_at_ms,
        now_ms,
    )
    if env.historical:
        problem = check_historical(None if parsed_ms is None else timestamp_ms, now_ms)
        if problem is not None:
            return _drop(problem, raw, fields, name, distinct_id)
    return timestamp_ms


def _enrich(
    properties: dict[str, Any], ip: str | None, geoip: Callable[[str], dict[str, Any]] | None
) -> None:
    """`$ip` from the request when the event has none; `$geoip_*` gaps filled from `$ip`."""
    if ip and not properties.get("$ip"):
        properties["$ip"] = ip
    if geoip is not None and not properties.get("$geoip_disable"):
        address = properties.get("$ip")
        if address and isinstance(address, str):
            for key, value in geoip(address).items():
                if key not in properties:
                    properties[key] = value


def _person_updates(fields: CaptureEvent, properties: dict[str, Any], name: str) -> _PersonUpdates:
    """Kept for anonymous events too: the person rules still apply them when the distinct id
    already belongs to an identified person. Group identify events carry none. A top-level
    `$set: null` is as good as none (either way only `properties.$set` counts)."""
    if name in GROUP_IDENTIFY_EVENTS:
        return _NO_UPDATES
    top_set, top_set_once, top_unset = fields.set, fields.set_once, fields.unset
    has_set = top_set is not None or "$set" in properties
    has_set_once = top_set_once is not None or "$set_once" in properties
    has_unset = top_unset is not None or "$unset" in properties
    if not (has_set or has_set_once or has_unset):
        return _NO_UPDATES
    return _PersonUpdates(
        _merge_top_level(properties, "$set", top_set) if has_set else None,
        _merge_top_level(properties, "$set_once", top_set_once) if has_set_once else None,
        _unset_keys(properties.get("$unset"), top_unset) if has_unset else None,
    )


@functools.lru_cache(maxsize=8192)
def _clean_ip(text: str) -> str | None:
    text = text.strip().strip('"')
    if not text:
        return None
    if text[0] == "[":
        text = text[1 : text.find("]")]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def client_ip(headers_xff: str | None, peer: str | None, *, trust_forwarded: bool) -> str | None:
    """The leftmost valid `X-Forwarded-For` address when trusted, else the peer; None if neither
    is an IP address. Ports and brackets are removed and IPv4-mapped IPv6 becomes IPv4."""
    if trust_forwarded and headers_xff:
        for part in headers_xff.split(","):
            address = _clean_ip(part)
            if address is not None:
                return address
    return _clean_ip(peer) if peer else None
