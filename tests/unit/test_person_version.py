"""The shared person version and the flag-context cache it keeps valid."""

from __future__ import annotations

from pathlib import Path

import msgspec

from flagstaff.store.base import FlagContext
from flagstaff.store.sqlite.person_version import FlagContextCache, context_size, person_version
from tests.memory import held_after, stored_persons

LIMIT = 1 << 20


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
    cache = FlagContextCache(version, LIMIT)
    assert cache.get("u") is None
    cache.put("u", _context("free"), cache.version, 100)
    assert cache.get("u") == _context("free")
    person_version(tmp_path / "db").bump()
    assert cache.get("u") is None
    assert cache.hits == 1 and cache.misses == 2


def test_a_context_read_before_a_change_is_not_kept(tmp_path: Path) -> None:
    version = person_version(tmp_path / "db")
    cache = FlagContextCache(version, LIMIT)
    assert cache.get("u") is None
    seen = cache.version
    version.bump()  # a commit lands while the context is being read
    assert cache.get("v") is None  # another request notices the move first
    cache.put("u", _context("free"), seen, 100)
    assert cache.get("u") is None


def test_past_its_bytes_the_least_recently_used_go_first(tmp_path: Path) -> None:
    size = context_size(1000)
    cache = FlagContextCache(person_version(tmp_path / "db"), size * 3)
    cache.get("first")
    for n in range(3):
        cache.put(n, _context("x"), cache.version, size)
    assert cache.bytes == size * 3 and cache.get(0) == _context("x")  # 0: now the most recent
    cache.put(2, _context("z"), cache.version, size)  # the same key again: not counted twice
    assert cache.bytes == size * 3
    cache.put("last", _context("y"), cache.version, size)
    assert cache.get(1) is None  # the least recently used went, and only it
    assert cache.get(0) == _context("x") and cache.get("last") == _context("y")
    assert cache.bytes == size * 3 and len(cache) == 3
    cache.put("huge", _context("h"), cache.version, size * 4)  # larger than the whole cache
    assert cache.get("huge") is None and cache.get("last") == _context("y")


def test_the_estimate_bounds_what_the_contexts_take(tmp_path: Path) -> None:
    """What the kept contexts hold (tracemalloc) never passes the bytes counted against the
    bound, and the count never passes the bound."""
    stored = stored_persons(3000)
    cache = FlagContextCache(person_version(tmp_path / "db"), 2 << 20)
    cache.get("first")

    def put(did: str, text: bytes) -> None:
        context = FlagContext(msgspec.json.decode(text), {}, {}, frozenset(), 1)
        cache.put((1, did, False, False), context, cache.version, context_size(len(text)))

    def fill() -> None:
        for did, text in stored[:1000]:
            put(did, text)

    held = held_after(fill)
    assert len(cache) == 1000 and held <= cache.bytes
    for did, text in stored:
        put(did, text)
        assert cache.bytes <= cache.limit
    assert len(cache) < len(stored)
