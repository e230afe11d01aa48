"""The v2 answer joined from cached per-result fragments."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.flags import EvalRequest, FlagResult, compile_flags, evaluate
from flagstaff.http.flags import _v2_flag, v2_parts
from flagstaff.server.caches import Fragments


def encode_v2_body(results: list[FlagResult], fragments: Fragments, rest: bytes) -> bytes:
    """The v2 answer as /flags joins it: ``{"flags":{...}`` then ``rest`` (its other fields
    and the closing brace)."""
    return b"".join((*v2_parts(results, fragments), rest))


def _flags() -> list[dict[str, Any]]:
    return [
        {"id": 1, "key": "a", "active": True, "filters": {"groups": [{"rollout_percentage": 50}]}},
        {"id": 2, "key": 'b"\\é', "active": True, "filters": {"groups": [{"properties": []}]}},
    ]


def _plain(results: list[FlagResult], **rest: Any) -> bytes:
    """The answer as msgspec encodes the whole object."""
    flags = msgspec.Raw(msgspec.json.encode({r.key: _v2_flag(r) for r in results}))
    return msgspec.json.encode({"flags": flags, **rest})


def test_answers_equal_the_plain_encoding_and_outcomes_are_encoded_once() -> None:
    compiled = compile_flags(_flags(), {}, {})
    fragments = Fragments()
    for n in range(50):
        results = evaluate(compiled, EvalRequest(distinct_id=f"user-{n}"))
        body = encode_v2_body(results, fragments, b',"errorsWhileComputingFlags":false}')
        assert body == _plain(results, errorsWhileComputingFlags=False)
    assert len(fragments.by_id) == len(fragments.owners) == 3
    assert encode_v2_body([], fragments, b',"x":1}') == _plain([], x=1)


def test_unshared_results_get_their_own_fragment() -> None:
    compiled = compile_flags(_flags(), {}, {})
    fragments = Fragments()
    result = evaluate(compiled, EvalRequest(distinct_id="u"))[1]
    failed = msgspec.structs.replace(result, failed=True)
    for results in ([result], [failed], [result]):
        assert encode_v2_body(results, fragments, b"}") == _plain(results)
