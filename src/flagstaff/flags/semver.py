"""Version parsing for the semver_* operators, following posthog-python.

``v1.2`` is (1, 2, 0); a pre-release or build suffix is ignored; parts past the third are
ignored. Leading zeros, which posthog-python rejects, are read as numbers like the server.
"""

from __future__ import annotations

import functools

Version = tuple[int, int, int]


def _number(part: str) -> int:
    if not part or not part.isascii() or not part.isdigit():
        raise ValueError(part)
    return int(part)


def parse_version(value: object) -> Version | None:
    if isinstance(value, bool) or value is None:
        return None
    return parse_version_text(value if isinstance(value, str) else str(value))


@functools.lru_cache(maxsize=16384)
def parse_version_text(value: str) -> Version | None:
    """Memoised: the same version strings recur across persons."""
    text = value.strip().lstrip("vV")
    text = text.split("-")[0].split("+")[0]
    parts = text.split(".")
    try:
        major = _number(parts[0])
        minor = _number(parts[1]) if len(parts) > 1 and parts[1] else 0
        patch = _number(parts[2]) if len(parts) > 2 and parts[2] else 0
    except ValueError:
        return None
    return major, minor, patch


def tilde_bounds(value: object) -> tuple[Version, Version] | None:
    """~1.2.3 is >=1.2.3 <1.3.0."""
    version = parse_version(value)
    if version is None:
        return None
    major, minor, _ = version
    return version, (major, minor + 1, 0)


def caret_bounds(value: object) -> tuple[Version, Version] | None:
    """^1.2.3 is <2.0.0, ^0.2.3 is <0.3.0, ^0.0.3 is <0.0.4."""
    version = parse_version(value)
    if version is None:
        return None
    major, minor, patch = version
    if major > 0:
        return version, (major + 1, 0, 0)
    if minor > 0:
        return version, (0, minor + 1, 0)
    return version, (0, 0, patch + 1)


def wildcard_bounds(value: object) -> tuple[Version, Version] | None:
    """1.* is >=1.0.0 <2.0.0; 1.2.* is >=1.2.0 <1.3.0."""
    cleaned = str(value).strip().lstrip("vV").replace("*", "").rstrip(".")
    parts = [part for part in cleaned.split(".") if part]
    try:
        numbers = [_number(part) for part in parts[:3]]
    except ValueError:
        return None
    if not numbers:
        return None
    if len(numbers) == 1:
        return (numbers[0], 0, 0), (numbers[0] + 1, 0, 0)
    if len(numbers) == 2:
        return (numbers[0], numbers[1], 0), (numbers[0], numbers[1] + 1, 0)
    major, minor, patch = numbers
    return (major, minor, patch), (major, minor, patch + 1)
