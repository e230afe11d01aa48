"""The feature flags every SDK scenario runs against, created through the management API."""

from __future__ import annotations

import json
from typing import Any

from tests.server import Api

PRO_PAYLOAD = {"tier": "gold", "seats": 5}
BANNER_PAYLOAD = {"headline": "Welcome to Flagstaff"}
VARIANT_PAYLOADS = {"control": {"button": "blue"}, "test": {"button": "green"}}

# key -> (filters, evaluation_runtime)
FLAGS: dict[str, tuple[dict[str, Any], str]] = {
    "pro-feature": (
        {
            "groups": [
                {
                    "properties": [{"key": "plan", "value": "pro", "type": "person"}],
                    "rollout_percentage": 100,
                }
            ],
            "payloads": {"true": json.dumps(PRO_PAYLOAD)},
        },
        "all",
    ),
    "everyone-banner": (
        {
            "groups": [{"properties": [], "rollout_percentage": 100}],
            "payloads": {"true": json.dumps(BANNER_PAYLOAD)},
        },
        "all",
    ),
    "half-rollout": ({"groups": [{"properties": [], "rollout_percentage": 50}]}, "all"),
    "checkout-variant": (
        {
            "groups": [{"properties": [], "rollout_percentage": 100}],
            "multivariate": {
                "variants": [
                    {"key": "control", "name": "Control", "rollout_percentage": 50},
                    {"key": "test", "name": "Test", "rollout_percentage": 50},
                ]
            },
            "payloads": {k: json.dumps(v) for k, v in VARIANT_PAYLOADS.items()},
        },
        "all",
    ),
    "company-beta": (
        {
            "aggregation_group_type_index": 0,
            "groups": [
                {
                    "properties": [
                        {
                            "key": "subscription",
                            "value": "enterprise",
                            "type": "group",
                            "group_type_index": 0,
                        }
                    ],
                    "rollout_percentage": 100,
                }
            ],
        },
        "all",
    ),
    "server-only": ({"groups": [{"properties": [], "rollout_percentage": 100}]}, "server"),
    "client-only": ({"groups": [{"properties": [], "rollout_percentage": 100}]}, "client"),
}
SERVER_SIDE_KEYS = sorted(k for k, (_, runtime) in FLAGS.items() if runtime != "client")
CLIENT_SIDE_KEYS = sorted(k for k, (_, runtime) in FLAGS.items() if runtime != "server")


def create_flags(api: Api) -> dict[str, dict[str, Any]]:
    """Create :data:`FLAGS`; ``company-beta`` needs group type 0 to be ``company``."""
    return {
        key: api.create_flag(key=key, name=key, filters=filters, evaluation_runtime=runtime)
        for key, (filters, runtime) in FLAGS.items()
    }
