"""The capture body's shapes: the batch envelope and one event, as msgspec Structs.

Capture decodes with them (``normalize.parse_envelope`` converts the envelope,
``normalize.normalize_event`` each event) and the OpenAPI document shows them, so the fields
read and the fields documented are the same. Pure, no I/O.

PostHog's capture is lenient where a strict decode would refuse (compat.md section 8): one
bad event is that event's drop, never a refused batch, and a token of the wrong type is a 401.
So most fields take any JSON value, annotated with the type the document shows and, in its
description, what the rules (not the decoder) do with other values; only ``event`` is typed,
because a refusal there is already the event's drop (``invalid_event``). Converting an object
to one of these Structs therefore fails only on ``event``.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta, field

__all__ = ["AnyNameEvent", "CaptureBatch", "CaptureEvent"]

_STR = {"type": "string"}
_OBJECT = {"type": "object"}
_TIME = {"type": "string", "format": "date-time"}

Token = Annotated[
    Any,
    Meta(
        description="the project token; one that is not a string is a 401 (invalid_token)",
        extra_json_schema=_STR,
    ),
]
DistinctId = Annotated[
    Any,
    Meta(
        description="any JSON value is stringified (numbers included) and cut to 200 "
        "characters; null or empty is the event's drop",
        extra_json_schema={"anyOf": [_STR, {"type": "number"}]},
    ),
]
Properties = Annotated[
    Any,
    Meta(
        description="kept as the very dict decoded and enriched in place (a typed dict would be "
        "copied per event); one that is not an object is the event's drop",
        extra_json_schema=_OBJECT,
    ),
]
Timestamp = Annotated[
    Any,
    Meta(
        description="ISO 8601 (or RFC 2822); one that does not parse means now, never a refusal "
        "(in a historical batch it is the event's drop)",
        extra_json_schema=_TIME,
    ),
]
Offset = Annotated[
    Any,
    Meta(
        description="milliseconds before sending; a value that is not a number is ignored",
        extra_json_schema={"type": "integer"},
    ),
]
Uuid = Annotated[
    Any,
    Meta(
        description="kept when a valid UUID, else replaced by a new UUIDv7",
        extra_json_schema={"type": "string", "format": "uuid"},
    ),
]
PersonSet = Annotated[
    Any,
    Meta(
        description="merged over the same key of properties (this one wins); "
        "one that is not an object is ignored",
        extra_json_schema=_OBJECT,
    ),
]
Unset = Annotated[
    Any,
    Meta(
        description="property names (a list's strings, or an object's keys); "
        "anything else is ignored",
        extra_json_schema={"anyOf": [{"type": "array", "items": _STR}, _OBJECT]},
    ),
]
Batch = Annotated[
    Any,
    Meta(
        description="the events (CaptureEvent); a batch that is not a list is taken as one "
        "event, and an item that is not an object is that item's drop",
        extra_json_schema={"type": "array", "items": _OBJECT},
    ),
]
Historical = Annotated[
    Any,
    Meta(
        description="only the boolean true marks the batch historical",
        extra_json_schema={"type": "boolean"},
    ),
]
SentAt = Annotated[
    Any,
    Meta(
        description="when the batch was sent (ISO 8601, or epoch milliseconds), to correct the "
        "client's clock; a value that does not parse falls back to the query's _",
        extra_json_schema={"anyOf": [_TIME, {"type": "integer"}]},
    ),
]


class CaptureEvent(msgspec.Struct, gc=False):
    """One event as the SDKs send it. Fields not listed are accepted and ignored (they count
    towards the event's 1 MiB limit). In the order posthog-js sends them: msgspec looks each
    key up from the field after the last one found, so a conversion finds them first time.

    Where an event carries its project token (read when the envelope carries none):
    ``token``, else ``$token``, else ``api_key``, else ``properties.token``."""

    uuid: Uuid = None
    event: str | None = None
    """The name, cut to 200 characters; missing or empty is the event's drop, and one that is
    not a string is refused here: that event's drop (``invalid_event``), naming the field."""
    properties: Properties = None
    set: PersonSet = field(default=None, name="$set")
    set_once: PersonSet = field(default=None, name="$set_once")
    timestamp: Timestamp = None
    distinct_id: DistinctId = None
    dollar_distinct_id: DistinctId = field(default=None, name="$distinct_id")
    """Read when ``distinct_id`` is absent (then ``properties.distinct_id``)."""
    offset: Offset = None
    unset: Unset = field(default=None, name="$unset")
    token: Token = None
    dollar_token: Token = field(default=None, name="$token")
    api_key: Token = None


class AnyNameEvent(CaptureEvent, gc=False):
    """A `CaptureEvent` that takes any name, so converting an object to it never fails: what
    is read of an event whose name `CaptureEvent` refused (for its drop), and of the events
    searched for a token (an event with a refused name still gives its token)."""

    event: Any = None  # read as sent: the refused name is the drop's, never taken as a name


class CaptureBatch(msgspec.Struct, gc=False):
    """``{api_key|token, batch, historical_migration?, sent_at?}``: the events of ``batch``
    with the batch's token. A body may also be one event, or a JSON array of events."""

    batch: Batch
    api_key: Token = None
    """Wins over ``token``; either wins over the events' own tokens."""
    token: Token = None
    historical_migration: Historical = None
    sent_at: SentAt = None
