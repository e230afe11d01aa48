"""The shared person version and the flag-context cache it keeps valid."""

from __future__ import annotations

from pathlib import Path

from flagstaff.store.base import FlagContext
from flagstaff.store.sqlite.person_version import MAX_CONTEXTS, FlagContextCache, person_version


def _context(plan: str) -> FlagContext:
    return FlagContext({"plan": plan}, {}, {}, frozenset(), 1)


def test_every_opening_of_a_database_shares_one_version(tmp_path: Path) -> None:
    writer, reader = person_version(tmp_path / "db"), person_version(tmp_path / "db")
    assert reader.cell.value == 0
    writer.bump()
    writer.bump()
    assert reader.cell.value == 2
    assert person_version(tmp_path / "other").cell.value == 0
    writer.close()
    reader.close()


def test_a_context_is_served_until_the_version_moves(tmp_path: Path) -> None:
    version = person_version(tmp_path / "db")
    cache = FlagContextCache(version)
    assert cache.get("u") is None
    cache.put("u", _context("free"), cache.version)
    assert cache.get("u") == _context("free")
    person_version(tmp_path / "db").bump()
    assert cache.get("u") is None
    assert cache.hits == 1 and cache.misses == 2


def test_a_context_read_before_a_change_is_not_kept(tmp_path: Path) -> None:
    version = person_version(tmp_path / "db")
    cache = FlagContextCache(version)
    assert cache.get("u") is None
    seen = cache.version
    version.bump()  # a commit lands while the context is being read
    assert cache.get("v") is None  # another request notices the move first
    cache.put("u", _context("free"), seen)
    assert cache.get("u") is None


def test_the_cache_starts_over_when_full(tmp_path: Path) -> None:
    cache = FlagContextCache(person_version(tmp_path / "db"))
    cache.get("first")
    for n in range(MAX_CONTEXTS):
        cache.put(n, _context("x"), cache.version)
    cache.put("last", _context("y"), cache.version)
    assert cache.get(0) is None and cache.get("last") == _context("y")
