"""The pure parts of `flags import`: reading the file and options, and the plan per flag."""

from __future__ import annotations

import io

import pytest

from flagstaff.application.flag_transfer import (
    TransferError,
    load_import_file,
    merge_group_types,
    plan_flag,
)
from flagstaff.application.flags import flag_from_input
from flagstaff.cli.transfer import Progress, parse_group_type_option
from flagstaff.flags.records import FeatureFlag, flag_json
from tests.stored_flags import stored_flag

GROUP_FLAG = {
    "key": "orgs",
    "filters": {
        "aggregation_group_type_index": 2,
        "groups": [{"properties": [], "rollout_percentage": 100}],
    },
}


def _stored(item: dict) -> FeatureFlag:
    return stored_flag(flag_from_input(item), 7, 3)


def test_group_type_options_and_mappings() -> None:
    assert parse_group_type_option(["0=company", "3=team", "0=company"]) == {
        0: "company",
        3: "team",
    }
    for bad in (["company"], ["5=x"], ["a=b"], ["1="], ["0=a", "0=b"]):
        with pytest.raises(TransferError):
            parse_group_type_option(bad)
    mapped = load_import_file(b'{"results": [], "group_type_mapping": {"1": "org"}}', "f")
    assert mapped.group_types == {1: "org"}
    listed = b'{"results": [], "group_type_mapping": [{"group_type_index": 0, "group_type": "a"}]}'
    assert load_import_file(listed, "f").group_types == {0: "a"}
    assert load_import_file(b"[]", "f").flags == []
    for bad_file in (b"{nope", b'{"x": 1}', b'{"results": [], "group_type_mapping": 3}'):
        with pytest.raises(TransferError):
            load_import_file(bad_file, "f")
    assert merge_group_types({1: "org"}, {1: "org", 2: "team"}) == {1: "org", 2: "team"}
    with pytest.raises(TransferError):
        merge_group_types({1: "org"}, {1: "company"})


def test_plan_create_keeps_created_at_and_needs_group_types() -> None:
    item = {"key": "a", "filters": {"groups": []}, "created_at": "2025-01-01T02:00:00+02:00"}
    planned = plan_flag(item, 1, None, {})
    assert planned.action == "create" and planned.flag is not None
    assert planned.created_at == "2025-01-01T00:00:00Z"
    assert plan_flag({**item, "created_at": "yesterday"}, 1, None, {}).created_at is None
    rejected = plan_flag(GROUP_FLAG, 1, None, {0: "company"})
    assert rejected.action == "rejected" and "--group-type 2=NAME" in rejected.detail
    assert plan_flag(GROUP_FLAG, 1, None, {2: "org"}).action == "create"


def test_plan_against_a_stored_flag() -> None:
    stored = _stored(GROUP_FLAG)
    exported = {**flag_json(stored), "id": 99, "version": 1, "created_at": "2030-01-01T00:00:00Z"}
    same = plan_flag(exported, 1, stored, {2: "org"})
    assert same.action == "unchanged" and same.flag is None and same.flag_id == 7
    changed = plan_flag({**GROUP_FLAG, "active": False}, 1, stored, {2: "org"})
    assert changed.action == "update" and changed.flag is not None
    assert changed.version == 3 and changed.flag.active is False


def test_plan_skips_deleted_and_rejects_invalid_flags() -> None:
    assert plan_flag({"key": "x", "deleted": True}, 4, None, {}).action == "skipped"
    bad = plan_flag({"key": "bad key"}, 4, None, {})
    assert bad.action == "rejected" and bad.label == "bad key" and "key" in bad.detail
    assert plan_flag("nonsense", 4, None, {}).label == "#4"


def test_progress_draws_only_when_enabled() -> None:
    quiet = io.StringIO()
    Progress("importing", 10, False, quiet).update(10)
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    bar = Progress("importing", 200, True, shown)
    for done in range(1, 201):
        bar.update(done)
    text = shown.getvalue()
    assert text.endswith("200/200\n") and text.count("\r") == 101  # once per percent, 0 to 100
