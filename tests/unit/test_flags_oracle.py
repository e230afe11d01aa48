"""Differential test: the engine against posthog-python's local evaluator.

Thousands of seeded random cases (tests/flaggen.py). Where the SDK gives a conclusive
answer the engine must give the same value, variant and payload. Server semantics differ
from the SDK only where the SDK cannot decide locally (it raises), with two exceptions,
left out here:

- a condition the SDK skips as undecidable (a missing property, a value it cannot parse)
  lets it match a later condition, while the server decides the skipped one; positive
  answers reached after such a skip are recognised through the SDK's reason hook;
- posthog-python evaluates a flag dependency with group-aggregated conditions without the
  request's groups, so differently from the same flag evaluated on its own.

Semver filters follow the server's reading of versions (docs/compat-notes.md), which
posthog-python does not share for some values (``3.0.0-beta`` is below ``3.0.0`` on the
server; ``2025-12-31 23:59:59`` and ``1.2.3.4`` are not versions there). So the engine is
compared here with posthog-python's reading of versions put in the server's place, and the
flags whose answer that reading changes are counted (``semver_reading_differs``); the
server's reading has its own tests (tests/unit/test_flags_server_compat.py).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

import pytest
from posthog import Client
from posthog import feature_flags as posthog_feature_flags
from posthog.feature_flags import InconclusiveMatchError, RequiresServerEvaluation

from flagstaff.flags import EvalRequest, FlagResult, compile_flags, evaluate
from flagstaff.flags.local_evaluation import local_evaluation_cohorts, local_evaluation_flags
from tests.flaggen import generate_case, sdk_version_reading

CASES = 10000
SEED = 20240611


@pytest.fixture(scope="module")
def sdk() -> Client:
    logging.getLogger("posthog").setLevel(logging.CRITICAL)
    return Client("phc_oracle", send=False, sync_mode=True)


def _depends_on_group_flag(flag_key: str, flags_by_key: dict[str, dict[str, Any]]) -> bool:
    pending = [flag_key]
    seen: set[str] = set()
    while pending:
        key = pending.pop()
        if key in seen or key not in flags_by_key:
            continue
        seen.add(key)
        filters = flags_by_key[key]["filters"]
        conditions = filters.get("groups") or []
        if key != flag_key and (
            filters.get("aggregation_group_type_index") is not None
            or any(c.get("aggregation_group_type_index") is not None for c in conditions)
        ):
            return True
        for condition in conditions:
            pending.extend(
                prop["key"] for prop in condition.get("properties") or [] if prop["type"] == "flag"
            )
    return False


def _evaluate(case: tuple[Any, ...], device_id: str | None) -> dict[str, FlagResult]:
    flags, cohorts, mapping, distinct_id, person, groups, group_props = case
    compiled = compile_flags(flags, cohorts, mapping)
    request = EvalRequest(
        distinct_id=distinct_id,
        person_properties=person,
        groups=groups,
        group_properties=group_props,
        device_id=device_id,
    )
    return {result.key: result for result in evaluate(compiled, request)}


def _answer(result: FlagResult) -> tuple[Any, ...]:
    return result.enabled, result.variant, result.payload


def test_engine_matches_posthog_python_local_evaluation(
    sdk: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    skipped: list[object] = []
    pick_reason = posthog_feature_flags._pick_unresolved_reason

    def recording_pick_reason(current: Any, new: Any) -> Any:
        skipped.append(new)
        return pick_reason(current, new)

    monkeypatch.setattr(posthog_feature_flags, "_pick_unresolved_reason", recording_pick_reason)
    rng = random.Random(SEED)
    outcome: Counter[str] = Counter()
    mismatches: list[str] = []
    for case_number in range(CASES):
        case = generate_case(rng)
        flags, cohorts, mapping, distinct_id, person, groups, group_props = case
        device_id = rng.choice([None, f"device-{rng.randint(0, 99)}"])
        server_results = _evaluate(case, device_id)
        with sdk_version_reading():
            results = _evaluate(case, device_id)
        outcome["semver_reading_differs"] += sum(
            _answer(results[key]) != _answer(server_results[key]) for key in results
        )

        local_flags = local_evaluation_flags(flags)
        local_cohorts = local_evaluation_cohorts(cohorts)
        sdk.feature_flags = local_flags
        sdk.cohorts = local_cohorts
        sdk.group_type_mapping = mapping
        sdk_person = {"distinct_id": distinct_id, **person}
        sdk_groups = {
            name: {"$group_key": key, **group_props.get(name, {})} for name, key in groups.items()
        }
        by_key = {flag["key"]: flag for flag in local_flags}

        for flag in local_flags:
            key = flag["key"]
            if not flag["active"]:
                assert key not in results, f"case {case_number}: inactive {key} reported"
                outcome["inactive"] += 1
                continue
            if _depends_on_group_flag(key, by_key):
                outcome["group_dependency"] += 1
                continue
            skipped.clear()
            try:
                expected = sdk._compute_flag_locally(
                    flag,
                    distinct_id,
                    groups=groups,
                    person_properties=sdk_person,
                    group_properties=sdk_groups,
                    warn_on_unknown_groups=False,
                    device_id=device_id,
                )
            except (InconclusiveMatchError, RequiresServerEvaluation):
                outcome["sdk_inconclusive"] += 1
                continue
            if expected is not False and skipped:
                outcome["tainted"] += 1
                continue
            result = results[key]
            actual: Any = result.variant if result.variant is not None else result.enabled
            expected_payload = None
            if expected is not False:
                lookup = "true" if expected is True else expected
                expected_payload = (flag["filters"].get("payloads") or {}).get(lookup)
            if actual != expected or result.payload != expected_payload:
                mismatches.append(
                    f"case {case_number} flag {key}: engine {actual!r} ({result.reason_code}, "
                    f"payload {result.payload!r}), posthog-python {expected!r} "
                    f"(payload {expected_payload!r})"
                )
            outcome["compared"] += 1
            outcome["enabled" if expected is not False else "disabled"] += 1

    print(dict(outcome))
    assert not mismatches, "\n".join(mismatches[:20]) + f"\n... {len(mismatches)} in all"
    assert outcome["compared"] > 4000, outcome
    assert outcome["enabled"] > 1000, outcome
    assert outcome["disabled"] > 1000, outcome
