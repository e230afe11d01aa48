"""Bounded regular expressions for the regex / not_regex operators.

PostHog's server runs patterns on a backtracking engine (Rust ``fancy_regex``) with a step
limit, so it stores and evaluates look-around and back-references. Here a pattern runs on
RE2 (``google-re2``) when RE2 can compile it, and otherwise on the ``regex`` package, a
backtracking engine, with a per-call timeout. A pattern neither can compile never matches.

Work is bounded whatever the pattern and value:

- RE2 is linear in the value, but its cost per character grows with the compiled pattern
  (``a.{500}b`` compiles to ~4,000 instructions and ran ~5 s on a 1 MB value). A value is
  searched only when ``len(value) * program size <= RE2_STEP_BUDGET``: about 400,000
  characters for a short pattern such as ``needle$``, about a thousand for ``a.{500}b``.
- The backtracking engine searches values of at most ``BACKTRACKING_MAX_INPUT`` characters,
  for at most ``BACKTRACKING_TIMEOUT`` seconds.

A search that exceeds its budget is undecided (``search`` answers None); the operators
then treat the filter as not matching, for ``regex`` and ``not_regex`` alike, as the
server does when its step limit is hit. Perl classes (``\\d``, ``\\w``, ``\\s``) are
ASCII-only in RE2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import re2
import regex as backtracking
from re2 import _re2

RE2_STEP_BUDGET = 4_000_000
"""Characters times compiled instructions one RE2 search may cost (a few ms at most)."""
MAX_INPUT = 1 << 20
"""No value longer than this (in characters) is searched, whatever the pattern."""
BACKTRACKING_MAX_INPUT = 64 * 1024
BACKTRACKING_TIMEOUT = 0.02
"""Seconds one backtracking search may take."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.never_capture = True
_OPTIONS.max_mem = 4 << 20
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED

Searcher = Callable[[str], "bool | None"]
"""True or False: whether the pattern occurs in the text; None: over budget, undecided."""


def _re2_search(pattern: str) -> Searcher | None:
    try:
        compiled = _re2.RE2(pattern.encode("utf-8", "surrogatepass"), _OPTIONS)
    except Exception:
        return None
    if not compiled.ok():
        return None
    match = compiled.Match
    max_input = min(MAX_INPUT, RE2_STEP_BUDGET // max(1, compiled.ProgramSize()))

    def search(text: str) -> bool | None:
        if len(text) > max_input:
            return None
        data = text.encode("utf-8", "surrogatepass")
        return match(_UNANCHORED, data, 0, len(data))[0][0] != -1

    return search


def _backtracking_search(pattern: str) -> Searcher | None:
    try:
        compiled = backtracking.compile(pattern)
    except Exception:
        return None
    find = compiled.search

    def search(text: str) -> bool | None:
        if len(text) > BACKTRACKING_MAX_INPUT:
            return None
        try:
            return find(text, timeout=BACKTRACKING_TIMEOUT) is not None
        except TimeoutError:
            return None

    return search


@functools.lru_cache(maxsize=256)
def compile_search(pattern: str) -> Searcher | None:
    """A function telling whether ``pattern`` occurs in a text (None when over budget);
    None if no engine can compile the pattern.

    Shared by every filter with the same pattern, and it remembers its last answer: flags
    often repeat a filter (say, on the email), so one request asks it about the same value
    several times in a row. The last text is kept alive with its answer, so an identity
    test is enough.
    """
    inner = _re2_search(pattern) or _backtracking_search(pattern)
    if inner is None:
        return None
    last: tuple[str | None, bool | None] = (None, None)

    def search(text: str) -> bool | None:
        nonlocal last
        seen, found = last
        if seen is text:
            return found
        found = inner(text)
        last = (text, found)
        return found

    return search


def is_valid_pattern(pattern: str) -> bool:
    return compile_search(pattern) is not None
