"""Binding compiled operator tests to the properties they read.

Person filters read the person's properties, falling back to the request's ``distinct_id``
for the key ``distinct_id``; group filters read one group type's properties, falling back
to the request's group key for ``$group_key``. No request dictionary is copied.

A condition's filters are kept as checks (plain data) so that flags/flag_codegen.py can write
them inline; ``matcher()`` gives the same decision as a closure.
"""

from __future__ import annotations

from typing import Any

from flagstaff.flags.context import MISSING, Context, Matcher
from flagstaff.flags.operators import Test, compile_test


class PropertyCheck:
    """One property filter: ``test`` decides a present value, ``if_missing`` an absent key.

    ``group_name`` is None for person filters (``person``) and for group filters on a group
    type the project does not know, which never see a value.
    """

    __slots__ = ("group_name", "if_missing", "key", "person", "test")

    def __init__(
        self, key: str, test: Test, if_missing: bool, *, person: bool, group_name: str | None
    ) -> None:
        self.key = key
        self.test = test
        self.if_missing = if_missing
        self.person = person
        self.group_name = group_name

    def matcher(self) -> Matcher:
        if self.person:
            return _person_matcher(self.key, self.test, self.if_missing)
        return _group_matcher(self.group_name, self.key, self.test, self.if_missing)


class DependencyCheck:
    """A ``type: flag`` filter: the value the flag at ``target`` recorded in this request
    (False when it did not match) compared with ``expected`` (True, False or a variant);
    ``expected`` None never matches."""

    __slots__ = ("expected", "target")

    def __init__(self, target: int, expected: bool | str | None) -> None:
        self.target = target
        self.expected = expected

    def matcher(self) -> Matcher:
        target, expected = self.target, self.expected
        if expected is True:
            return lambda ctx: ctx.values.get(target, False) is not False
        if expected is False:
            return lambda ctx: ctx.values.get(target, False) is False
        if isinstance(expected, str):
            return lambda ctx: ctx.values.get(target, False) == expected
        return lambda _ctx: False


class CallCheck:
    """Any other filter (cohort membership): a matcher called as it is."""

    __slots__ = ("call",)

    def __init__(self, call: Matcher) -> None:
        self.call = call

    def matcher(self) -> Matcher:
        return self.call


Check = PropertyCheck | DependencyCheck | CallCheck


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


def property_check(prop: dict[str, Any], group_name: str | None, *, person: bool) -> PropertyCheck:
    """Check for a person (``person=True``) or group property filter."""
    operator = prop.get("operator") or "exact"
    key = prop.get("key")
    key = key if isinstance(key, str) else str(key)
    test, if_missing = compile_test(str(operator), prop.get("value"))
    return PropertyCheck(
        key, test, if_missing, person=person, group_name=None if person else group_name
    )
