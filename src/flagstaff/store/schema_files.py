"""An engine's versioned SQL files: ``<package>/migrations/NNNN_name.sql``, applied in order."""

from __future__ import annotations

from importlib import resources

import msgspec


class Migration(msgspec.Struct, frozen=True):
    number: int
    name: str
    """The file name, recorded in ``schema_migrations``."""
    sql: str


def pending(package: str, done: set[int]) -> list[Migration]:
    """The migrations of ``package`` (e.g. ``flagstaff.store.sqlite``) not in ``done``, in order."""
    folder = resources.files(package) / "migrations"
    out = []
    for name in sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql")):
        number = int(name.split("_", 1)[0])
        if number not in done:
            out.append(Migration(number, name, (folder / name).read_text()))
    return out
