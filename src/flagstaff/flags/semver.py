"""Version parsing for the semver_* operators, as PostHog's server parses versions.

A value is read as text (numbers as their JSON text), a leading ``v`` and surrounding
spaces are dropped, then its core (before the first ``-`` or ``+``) is padded to three
components with ``0`` and leading zeros are stripped from numeric components: ``3.08`` is
3.8.0, ``v2`` is 2.0.0. What remains must be a strict semantic version: ``1.2.3.4``,
``1..2.3``, ``1.2.3.`` and ``1.2.x`` are not versions and never match.

Ordering is semantic versioning's: a pre-release sorts before its release
(``1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-beta < 1.0.0``), numeric identifiers numerically
and before alphanumeric ones. Build metadata (``+build.7``) is kept and, as on the server
(Rust's ``semver`` crate), breaks ties, so ``1.0.0+a`` is not ``semver_eq`` to ``1.0.0``.

Ranges (tilde, caret, wildcard) follow the crate's requirements: a pre-release version
only satisfies a range whose lower bound is a pre-release of the same major.minor.patch.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from flagstaff.flags.values import to_text

_IDENTIFIER = re.compile(r"[0-9A-Za-z-]+")
_NUMBER = re.compile(r"0|[1-9][0-9]*")
RELEASE: tuple[tuple[int, int | str], ...] = ((2, 0),)
"""The pre-release key of a release: above every pre-release identifier list."""

PreKey = tuple[tuple[int, int | str], ...]


class Version(NamedTuple):
    major: int
    minor: int
    patch: int
    pre: PreKey
    build: PreKey

    @property
    def core(self) -> tuple[int, int, int]:
        return self.major, self.minor, self.patch

    @property
    def is_prerelease(self) -> bool:
        return self.pre != RELEASE


def _strip_zeros(part: str) -> str:
    if part and part.isascii() and part.isdigit():
        return part.lstrip("0") or "0"
    return part


def _identifiers(text: str, *, pre: bool) -> PreKey | None:
    key: list[tuple[int, int | str]] = []
    for part in text.split("."):
        if not _IDENTIFIER.fullmatch(part):
            return None
        if part.isdigit():
            if pre and not _NUMBER.fullmatch(part):
                return None
            key.append((0, int(part)))
        else:
            key.append((1, part))
    return tuple(key)


def _normalized(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    text = to_text(value)
    return (text[1:] if text.startswith("v") else text).strip()


def _strict(core: list[str], rest: str) -> Version | None:
    if len(core) != 3 or not all(_NUMBER.fullmatch(part) for part in core):
        return None
    build_at = rest.find("+")
    pre_text, build_text = (rest, "") if build_at < 0 else (rest[:build_at], rest[build_at + 1 :])
    pre: PreKey | None = RELEASE
    if pre_text:
        if not pre_text.startswith("-"):
            return None
        pre = _identifiers(pre_text[1:], pre=True)
    build: PreKey | None = ()
    if build_at >= 0:
        build = _identifiers(build_text, pre=False)
    if pre is None or build is None:
        return None
    return Version(int(core[0]), int(core[1]), int(core[2]), pre, build)


def parse_version_text(text: str) -> Version | None:
    """A normalised text (no leading ``v``, no surrounding spaces) as a version."""
    cut = min((i for i in (text.find("-"), text.find("+")) if i >= 0), default=len(text))
    core = [_strip_zeros(part) for part in text[:cut].split(".")]
    while len(core) < 3:
        core.append("0")
    return _strict(core, text[cut:])


@functools.lru_cache(maxsize=16384)
def _parse_text(value: str) -> Version | None:
    return parse_version_text((value[1:] if value.startswith("v") else value).strip())


def parse_version(value: object) -> Version | None:
    """Memoised for strings: the same version strings recur across persons."""
    if type(value) is str:
        return _parse_text(value)
    text = _normalized(value)
    return None if text is None else parse_version_text(text)


class Range(NamedTuple):
    """``low <= version < high`` (``high`` a release core; None: no upper bound)."""

    low: Version
    high: tuple[int, int, int] | None

    def contains(self, version: Version) -> bool:
        if version < self.low:
            return False
        if self.high is not None and version.core >= self.high:
            return False
        if version.is_prerelease:
            return self.low.is_prerelease and version.core == self.low.core
        return True


def _caret_high(major: int, minor: int, patch: int, given: int) -> tuple[int, int, int]:
    """The crate's caret upper bound for a requirement naming ``given`` components."""
    if major > 0 or given == 1:
        return (major + 1, 0, 0)
    if minor > 0 or given == 2:
        return (0, minor + 1, 0)
    return (0, 0, patch + 1)


def tilde_bounds(value: object) -> Range | None:
    """~1.2.3 is >=1.2.3 <1.3.0."""
    version = parse_version(value)
    if version is None:
        return None
    return Range(version, (version.major, version.minor + 1, 0))


def caret_bounds(value: object) -> Range | None:
    """^1.2.3 is <2.0.0, ^0.2.3 is <0.3.0, ^0.0.3 is <0.0.4."""
    version = parse_version(value)
    if version is None:
        return None
    return Range(version, _caret_high(*version.core, 3))


def _release(major: int, minor: int, patch: int) -> Version:
    return Version(major, minor, patch, RELEASE, ())


def wildcard_bounds(value: object) -> Range | None:
    """1.* is >=1.0.0 <2.0.0; 1.2.* is >=1.2.0 <1.3.0; * is every release. A value with
    no wildcard is a caret requirement on the components it names (1.2 is ^1.2)."""
    text = _normalized(value)
    if text is None or not text:
        return None
    parts = text.split(".")
    if len(parts) > 3:
        return None
    numbers: list[int] = []
    for position, part in enumerate(parts):
        if part in ("*", "x", "X"):
            if any(rest not in ("*", "x", "X") for rest in parts[position:]):
                return None
            break
        stripped = _strip_zeros(part)
        if not _NUMBER.fullmatch(stripped):
            if position == len(parts) - 1 and len(parts) == 3:
                version = parse_version_text(text)
                return None if version is None else Range(version, _caret_high(*version.core, 3))
            return None
        numbers.append(int(stripped))
    else:
        major, minor, patch = [*numbers, 0, 0][:3]
        return Range(_release(major, minor, patch), _caret_high(major, minor, patch, len(numbers)))
    if not numbers:
        return Range(_release(0, 0, 0), None)
    if len(numbers) == 1:
        return Range(_release(numbers[0], 0, 0), (numbers[0] + 1, 0, 0))
    return Range(_release(numbers[0], numbers[1], 0), (numbers[0], numbers[1] + 1, 0))
