"""How a /flags request's persons and groups are seen: the request's group keys, and the
stored properties overlaid with what the request sends (and GeoIP). Pure; /flags, OFREP and
``explain`` build their evaluation requests with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flagstaff.flags.values import json_text

__all__ = ["group_keys", "group_properties_for", "person_properties_for"]


def group_keys(groups: Mapping[str, Any]) -> dict[str, str]:
    """The request's group keys as text: strings as they are, numbers as their JSON text
    (``42``, ``"1.5"``). Any other value (``true``, null, a list, an object) names no group,
    as in PostHog's flags service, which takes a key only from a string or a number."""
    return {
        name: key if type(key) is str else json_text(key)
        for name, key in groups.items()
        if type(key) in _KEY_TYPES
    }


_KEY_TYPES = (str, int, float)
"""JSON values that are group keys (``type(True)`` is bool, not int: booleans are left out)."""


def person_properties_for(
    stored: dict[str, Any], geo: dict[str, Any], sent: dict[str, Any]
) -> dict[str, Any]:
    """GeoIP values fill gaps < stored properties < the request's ``person_properties``."""
    properties = stored
    if geo:
        properties = {**geo, **properties}
    if sent:
        properties = {**properties, **sent}
    return properties


def group_properties_for(
    groups: Mapping[str, Any],
    group_type_index: Mapping[str, int],
    stored: Mapping[str, dict[str, Any]],
    sent: Mapping[str, Any],
) -> dict[str, dict[str, Any]]:
    """Each requested group type's stored properties, overlaid with the request's."""
    properties: dict[str, dict[str, Any]] = {}
    for name in groups:
        index = group_type_index.get(name)
        stored_props = stored.get(str(index), {}) if index is not None else {}
        extra = sent.get(name)
        properties[name] = {**stored_props, **extra} if isinstance(extra, dict) else stored_props
    return properties
