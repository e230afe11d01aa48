"""Flag definitions in the shape PostHog serves to SDKs for local evaluation.

Stored flag-dependency filters name the other flag by id; SDKs need its key and a
``dependency_chain`` (every flag to evaluate first, dependencies first, ending with the
referenced flag). A missing or cyclic dependency gets an empty chain, and an id that names
no flag stays as it is. Cohorts are sent as property groups, dynamic ones only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def _flag_references(flag: Mapping[str, Any]) -> list[dict[str, Any]]:
    filters = flag.get("filters") or {}
    found = []
    for group in filters.get("groups") or []:
        for prop in group.get("properties") or []:
            if isinstance(prop, dict) and prop.get("type") == "flag":
                found.append(prop)
    return found


def local_evaluation_flags(flags: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Non-deleted flags sorted by key, with flag dependencies rewritten for SDKs."""
    kept = [flag for flag in flags if isinstance(flag, dict) and not flag.get("deleted")]
    by_id = {flag.get("id"): flag for flag in kept if isinstance(flag.get("id"), int)}
    by_key = {flag.get("key"): flag for flag in kept}

    def resolve(reference: Any) -> dict[str, Any] | None:
        if isinstance(reference, int) and not isinstance(reference, bool):
            return by_id.get(reference)
        if isinstance(reference, str):
            if reference.isdigit() and int(reference) in by_id:
                return by_id[int(reference)]
            return by_key.get(reference)
        return None

    chains: dict[str, list[str] | None] = {}

    def chain_of(flag: dict[str, Any], visiting: set[str]) -> list[str] | None:
        """Keys to evaluate before ``flag``, then ``flag``; None when unresolvable."""
        key = flag["key"]
        if key in chains:
            return chains[key]
        if key in visiting:
            return None
        visiting.add(key)
        order: list[str] = []
        broken = False
        for prop in _flag_references(flag):
            target = resolve(prop.get("key"))
            sub = chain_of(target, visiting) if target is not None else None
            if sub is None:
                broken = True
                break
            order.extend(item for item in sub if item not in order)
        visiting.discard(key)
        result = None if broken else [*order, key]
        chains[key] = result
        return result

    output = []
    for flag in sorted(kept, key=lambda item: str(item.get("key"))):
        converted = copy.deepcopy(flag)
        for prop in _flag_references(converted):
            target = resolve(prop.get("key"))
            if target is None:
                prop["dependency_chain"] = []
                continue
            prop["key"] = target["key"]
            chain = chain_of(target, set())
            prop["dependency_chain"] = [] if chain is None or flag["key"] in chain else chain
        output.append(converted)
    return output


def local_evaluation_cohorts(cohorts: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """``{cohort id: property group}`` for the dynamic cohorts."""
    result = {}
    for cohort_id, cohort in cohorts.items():
        if not isinstance(cohort, dict) or cohort.get("is_static"):
            continue
        filters = cohort.get("filters") or {}
        group = filters.get("properties") if isinstance(filters, dict) else None
        if group is not None:
            result[str(cohort_id)] = group
    return result
