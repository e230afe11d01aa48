"""Event names with a meaning of their own, and the sets the layers test them against.

Normalization, validation, the person and group rules and the stores' batch step
(``store/ingest_batch.py``) import these rather than spelling the names again.
"""

from __future__ import annotations

IDENTIFY = "$identify"
CREATE_ALIAS = "$create_alias"
MERGE_DANGEROUSLY = "$merge_dangerously"
SET = "$set"
GROUP_IDENTIFY = "$groupidentify"
GROUP_IDENTIFY_LEGACY = "$group_identify"
"""The spelling older SDKs send; handled exactly like :data:`GROUP_IDENTIFY`."""
EXCEPTION = "$exception"
HEATMAP = "$$heatmap"
FEATURE_FLAG_CALLED = "$feature_flag_called"
SURVEY_SENT = "survey sent"
SURVEY_SHOWN = "survey shown"
SURVEY_DISMISSED = "survey dismissed"

FLAG_PROPERTY = "$feature_flag"
"""The key of the flag a ``$feature_flag_called`` event reports."""
FLAG_RESPONSE_PROPERTY = "$feature_flag_response"
"""The value the flag had: true, false or a variant key."""

GROUP_IDENTIFY_EVENTS = frozenset({GROUP_IDENTIFY, GROUP_IDENTIFY_LEGACY})
"""Upsert a group; they never create or change a person."""

MERGE_EVENTS = frozenset({IDENTIFY, CREATE_ALIAS, MERGE_DANGEROUSLY})
"""May merge two persons (identify: ``$anon_distinct_id``; the alias events: ``alias``)."""

ALIAS_EVENTS = frozenset({CREATE_ALIAS, MERGE_DANGEROUSLY})
"""Merge events that name the other distinct id in the ``alias`` property."""

ALWAYS_UPDATE_PERSON_EVENTS = MERGE_EVENTS | {SET}
"""Always apply all their person property changes (PostHog's "person events")."""

NEVER_UPDATE_PERSON_EVENTS = frozenset({EXCEPTION, HEATMAP})
"""Never change person properties (PostHog processes them apart from the rest)."""

PROFILE_ONLY_EVENTS = MERGE_EVENTS | GROUP_IDENTIFY_EVENTS
"""Exist only to change persons or groups: meaningless without person profile processing."""

SURVEY_EVENTS = frozenset({SURVEY_SENT, SURVEY_SHOWN, SURVEY_DISMISSED})
"""Survey responses and impressions: they must name the survey."""
