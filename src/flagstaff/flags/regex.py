"""Bounded regular expressions for the regex / not_regex operators.

Patterns run on RE2 (the ``google-re2`` package): matching is linear in the length of the
value, so no pattern or value can stall a request. RE2 has the syntax of the Rust ``regex``
crate that PostHog's server uses, minus look-around and back-references; a pattern RE2
cannot compile (those, or invalid syntax) never matches, as an invalid pattern does on the
server. Perl classes (``\\d``, ``\\w``, ``\\s``) are ASCII-only in RE2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import re2
from re2 import _re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.never_capture = True
_OPTIONS.max_mem = 4 << 20
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED

Searcher = Callable[[str], bool]


@functools.lru_cache(maxsize=256)
def compile_search(pattern: str) -> Searcher | None:
    """A function telling whether ``pattern`` occurs in a text; None if it cannot compile.

    Shared by every filter with the same pattern, and it remembers its last answer: flags
    often repeat a filter (say, on the email), so one request asks it about the same value
    several times in a row. The last text is kept alive with its answer, so an identity
    test is enough.
    """
    try:
        compiled = _re2.RE2(pattern.encode("utf-8", "surrogatepass"), _OPTIONS)
    except Exception:
        return None
    if not compiled.ok():
        return None
    match = compiled.Match
    last: tuple[str | None, bool] = (None, False)

    def search(text: str) -> bool:
        nonlocal last
        seen, found = last
        if seen is text:
            return found
        data = text.encode("utf-8", "surrogatepass")
        found = match(_UNANCHORED, data, 0, len(data))[0][0] != -1
        last = (text, found)
        return found

    return search


def is_valid_pattern(pattern: str) -> bool:
    return compile_search(pattern) is not None
