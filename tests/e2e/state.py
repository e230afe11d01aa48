"""Everything a project holds, read back through the management API, and exact checks on it.

The end-to-end tests run each scenario on a fresh server, so "nothing else exists" can be
checked: every event is listed, every distinct id found in an event (or named by the test) is
resolved to its person, and the group types, groups and ingestion warnings are compared whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.server import Api

P = "/api/projects/@current"
# Event properties that name another distinct id (identify and alias merges).
_ID_PROPERTIES = ("$anon_distinct_id", "alias")


def _ok(response: Any) -> Any:
    assert response.status_code == 200, f"{response.request.url}: {response.text}"
    return response.json()


@dataclass(frozen=True)
class ProjectState:
    events: list[dict[str, Any]]
    """Oldest first."""
    persons: dict[str, dict[str, Any]]
    """By person uuid: every person behind a distinct id that an event names (as its
    ``distinct_id``, ``$anon_distinct_id`` or ``alias``) or that the test names."""
    person_of: dict[str, str | None]
    """Distinct id -> person uuid (None: no person) for the distinct ids looked up."""
    group_types: dict[str, int]
    warnings: list[dict[str, Any]]

    @classmethod
    def read(cls, api: Api, extra_ids: Iterable[str] = ()) -> ProjectState:
        events: list[dict[str, Any]] = []
        url: str | None = f"{P}/events/?limit=1000"
        while url:
            page = _ok(api.get(url))
            events.extend(page["results"])
            url = page["next"]
        events.reverse()
        persons: dict[str, dict[str, Any]] = {}
        person_of: dict[str, str | None] = {}
        named = {e["distinct_id"] for e in events}
        for e in events:
            for key in _ID_PROPERTIES:
                value = e["properties"].get(key)
                if isinstance(value, str) and value:
                    named.add(value)
        for distinct_id in sorted(named | set(extra_ids)):
            found = _ok(api.get(f"{P}/persons/", params={"distinct_id": distinct_id}))["results"]
            person_of[distinct_id] = found[0]["uuid"] if found else None
            if found:
                persons[found[0]["uuid"]] = found[0]
        group_types = {
            t["group_type"]: t["group_type_index"] for t in _ok(api.get(f"{P}/groups_types/"))
        }
        warnings = _ok(api.get(f"{P}/ingestion_warnings/", params={"limit": 1000}))["results"]
        return cls(events, persons, person_of, group_types, warnings)

    def names(self) -> Counter[tuple[str, str]]:
        """(event name, distinct id) of every event, with multiplicity."""
        return Counter((e["event"], e["distinct_id"]) for e in self.events)

    def only(self, name: str, distinct_id: str | None = None) -> dict[str, Any]:
        found = self.all(name, distinct_id)
        assert len(found) == 1, f"expected one {name!r} event for {distinct_id}, got {found}"
        return found[0]

    def all(self, name: str, distinct_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["event"] == name and (distinct_id is None or e["distinct_id"] == distinct_id)
        ]

    def person(self, distinct_id: str) -> dict[str, Any]:
        uuid = self.person_of.get(distinct_id)
        assert uuid is not None, f"{distinct_id} has no person"
        return self.persons[uuid]

    def assert_people(self, expected: Mapping[str, set[str]]) -> None:
        """The persons are exactly these: a name of the test's choosing -> its distinct ids."""
        actual = sorted(sorted(p["distinct_ids"]) for p in self.persons.values())
        assert actual == sorted(sorted(ids) for ids in expected.values()), self.persons
        for ids in expected.values():
            assert ids <= set(self.person_of), f"{ids - set(self.person_of)} not looked up"
            assert len({self.person_of[i] for i in ids}) == 1, (ids, self.person_of)

    def assert_no_person(self, *distinct_ids: str) -> None:
        for distinct_id in distinct_ids:
            assert distinct_id in self.person_of, f"{distinct_id} was not looked up"
            assert self.person_of[distinct_id] is None, f"{distinct_id} has a person"

    def assert_events_belong_to_people(self) -> None:
        """Each event's person is the one its distinct id resolves to now (merges included)."""
        for e in self.events:
            expected = self.person_of[e["distinct_id"]]
            actual = e["person"]["uuid"] if e["person"] else None
            assert actual == expected, e


def group(api: Api, index: int, key: str) -> dict[str, Any] | None:
    r = api.get(f"{P}/groups/find", params={"group_type_index": index, "group_key": key})
    if r.status_code == 404:
        return None
    return _ok(r)


def assert_props(
    actual: Mapping[str, Any], expected: Mapping[str, Any], allowed_extra: Iterable[str] = ()
) -> None:
    """``actual`` holds ``expected`` exactly, plus only keys from ``allowed_extra``."""
    for key, value in expected.items():
        assert key in actual, f"{key} missing from {dict(actual)}"
        assert actual[key] == value, f"{key}: {actual[key]!r} != {value!r} in {dict(actual)}"
    extra = set(actual) - set(expected) - set(allowed_extra)
    assert not extra, f"unexpected properties {sorted(extra)} in {dict(actual)}"
