"""The shapes ingestion passes around: a request envelope, a normalized event, a dropped event."""

from __future__ import annotations

from typing import Any, final

import msgspec

from flagstaff.ingest.body import CaptureEvent

__all__ = ["Drop", "Envelope", "Event"]


class Envelope(msgspec.Struct):
    """One capture request after decoding: its project token and its raw event items."""

    token: str
    events: list[Any]
    """Raw items as sent; those that are not objects become `Drop`s in `normalize_event`."""
    historical: bool
    sent_at_ms: int | None
    fields: list[CaptureEvent] | None = None
    """`events` read as `CaptureEvent`s in one call, when every item could be; else None (each
    item is read alone, and a refused one is its drop)."""


@final  # lets `type(x) is Event` narrow both branches for the type checker
class Event(msgspec.Struct):
    """An event ready to store, as the person and group rules read it."""

    uuid: str
    """The client's uuid when valid (lowercase canonical form), else a new UUIDv7."""
    event: str
    distinct_id: str
    """Stringified and cut to 200 characters."""
    properties: dict[str, Any]
    """As sent (the same dict), plus `$ip` unless present, `$geoip_*` filling gaps, and
    `$set`/`$set_once` merged with their top-level counterparts."""
    timestamp_ms: int
    """After clock-skew correction (`now + timestamp - sent_at`, `offset`, future clamp)."""
    received_ms: int
    set: dict[str, Any] | None
    """`properties.$set` merged with a top-level `$set` (which wins, as in PostHog). None when
    absent, and for events that update no person: `$process_person_profile` false and group
    identify. Device and campaign properties lifted onto the person are the person rules' job."""
    set_once: dict[str, Any] | None
    """Like `set`, for `$set_once`."""
    unset: list[str] | None
    """`$unset` keys (a list, or an object's keys) from properties and the top level."""
    process_person: bool
    """False only when `$process_person_profile` is the boolean false."""
    historical: bool
    properties_json: bytes | None = None
    """`properties` encoded as JSON, when already done (the store then skips encoding them);
    on the way to the ingest writer, `properties` keeps only the keys the rules read."""


@final  # lets `type(x) is Drop` narrow both branches for the type checker
class Drop(msgspec.Struct):
    """An event answered with 200 but not ingested: recorded as an ingestion warning."""

    reason: str
    detail: str
    uuid: str | None
    """The uuid the client sent, if it sent a string."""
    digest: str
    """Short stable digest of the raw event (16 hex characters)."""
    event: str | None
    distinct_id: str | None

    @classmethod
    def of(cls, event: Event, reason: str, detail: str) -> Drop:
        """The drop of an event that was normalised but is not to be stored."""
        return cls(
            reason=reason,
            detail=detail,
            uuid=event.uuid,
            digest=event.uuid,
            event=event.event,
            distinct_id=event.distinct_id,
        )
