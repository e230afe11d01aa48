"""PostHog's flag key rule, held alike by every way a flag comes to be: the management API's
body check (the console and scheduled changes go through it too), ``flags import``, and an
experiment that creates its flag."""

from __future__ import annotations

import pytest

from flagstaff.application.errors import ApiError
from flagstaff.application.flag_transfer import plan_flag
from flagstaff.application.flags import flag_from_input
from flagstaff.experiments.model import ExperimentInvalid, parse_experiment
from flagstaff.flags.validation import flag_key_problem

REFUSED = ["with.dot", "with space", "ünïcode", "", "x" * 401]
ACCEPTED = ["new-checkout", "snake_case", "Mixed-09_x", "x" * 400]


@pytest.mark.parametrize("key", REFUSED)
def test_a_refused_key_is_refused_everywhere(key: str) -> None:
    problem = flag_key_problem(key)
    assert problem is not None
    with pytest.raises(ApiError) as api:
        flag_from_input({"key": key, "filters": {"groups": []}})
    assert api.value.status == 400 and api.value.attr == "key"
    assert problem in api.value.detail
    planned = plan_flag({"key": key, "filters": {"groups": []}}, 1, None, {})
    assert planned.action == "rejected" and problem in planned.detail
    with pytest.raises(ExperimentInvalid) as experiment:
        parse_experiment({"name": "e", "feature_flag_key": key})
    assert ("feature_flag_key", problem) in experiment.value.errors


@pytest.mark.parametrize("key", ACCEPTED)
def test_an_accepted_key_is_accepted_everywhere(key: str) -> None:
    assert flag_key_problem(key) is None
    assert flag_from_input({"key": key, "filters": {"groups": []}}).key == key
    assert plan_flag({"key": key, "filters": {"groups": []}}, 1, None, {}).action == "create"
    assert parse_experiment({"name": "e", "feature_flag_key": key}).feature_flag_key == key
