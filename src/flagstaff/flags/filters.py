"""Binding compiled operator tests to the properties they read.

Person filters read the person's properties, falling back to the request's ``distinct_id``
for the key ``distinct_id``; group filters read one group type's properties, falling back
to the request's group key for ``$group_key``. No request dictionary is copied.
"""

from __future__ import annotations

from typing import Any

from flagstaff.flags.context import MISSING, Context, Matcher
from flagstaff.flags.operators import Test, compile_test


def _person_matcher(key: str, test: Test, if_missing: bool) -> Matcher:
    if key == "distinct_id":

        def match_distinct_id(ctx: Context) -> bool:
            value = ctx.person.get(key, MISSING)
            return test(ctx.distinct_id if value is MISSING else value)

        return match_distinct_id

    def match_person(ctx: Context) -> bool:
        value = ctx.person.get(key, MISSING)
        if value is MISSING:
            return if_missing
        return test(value)

    return match_person


def _group_matcher(group_name: str | None, key: str, test: Test, if_missing: bool) -> Matcher:
    if group_name is None:
        return lambda _ctx: if_missing
    fallback_to_key = key == "$group_key"

    def match_group(ctx: Context) -> bool:
        properties = ctx.group_properties.get(group_name)
        value = MISSING if properties is None else properties.get(key, MISSING)
        if value is MISSING:
            group_key = ctx.groups.get(group_name) if fallback_to_key else None
            if group_key is None:
                return if_missing
            value = group_key
        return test(value)

    return match_group


def property_matcher(prop: dict[str, Any], group_name: str | None, *, person: bool) -> Matcher:
    """Matcher for a person (``person=True``) or group property filter."""
    operator = prop.get("operator") or "exact"
    key = prop.get("key")
    key = key if isinstance(key, str) else str(key)
    test, if_missing = compile_test(str(operator), prop.get("value"))
    if person:
        return _person_matcher(key, test, if_missing)
    return _group_matcher(group_name, key, test, if_missing)
