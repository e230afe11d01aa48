"""server/answers.AnswerCache: validity by versions and second, the byte bound."""

from __future__ import annotations

import time

from flagstaff.flags import FlagResult
from flagstaff.http.flags import v2_parts
from flagstaff.server.answers import ENTRY_OVERHEAD, PART_OVERHEAD, AnswerCache, parts_size
from flagstaff.server.caches import Fragments
from tests.memory import held_after


def _key(n: int, body: bytes = b"{}") -> tuple[object, ...]:
    return (1, False, None, None, "application/json", None, None, body + str(n).encode())


def test_an_answer_serves_only_at_the_versions_it_was_computed_at() -> None:
    cache = AnswerCache(4 << 20)
    cache.put(_key(1), (b'{"flags":{}',), 0, definitions=3, person=7, reads_clock=False)
    assert cache.get(_key(1), 3, 7) is not None
    assert cache.get(_key(1), 3, 8) is None  # a person write since
    assert len(cache) == 0  # and the stale entry is gone
    cache.put(_key(1), (b'{"flags":{}',), 0, definitions=3, person=8, reads_clock=False)
    assert cache.get(_key(1), 4, 8) is None  # a definitions change since
    assert cache.hits == 1 and cache.misses == 2


def test_an_answer_that_read_the_clock_serves_within_its_second() -> None:
    cache = AnswerCache(4 << 20)
    cache.put(_key(1), (b"x",), 1, 1, 1, reads_clock=True)
    entry = cache.get(_key(1), 1, 1)
    if entry is None:  # the second turned between put and get
        cache.put(_key(1), (b"x",), 1, 1, 1, reads_clock=True)
        entry = cache.get(_key(1), 1, 1)
    assert entry is not None and entry.second == int(time.time())
    entry.second -= 1  # as if computed a second ago
    assert cache.get(_key(1), 1, 1) is None


def test_the_bound_in_bytes_drops_the_oldest_first() -> None:
    head = (b"a" * 1000,)
    size = parts_size(head) + len(_key(0)[-1]) + ENTRY_OVERHEAD
    cache = AnswerCache(size * 3)
    for n in range(5):
        cache.put(_key(n), head, 1, 1, 1, reads_clock=False)
    assert len(cache) == 3 and cache.bytes <= cache.limit
    assert cache.get(_key(0), 1, 1) is None and cache.get(_key(1), 1, 1) is None
    assert cache.get(_key(4), 1, 1) is not None
    cache.put(_key(4), (b"a" * 2000,), 1, 1, 1, reads_clock=False)  # replaced, not counted twice
    assert cache.bytes <= cache.limit and len(cache) == 2
    cache.put(_key(9), (b"b" * (cache.limit + 1),), 1, 1, 1, reads_clock=False)
    assert cache.get(_key(9), 1, 1) is None  # larger than the whole cache: not kept


def test_parts_shared_with_the_definitions_cost_a_pointer() -> None:
    fragment = b"," + b"x" * 200
    head = (b'{"flags":{', memoryview(fragment)[1:], fragment, b"}")
    assert parts_size(head) == 4 * PART_OVERHEAD + len(b'{"flags":{') + len(b"}")


def test_the_least_recently_used_answer_goes_first() -> None:
    head = (b"a" * 1000,)
    cache = AnswerCache((parts_size(head) + len(b"{}0") + ENTRY_OVERHEAD) * 3)
    for n in range(3):
        cache.put(_key(n), head, 1, 1, 1, reads_clock=False)
    assert cache.get(_key(0), 1, 1) is not None  # used again: now the most recent
    cache.put(_key(3), head, 1, 1, 1, reads_clock=False)
    assert cache.get(_key(1), 1, 1) is None
    assert cache.get(_key(0), 1, 1) is not None and cache.get(_key(3), 1, 1) is not None


def _results(count: int) -> list[FlagResult]:
    return [
        FlagResult(
            key=f"flag-{n}",
            enabled=n % 2 == 0,
            variant=None,
            reason_code="condition_match",
            condition_index=0,
            reason_description="Matched condition set 1",
            payload=None,
            id=n,
            version=1,
            description=None,
        )
        for n in range(count)
    ]


def test_the_estimate_bounds_what_the_answers_take() -> None:
    """What the entries hold (tracemalloc) never passes the bytes counted against the bound,
    and the count never passes the bound, however many answers come in."""
    fragments = Fragments()
    results = _results(50)
    v2_parts(results, fragments)  # the definitions' fragments exist before any answer
    cache = AnswerCache(4 << 20)
    bodies = [
        b'{"api_key":"phc_x","distinct_id":"person-%d","groups":{"company":"company-%d"}}'
        % (n, n % 50)
        for n in range(6000)
    ]

    def put(n: int, body: bytes) -> None:
        cache.put(_key(n, body), v2_parts(results, fragments), 50, 1, 1, False)

    def fill() -> None:
        for n, body in enumerate(bodies[:2000]):
            put(n, body)

    held = held_after(fill)
    assert len(cache) == 2000 and held <= cache.bytes
    for n, body in enumerate(bodies):
        put(n, body)
        assert cache.bytes <= cache.limit
    assert len(cache) < len(bodies)
