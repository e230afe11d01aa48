"""Request bodies decoded by their Struct: refusals name the field, PATCH tells unset from null."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import pytest

from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import UNSET, UnsetType, decode, given


class Step(msgspec.Struct):
    event: str


class Body(msgspec.Struct):
    key: str
    name: str | UnsetType = UNSET
    limit: int | UnsetType | None = UNSET
    runtime: Literal["all", "client"] | UnsetType = UNSET
    percent: Annotated[float, msgspec.Meta(ge=0, le=100)] | UnsetType = UNSET
    steps: list[Step] | UnsetType = UNSET
    anon: str | None = msgspec.field(default=None, name="$anon_distinct_id")


def _refusal(body: object) -> tuple[str, str, str | None]:
    with pytest.raises(ApiError) as caught:
        decode(Body, body)
    assert caught.value.status == 400
    return caught.value.code, caught.value.detail, caught.value.attr


def test_a_valid_body_decodes_and_given_keeps_only_what_it_set() -> None:
    body = decode(Body, {"key": "k", "limit": None, "$anon_distinct_id": "a", "id": 7})
    assert body.key == "k" and body.anon == "a" and body.name is UNSET
    assert given(body) == {"key": "k", "limit": None, "anon": "a"}


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        ([], ("invalid_input", "the request body must be a JSON object", None)),
        ({}, ("required", "key is required", "key")),
        ({"key": 1}, ("invalid_input", "key must be a string", "key")),
        (
            {"key": "k", "limit": True},
            ("invalid_input", "limit must be an integer or null", "limit"),
        ),
        ({"key": "k", "steps": [{}]}, ("required", "steps[0].event is required", "steps[0].event")),
        (
            {"key": "k", "steps": [{"event": 3}]},
            ("invalid_input", "steps[0].event must be a string", "steps[0].event"),
        ),
        (
            {"key": "k", "runtime": "x"},
            ("invalid_input", "runtime: invalid enum value 'x'", "runtime"),
        ),
        (
            {"key": "k", "percent": 101},
            ("invalid_input", "percent: expected `float` <= 100.0", "percent"),
        ),
    ],
)
def test_a_refused_body_names_its_field(body: object, refusal: tuple[str, str, str | None]) -> None:
    assert _refusal(body) == refusal
