"""Normalized events for tests that feed the rules or a store directly (no HTTP).

Every field an :class:`~flagstaff.ingest.model.Event` has is set here, with the default named
in the signature, so a test states only what it is about.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from flagstaff.ingest.model import Event

T0 = 1_700_000_000_000
"""The default timestamp (ms) of test events: 2023-11-14T22:13:20Z."""


def seq_uuid(n: int, lane: int = 0) -> str:
    """A UUIDv7-shaped uuid numbered ``n``; ``lane`` (0-15) keeps sequences of one test apart."""
    return f"01930000-0000-7000-800{lane:x}-{n:012x}"


def event(
    name: str,
    distinct_id: str,
    *,
    props: dict[str, Any] | None = None,
    set: dict[str, Any] | None = None,
    set_once: dict[str, Any] | None = None,
    unset: list[str] | None = None,
    ts: int = T0,
    received_ms: int | None = None,
    uid: str | None = None,
    process_person: bool = True,
    historical: bool = False,
) -> Event:
    """An event as normalization hands it on.

    ``props`` is copied; ``received_ms`` defaults to ``ts``; ``uid`` to a random uuid4.
    """
    return Event(
        uuid=uid or str(uuid.uuid4()),
        event=name,
        distinct_id=distinct_id,
        properties=dict(props or {}),
        timestamp_ms=ts,
        received_ms=ts if received_ms is None else received_ms,
        set=set,
        set_once=set_once,
        unset=unset,
        process_person=process_person,
        historical=historical,
    )


def random_person_event(rng: random.Random, n: int) -> Event:
    """The ``n``-th event of a random mix of pageviews, identifies, aliases and merges over a
    dozen distinct ids plus two illegal ones, with random $set/$set_once/$unset."""
    ids = [f"u{i}" for i in range(12)] + ["anonymous", "0"]
    did = rng.choice(ids)
    props: dict[str, Any] = {"$current_url": f"/p/{rng.randrange(3)}"}
    name = rng.choice(
        ["$pageview", "$pageview", "clicked", "$identify", "$create_alias", "$merge_dangerously"]
    )
    if name == "$identify":
        props["$anon_distinct_id"] = rng.choice(ids)
    elif name in ("$create_alias", "$merge_dangerously"):
        props["alias"] = rng.choice(ids)
    return event(
        name,
        did,
        props=props,
        ts=T0 + n,
        uid=seq_uuid(n),
        set={"k": rng.randrange(5), f"p{rng.randrange(4)}": n} if rng.random() < 0.7 else None,
        set_once={"first": n} if rng.random() < 0.3 else None,
        unset=[f"p{rng.randrange(4)}"] if rng.random() < 0.1 else None,
        process_person=rng.random() < 0.9,
    )
