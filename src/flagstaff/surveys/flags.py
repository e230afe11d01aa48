"""The feature flags a survey maintains, as PostHog creates, updates and deletes them.

posthog-js shows a survey only when every flag key it is served with evaluates true:

* the linked flag (``linked_flag_id``, chosen by the user, optionally one variant of it in
  ``conditions.linkedFlagVariant``): never created or changed by the survey;
* the targeting flag: created from ``targeting_flag_filters`` (the flag filter language,
  cohorts included), key ``survey-targeting-<10 hex>``, named "Targeting flag for survey
  <name>"; later filters are merged over the flag's own; ``remove_targeting_flag`` deletes it;
* the internal targeting flag: always present, key ``survey-targeting-<10 hex>-custom``, one
  condition that the person has neither ``$survey_dismissed/<key>`` nor
  ``$survey_responded/<key>`` set, where ``<key>`` is the survey id, or ``<id>/<iteration>``
  for a recurring survey (posthog-js ``$set``s these on ``survey dismissed`` / ``survey sent``).

Both flags are deleted with the survey. Their ``active`` state follows the survey: on while it
is launched and not stopped (PostHog's rule for the internal flag; PostHog leaves a targeting
flag created together with a launched survey inactive until the next edit, which hides the
survey, so here both follow the same rule). PostHog merges the stored internal filters over
the new ones when a recurring survey moves to its next iteration, so the flag keeps the first
iteration's properties; here the internal flag always carries the current iteration's.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any, Literal

import msgspec

from flagstaff.flags.records import FeatureFlag
from flagstaff.surveys.model import Survey, is_launched

TARGETING_FLAG_PREFIX = "survey-targeting-"
INTERNAL_FLAG_SUFFIX = "-custom"
DISMISSED_PROPERTY = "$survey_dismissed"
RESPONDED_PROPERTY = "$survey_responded"
_HEX = "1234567890abcdef"

Role = Literal["targeting", "internal_targeting"]
Action = Literal["create", "update", "delete"]


class FlagChange(msgspec.Struct, kw_only=True):
    """One change to a survey's flag. ``flag`` is a flag body as the flag API takes it (the
    whole flag for create; the fields to change for update; None for delete). After a create,
    the caller stores the new flag's id on the survey field named by ``role``
    (``targeting_flag_id`` or ``internal_targeting_flag_id``)."""

    role: Role
    action: Action
    flag_id: int | None = None
    flag: dict[str, Any] | None = None


def new_flag_key(suffix: str = "") -> str:
    """``survey-targeting-`` + 10 random hex digits (+ suffix), as PostHog generates them."""
    return TARGETING_FLAG_PREFIX + "".join(secrets.choice(_HEX) for _ in range(10)) + suffix


def flag_name(survey_name: str) -> str:
    return f"Targeting flag for survey {survey_name}"


def interaction_key(survey: Survey) -> str:
    """The suffix of the person properties that record an answer or a dismissal."""
    if survey.iteration_count:
        return f"{survey.id}/{survey.current_iteration or 1}"
    return survey.id


def interaction_property(survey: Survey, action: Literal["dismissed", "responded"]) -> str:
    """``$survey_dismissed/<id>[/<iteration>]`` or ``$survey_responded/...``."""
    prefix = DISMISSED_PROPERTY if action == "dismissed" else RESPONDED_PROPERTY
    return f"{prefix}/{interaction_key(survey)}"


def internal_filters(survey: Survey) -> dict[str, Any]:
    """The internal targeting flag's filters: not dismissed and not answered (this iteration)."""
    return {
        "groups": [
            {
                "variant": "",
                "rollout_percentage": 100,
                "properties": [
                    {
                        "key": interaction_property(survey, "dismissed"),
                        "value": "is_not_set",
                        "operator": "is_not_set",
                        "type": "person",
                    },
                    {
                        "key": interaction_property(survey, "responded"),
                        "value": "is_not_set",
                        "operator": "is_not_set",
                        "type": "person",
                    },
                ],
            }
        ]
    }


def flags_active(survey: Survey, now: datetime) -> bool:
    return is_launched(survey, now)


def plan_save(
    survey: Survey,
    *,
    now: datetime,
    targeting_flag: FeatureFlag | None = None,
    internal_flag: FeatureFlag | None = None,
    targeting_flag_filters: dict[str, Any] | None = None,
    remove_targeting_flag: bool = False,
    key_factory: Any = new_flag_key,
) -> list[FlagChange]:
    """The flag changes a saved survey needs.

    ``targeting_flag`` / ``internal_flag``: the survey's current flags as stored (None when it
    has none). ``targeting_flag_filters`` /
    ``remove_targeting_flag``: from the body (``SurveySave``). Updates list only changed
    fields; nothing is returned for a flag that is already right.
    """
    active = flags_active(survey, now)
    changes: list[FlagChange] = []
    if remove_targeting_flag and targeting_flag is not None:
        changes.append(FlagChange(role="targeting", action="delete", flag_id=targeting_flag.id))
        targeting_flag = None
    if targeting_flag_filters:
        if targeting_flag is None:
            changes.append(
                FlagChange(
                    role="targeting",
                    action="create",
                    flag={
                        "key": key_factory(),
                        "name": flag_name(survey.name),
                        "filters": targeting_flag_filters,
                        "active": active,
                    },
                )
            )
        else:
            merged = {**targeting_flag.filters, **targeting_flag_filters}
            update = _diff(targeting_flag, {"filters": merged, "active": active})
            if update:
                changes.append(
                    FlagChange(
                        role="targeting",
                        action="update",
                        flag_id=targeting_flag.id,
                        flag=update,
                    )
                )
    elif targeting_flag is not None and not remove_targeting_flag:
        update = _diff(targeting_flag, {"active": active})
        if update:
            changes.append(
                FlagChange(
                    role="targeting", action="update", flag_id=targeting_flag.id, flag=update
                )
            )
    wanted = internal_filters(survey)
    if internal_flag is None:
        changes.append(
            FlagChange(
                role="internal_targeting",
                action="create",
                flag={
                    "key": key_factory(INTERNAL_FLAG_SUFFIX),
                    "name": flag_name(survey.name),
                    "filters": wanted,
                    "active": active,
                },
            )
        )
    else:
        merged = {**internal_flag.filters, **wanted}
        update = _diff(internal_flag, {"filters": merged, "active": active})
        if update:
            changes.append(
                FlagChange(
                    role="internal_targeting",
                    action="update",
                    flag_id=internal_flag.id,
                    flag=update,
                )
            )
    return changes


def plan_delete(survey: Survey) -> list[FlagChange]:
    """Deleting a survey deletes its targeting and internal targeting flags (not its linked
    flag)."""
    changes = []
    if survey.targeting_flag_id is not None:
        changes.append(
            FlagChange(role="targeting", action="delete", flag_id=survey.targeting_flag_id)
        )
    if survey.internal_targeting_flag_id is not None:
        changes.append(
            FlagChange(
                role="internal_targeting",
                action="delete",
                flag_id=survey.internal_targeting_flag_id,
            )
        )
    return changes


def _diff(current: FeatureFlag, wanted: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in wanted.items() if getattr(current, name) != value}
