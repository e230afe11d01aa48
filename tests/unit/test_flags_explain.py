"""The explainer against the compiled engine, and what its explanation shows."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from flagstaff.flags import EvalRequest, compile_flags, evaluate
from flagstaff.flags.explain import explain, render
from tests.flaggen import generate_case
from tests.unit.buckets import flag_bucket

CASES = 1500
SEED = 20261125


def _vary(rng: random.Random, flags: list[dict[str, Any]]) -> None:
    """Shapes the generator leaves out: early exit, enrollment, legacy holdouts, references
    to unknown or later flags (so dependency cycles)."""
    for flag in flags:
        filters = flag["filters"]
        if filters["groups"] and rng.random() < 0.15:
            target = rng.choice([999, *(f["id"] for f in flags)])
            filters["groups"][0]["properties"].append(
                {"key": str(target), "type": "flag", "value": True, "operator": "flag_evaluates_to"}
            )
        roll = rng.random()
        if roll < 0.15:
            filters["early_exit"] = True
        elif roll < 0.2:
            filters["feature_enrollment"] = True
        elif roll < 0.25:
            filters["super_groups"] = [
                {
                    "properties": [{"key": "beta", "type": "person", "value": ["true"]}],
                    "rollout_percentage": rng.choice([None, 50]),
                }
            ]
        elif roll < 0.28:
            filters["holdout_groups"] = [{"properties": [], "rollout_percentage": 30}]


def test_the_explainer_agrees_with_the_engine() -> None:
    rng = random.Random(SEED)
    seen: Counter[str] = Counter()
    mismatches = []
    for number in range(CASES):
        flags, cohorts, mapping, distinct_id, person, groups, group_props = generate_case(rng)
        _vary(rng, flags)
        if rng.random() < 0.1:
            person[f"$feature_enrollment/{rng.choice(flags)['key']}"] = rng.choice([True, "false"])
        request = EvalRequest(
            distinct_id=rng.choice([distinct_id, ""]) if rng.random() < 0.1 else distinct_id,
            person_properties=person,
            groups=groups,
            group_properties=group_props,
            device_id=rng.choice([None, f"device-{rng.randint(0, 99)}"]),
            hash_key_overrides={flags[0]["key"]: "anon-1"} if rng.random() < 0.1 else {},
        )
        results = {r.key: r for r in evaluate(compile_flags(flags, cohorts, mapping), request)}
        for flag in flags:
            explained = explain(flags, cohorts, mapping, flag["key"], request)
            result = results.get(flag["key"])
            if result is None:
                assert not explained.answered, (number, flag["key"])
                seen["left out"] += 1
                continue
            assert explained.answered, (number, flag["key"])
            engine = (
                result.enabled,
                result.variant,
                result.reason_code,
                result.condition_index,
                result.reason_description,
            )
            walked = (
                explained.enabled,
                explained.variant,
                explained.reason_code,
                explained.condition_index,
                explained.reason_description,
            )
            if engine != walked:
                where = f"case {number} {flag['key']}"
                mismatches.append(f"{where}: engine {engine}, explained {walked}")
            seen[result.reason_code] += 1
            render(explained)  # every explanation renders
    assert not mismatches, "\n".join(mismatches[:10]) + f"\n{len(mismatches)} in all"
    # The cases reach every kind of outcome.
    for code in (
        "condition_match",
        "no_condition_match",
        "out_of_rollout_bound",
        "no_group_type",
        "missing_dependency",
        "holdout_condition_value",
        "super_condition_value",
    ):
        assert seen[code] > 10, seen


def test_an_explanation_shows_each_step() -> None:
    flags = [
        {"id": 1, "key": "base", "filters": {"groups": [{"rollout_percentage": 100}]}},
        {
            "id": 2,
            "key": "checkout",
            "filters": {
                "groups": [
                    {
                        "properties": [
                            {"key": "plan", "type": "person", "operator": "exact", "value": "pro"},
                            {"key": "age", "type": "person", "operator": "gt", "value": 18},
                        ],
                        "rollout_percentage": 100,
                    },
                    {
                        "properties": [
                            {
                                "key": "1",
                                "type": "flag",
                                "operator": "flag_evaluates_to",
                                "value": True,
                            }
                        ],
                        "rollout_percentage": 50,
                    },
                ],
                "multivariate": {
                    "variants": [
                        {"key": "control", "rollout_percentage": 50},
                        {"key": "test", "rollout_percentage": 50},
                    ]
                },
            },
        },
    ]
    who = next(f"user-{n}" for n in range(1000) if flag_bucket("checkout", f"user-{n}") <= 0.5)
    request = EvalRequest(distinct_id=who, person_properties={"plan": "free", "age": 30})
    e = explain(flags, {}, {}, "checkout", request)
    assert (e.enabled, e.reason_code, e.condition_index) == (True, "condition_match", 1)
    first, second = e.conditions
    plan, age = first.filters
    assert (plan.compared, plan.matched) == ("free", False)
    assert age.matched is None  # not reached: the set already failed
    assert first.outcome == "no_condition_match"
    assert second.filters[0].compared is True and second.filters[0].matched
    assert second.rollout is not None and second.rollout.threshold == 0.5
    assert second.rollout.value == flag_bucket("checkout", who)
    assert second.variant is not None
    assert second.variant.value == flag_bucket("checkout", who, "variant")
    assert e.variant == second.variant.chosen
    assert [d.key for d in e.dependencies] == ["base"] and e.dependencies[0].value is True
    text = render(e)
    for fragment in (
        "condition set 0",
        'person \'plan\' exact "pro": compared "free" -> no match',
        "rollout hash of",
        "variant hash of",
        "dependency 'base'",
        "result: ",
    ):
        assert fragment in text, text
