"""flags/ofrep.py: evaluation contexts, and engine results as OFREP values, variants, reasons
and payloads (the HTTP side is tests/api/test_ofrep.py)."""

from __future__ import annotations

from typing import Any

import pytest

from flagstaff.flags import EvalRequest, compile_flags, evaluate, ofrep
from tests.unit.buckets import flag_bucket

MAPPING = {"0": "company"}


def _flag(key: str, *groups: dict[str, Any], flag_id: int = 1, **filters: Any) -> dict:
    return {"id": flag_id, "key": key, "active": True, "version": 1,
            "filters": {"groups": list(groups), **filters}}  # fmt: skip


def _cond(*properties: dict[str, Any], rollout: float | None = 100, **extra: Any) -> dict:
    return {"properties": list(properties), "rollout_percentage": rollout, **extra}


PRO = {"key": "plan", "value": "pro", "operator": "exact", "type": "person"}
TWO_WAY = {
    "variants": [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]
}


def _answer(flags: list[dict[str, Any]], distinct_id: str = "u1", **props: Any) -> dict:
    compiled = compile_flags(flags, {}, MAPPING)
    request = EvalRequest(distinct_id=distinct_id, person_properties=props)
    return {r.key: ofrep.evaluation(r, compiled) for r in evaluate(compiled, request)}


# contexts ------------------------------------------------------------------------------------


def test_context_maps_targeting_key_groups_and_properties() -> None:
    ctx = ofrep.parse_context({"targetingKey": "u1", "plan": "pro", "groups": {"company": "acme"}})
    assert ctx == ofrep.OfrepContext("u1", {"plan": "pro"}, {"company": "acme"})
    long = ofrep.parse_context({"targetingKey": "x" * 500})
    assert len(long.distinct_id) == ofrep.MAX_TARGETING_KEY_LENGTH


@pytest.mark.parametrize(
    ("context", "code"),
    [
        (None, ofrep.TARGETING_KEY_MISSING),
        ({}, ofrep.TARGETING_KEY_MISSING),
        ({"targetingKey": ""}, ofrep.TARGETING_KEY_MISSING),
        ({"targetingKey": 7}, ofrep.INVALID_CONTEXT),
        ({"targetingKey": "u", "groups": "acme"}, ofrep.INVALID_CONTEXT),
    ],
)
def test_context_errors(context: Any, code: str) -> None:
    with pytest.raises(ofrep.ContextError) as refused:
        ofrep.parse_context(context)
    assert refused.value.code == code and refused.value.detail


# values, variants, reasons -------------------------------------------------------------------


def test_match_by_properties_is_targeting_match_with_payload() -> None:
    flags = [_flag("f", _cond(PRO), payloads={"true": '{"a": 1}'})]
    assert _answer(flags, plan="pro")["f"] == {
        "key": "f", "value": True, "reason": "TARGETING_MATCH", "variant": "true",
        "metadata": {"payload": '{"a": 1}'},
    }  # fmt: skip
    assert _answer(flags, plan="free")["f"] == {
        "key": "f", "value": False, "reason": "DEFAULT", "variant": "false",
    }  # fmt: skip


def _in_and_out(key: str, threshold: float) -> tuple[str, str]:
    """A distinct id inside ``threshold`` of ``key``'s rollout, and one outside it."""
    ids = [f"user-{i}" for i in range(200)]
    inside = next(i for i in ids if flag_bucket(key, i) <= threshold)
    outside = next(i for i in ids if flag_bucket(key, i) > threshold)
    return inside, outside


def test_a_rollout_decides_split_in_and_out() -> None:
    flags = [_flag("r", _cond(PRO, rollout=40))]
    inside, outside = _in_and_out("r", 0.4)
    assert _answer(flags, inside, plan="pro")["r"]["reason"] == "SPLIT"
    assert _answer(flags, inside, plan="pro")["r"]["value"] is True
    got = _answer(flags, outside, plan="pro")["r"]
    assert (got["value"], got["reason"]) == (False, "SPLIT")
    assert _answer(flags, inside, plan="free")["r"]["reason"] == "DEFAULT"


def test_variants_split_unless_fixed_or_single() -> None:
    flags = [
        _flag("ab", _cond(), flag_id=1, multivariate=TWO_WAY, payloads={"b": '"bee"'}),
        _flag("fixed", _cond(variant="b"), flag_id=2, multivariate=TWO_WAY),
        _flag("single", _cond(), flag_id=3,
              multivariate={"variants": [{"key": "only", "rollout_percentage": 100},
                                         {"key": "never", "rollout_percentage": 0}]}),
    ]  # fmt: skip
    seen = set()
    for i in range(30):
        got = _answer(flags, f"user-{i}")
        assert got["ab"]["reason"] == "SPLIT" and got["ab"]["value"] == got["ab"]["variant"]
        assert got["ab"].get("metadata") == (
            {"payload": '"bee"'} if got["ab"]["value"] == "b" else None
        )
        seen.add(got["ab"]["value"])
        assert got["fixed"] == {
            "key": "fixed",
            "value": "b",
            "reason": "TARGETING_MATCH",
            "variant": "b",
        }
        assert got["single"]["reason"] == "TARGETING_MATCH" and got["single"]["value"] == "only"
    assert seen == {"a", "b"}


def test_holdout_is_split_and_inactive_is_disabled() -> None:
    flags = [_flag("h", _cond(), multivariate=TWO_WAY,
                   holdout={"id": 9, "exclusion_percentage": 100})]  # fmt: skip
    got = _answer(flags)["h"]
    assert (got["value"], got["reason"]) == ("holdout-9", "SPLIT")
    assert ofrep.disabled("off") == {
        "key": "off", "value": False, "reason": "DISABLED", "variant": "false",
    }  # fmt: skip
    inactive = compile_flags([{**_flag("off", _cond()), "active": False}], {}, MAPPING)
    assert inactive.inactive_keys == ("off",)


def test_a_failed_result_is_a_general_failure() -> None:
    broken = {"variants": [{"rollout_percentage": 100}]}  # a variant without a key
    got = _answer([_flag("bad", _cond(), multivariate=broken)])["bad"]
    assert got["errorCode"] == "GENERAL" and got["errorDetails"] and got["key"] == "bad"
    assert "value" not in got
