"""Connecting to PostgreSQL: the URL's own options and the settings of every pooled connection."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

DEFAULT_POOL_SIZE = 10
DEFAULT_INGEST_LANES = 1
"""Ingest transactions in flight per store by default. One lane makes the largest groups, and
each transaction costs the worker its round trips whatever its size (docs/benchmarks.md,
"PostgreSQL: one ingest lane, no reset query, generic plans")."""


POOL_SETTINGS = {"plan_cache_mode": "force_generic_plan"}
"""Every statement here is written for a generic plan (point look-ups, unnest() joins on
primary keys); left to choose, PostgreSQL re-plans /flags' context statement on every call."""


async def keep_session(conn: asyncpg.Connection) -> None:
    """Replaces asyncpg's reset query on release (advisory unlocks, ``CLOSE ALL``, ``UNLISTEN``,
    ``RESET ALL``): one round trip per pooled call. Pooled connections set no session state:
    migrations and LISTEN have connections of their own, and locks are transaction-scoped.
    asyncpg still rolls back a transaction left open."""


def split_url(url: str) -> tuple[str, dict[str, int]]:
    """(the DSN for asyncpg, our own options) of a ``postgresql://`` URL."""
    parts = urlsplit(url)
    options = {"pool_size": DEFAULT_POOL_SIZE, "ingest_lanes": 0}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in options:
            options[name] = max(1, int(value))
        else:
            rest.append((name, value))
    if not options["ingest_lanes"]:
        options["ingest_lanes"] = DEFAULT_INGEST_LANES
    return urlunsplit(parts._replace(query=urlencode(rest))), options
