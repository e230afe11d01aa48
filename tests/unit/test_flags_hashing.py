"""Bucketing must be bit-identical to PostHog's (compat.md section 2)."""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from flagstaff.flags import EvalRequest, compile_flags, evaluate
from flagstaff.flags.hashing import SCALE, bucket, rollout_limit, variant_limit
from tests.unit.buckets import flag_bucket, holdout_bucket


def _reference(text: str) -> float:
    # Both sides are floats, as in posthog-python (float scale) and the server (f64): an
    # exact int/int division differs in the last bit for some inputs.
    return float(int(hashlib.sha1(text.encode()).hexdigest()[:15], 16)) / float(0xFFFFFFFFFFFFFFF)


def test_scale_division_is_float_division() -> None:
    identifier = "x" * 300
    exact = int(hashlib.sha1(f"some-flag.{identifier}".encode()).hexdigest()[:15], 16)
    assert exact / 0xFFFFFFFFFFFFFFF != exact / float(0xFFFFFFFFFFFFFFF)
    assert flag_bucket("some-flag", identifier) == exact / float(0xFFFFFFFFFFFFFFF)


@pytest.mark.parametrize(
    ("identifier", "expected"),
    [
        ("some_distinct_id", 0.7270002403585725),
        ("test-identifier", 0.4493881716040236),
        ("example_id", 0.9402003475831224),
        ("example_id2", 0.6292740389966519),
    ],
)
def test_holdout_hash_known_values(identifier: str, expected: float) -> None:
    assert holdout_bucket(identifier) == expected


@pytest.mark.parametrize("identifier", ["a", "distinct_id_0", "ünïcode", "x" * 300, ""])
@pytest.mark.parametrize("salt", ["", "variant"])
def test_bucket_equals_hexdigest_formula(identifier: str, salt: str) -> None:
    assert flag_bucket("some-flag", identifier, salt) == _reference(f"some-flag.{identifier}{salt}")
    assert bucket(b"holdout-", identifier.encode()) == _reference(f"holdout-{identifier}")


def _flag(key: str, rollout: float, variants: list[tuple[str, float]] | None = None) -> dict:
    filters: dict = {"groups": [{"properties": [], "rollout_percentage": rollout}]}
    if variants:
        filters["multivariate"] = {
            "variants": [{"key": k, "rollout_percentage": p} for k, p in variants]
        }
    return {"id": 1, "key": key, "active": True, "filters": filters}


def _values(flag: dict) -> list[object]:
    compiled = compile_flags([flag], {}, {})
    values = []
    for number in range(10):
        (result,) = evaluate(compiled, EvalRequest(distinct_id=f"distinct_id_{number}"))
        values.append(result.variant or result.enabled)
    return values


def test_simple_flag_vector() -> None:
    expected = [False, True, True, False, True, False, False, True, False, True]
    assert _values(_flag("simple-flag", 45)) == expected


def test_multivariate_flag_vector() -> None:
    variants = [
        ("first-variant", 50),
        ("second-variant", 20),
        ("third-variant", 20),
        ("fourth-variant", 5),
        ("fifth-variant", 5),
    ]
    expected = [
        "second-variant",
        "second-variant",
        "first-variant",
        False,
        False,
        "second-variant",
        "first-variant",
        False,
        False,
        False,
    ]
    assert _values(_flag("multivariate-flag", 55, variants)) == expected


def test_weights_under_100_can_leave_plain_true() -> None:
    flag = _flag("partial", 100, [("only", 1)])
    values = _values(flag)
    assert True in values
    assert set(values) <= {True, "only"}


def test_digest_limits_decide_exactly_as_the_float_buckets() -> None:
    rng = random.Random(5)
    bounds = [0.0, -0.0, 1.0, 0.05, 0.2, 0.5, 0.7, 1 / 3, 2 / 3, 0.999999, 1e-18, -0.01, 1.01]
    bounds += [math.nan, math.inf, -math.inf] + [rng.random() for _ in range(300)]
    for bound in bounds:
        over, under = rollout_limit(bound), variant_limit(bound)
        edges = [0, 1, 15, 16, (1 << 64) - 1] + [rng.getrandbits(64) for _ in range(50)]
        for edge in (over, under):
            edges += [edge + delta for delta in range(-40, 40)]
        for prefix in edges:
            if not 0 <= prefix < 1 << 64:
                continue
            bucket = (prefix >> 4) / SCALE
            assert (bucket > bound) is (prefix >= over), (bound, prefix)
            assert (bucket < bound) is (prefix < under), (bound, prefix)
