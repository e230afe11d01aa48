"""What the PostgreSQL modules share below the dialect: text without NUL and the statement that
moves a project's definitions version (and tells the other nodes, ``pg_notify``)."""

from __future__ import annotations

BUMP_DEFINITIONS = (
    "WITH v AS (INSERT INTO definitions_version (project_id, version) VALUES ($1, 1) "
    "ON CONFLICT (project_id) DO UPDATE SET version = definitions_version.version + 1 "
    "RETURNING version) SELECT pg_notify('flagstaff_definitions', $2) FROM v"
)


def pg_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL: it becomes U+FFFD (as normalisation does for ids)."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value
