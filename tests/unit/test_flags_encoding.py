"""The v2 ``flags`` object joined from cached per-result fragments."""

from __future__ import annotations

import msgspec

from flagstaff.caches import Fragments
from flagstaff.flags import EvalRequest, compile_flags, evaluate
from flagstaff.http.flags import _v2_flag, encode_v2_flags


def _flags() -> list[dict]:
    return [
        {"id": 1, "key": "a", "active": True, "filters": {"groups": [{"rollout_percentage": 50}]}},
        {"id": 2, "key": "b", "active": True, "filters": {"groups": [{"properties": []}]}},
    ]


def test_fragments_are_encoded_once_and_match_the_plain_encoding() -> None:
    compiled = compile_flags(_flags(), {}, {})
    fragments = Fragments()
    for n in range(50):
        results = evaluate(compiled, EvalRequest(distinct_id=f"user-{n}"))
        encoded = encode_v2_flags(results, fragments)
        assert msgspec.json.decode(encoded) == {r.key: _v2_flag(r) for r in results}
    assert len(fragments.by_id) == len(fragments.owners) == 3


def test_unshared_results_get_their_own_fragment() -> None:
    compiled = compile_flags(_flags(), {}, {})
    fragments = Fragments()
    result = evaluate(compiled, EvalRequest(distinct_id="u"))[1]
    failed = msgspec.structs.replace(result, failed=True)
    assert msgspec.json.decode(encode_v2_flags([result], fragments))["b"].get("failed") is None
    assert msgspec.json.decode(encode_v2_flags([failed], fragments))["b"]["failed"] is True
    assert msgspec.json.decode(encode_v2_flags([result], fragments))["b"].get("failed") is None
