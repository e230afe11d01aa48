"""The experiment and holdout handlers of the management API, in PostHog's shapes.

``/experiments/``: create (the multivariate flag is created in the same transaction, or an
existing flag with the key is linked), list, retrieve, PATCH/PUT (archiving is
``{"archived": true}``; launching, a ``start_date`` on a draft, activates the flag), DELETE
(soft), and ``/results/``, computed from the aggregates ingestion keeps. ``/experiment_holdouts/``:
the holdouts the flag engine serves ``holdout-<id>`` to. Invalid input answers 400 naming the
field (``attr``) and the problem.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request

from flagstaff.application import flags as flag_rules
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, invalid_input
from flagstaff.application.experiments import results_json
from flagstaff.experiments.model import (
    ExperimentDefinition,
    ExperimentInvalid,
    Holdout,
    apply_patch,
    experiment_flag,
    link_existing_flag,
    parse_experiment,
    parse_holdout,
    with_stats_defaults,
)
from flagstaff.experiments.warm import warm_results
from flagstaff.http.rest import int_param, json_body, paginated, path_int
from flagstaff.store.base import Store
from flagstaff.store.experiment_batch import ExperimentRecord, HoldoutRecord, with_holdout

_body = json_body


def _path_id(request: Request, name: str, what: str) -> int:
    try:
        return path_int(request, name)
    except ApiError:
        raise ApiError(404, "not_found", f"no such {what}") from None


def holdout_json(record: HoldoutRecord) -> dict[str, Any]:
    return msgspec.to_builtins(record)


def _flag_json(flag: dict[str, Any] | None) -> dict[str, Any] | None:
    if flag is None:
        return None
    keys = ("id", "key", "name", "active", "filters", "deleted", "version")
    return {k: flag.get(k) for k in keys}


async def experiment_json(ctx: Caller[Store], record: ExperimentRecord) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(record.definition)
    flag = await ctx.store.get_flag(ctx.project_id, record.feature_flag_id)
    holdout = (
        await ctx.store.get_holdout(ctx.project_id, record.holdout_id)
        if record.holdout_id is not None
        else None
    )
    parameters = out.setdefault("parameters", {})
    parameters["feature_flag_variants"] = _variants_now(flag) or msgspec.to_builtins(
        record.definition.variants
    )
    out.update(
        id=record.id,
        feature_flag=_flag_json(flag),
        holdout=holdout_json(holdout) if holdout is not None else None,
        holdout_id=record.holdout_id,
        archived=record.archived,
        deleted=record.deleted,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )
    return out


def _variants_now(flag: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The variants and split the experiment's flag serves now (its multivariate filters)."""
    multivariate = ((flag or {}).get("filters") or {}).get("multivariate") or {}
    variants = multivariate.get("variants") if isinstance(multivariate, dict) else None
    if not isinstance(variants, list):
        return []
    return [
        {k: v[k] for k in ("key", "name", "rollout_percentage") if k in v}
        for v in variants
        if isinstance(v, dict)
    ]


async def _holdout_of(ctx: Caller[Store], definition: ExperimentDefinition) -> Holdout | None:
    if definition.holdout_id is None:
        return None
    record = await ctx.store.get_holdout(ctx.project_id, definition.holdout_id)
    if record is None:
        raise ApiError(
            400, "invalid_input", f"no holdout with id {definition.holdout_id}", "holdout"
        )
    return Holdout(name=record.name, filters=record.filters, description=record.description)


def _checked_flag(flag: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]:
    """The flag validated as the flags API would; errors name the experiment's fields."""
    try:
        body = flag if current is None else {"filters": flag["filters"], "active": flag["active"]}
        checked = flag_rules.flag_from_input(body, current)
    except ApiError as error:
        raise ApiError(
            400, error.code, f"the experiment's flag is invalid: {error.detail}", "feature_flag_key"
        ) from None
    if current is not None:
        checked["id"] = current["id"]
    return checked


# experiments ------------------------------------------------------------------------------


async def list_experiments(ctx: Caller[Store], request: Request) -> Any:
    warm_results()
    limit = int_param(request, "limit", 100, 1000)
    offset = int_param(request, "offset", 0)
    page = await ctx.store.list_experiments(ctx.project_id, limit, offset)
    results = [await experiment_json(ctx, record) for record in page.results]
    return paginated(request, page.count, results, limit, offset)


async def create_experiment(ctx: Caller[Store], request: Request) -> Any:
    warm_results()
    defaults = await ctx.store.get_experiment_stats_defaults(ctx.project_id)
    try:
        definition = parse_experiment(with_stats_defaults(await _body(request), defaults))
    except ExperimentInvalid as error:
        raise invalid_input(error) from None
    holdout = await _holdout_of(ctx, definition)
    existing = await ctx.store.get_flag_by_key(ctx.project_id, definition.feature_flag_key)
    if existing is not None:
        try:
            definition = link_existing_flag(definition, existing.get("filters") or {})
        except ExperimentInvalid as error:
            raise invalid_input(error) from None
        linked = with_holdout(existing, definition.holdout_id, holdout)
        if definition.start_date is not None:
            linked["active"] = True
        flag = _checked_flag(linked, existing)
    else:
        flag = _checked_flag(experiment_flag(definition, definition.holdout_id, holdout), None)
    record = await ctx.store.create_experiment(ctx.project_id, definition, flag, source=ctx.source)
    return 201, await experiment_json(ctx, record)


async def _existing(ctx: Caller[Store], request: Request) -> ExperimentRecord:
    record = await ctx.store.get_experiment(
        ctx.project_id, _path_id(request, "experiment_id", "experiment")
    )
    if record is None or record.deleted:
        raise ApiError(404, "not_found", "no such experiment")
    return record


async def get_experiment(ctx: Caller[Store], request: Request) -> Any:
    warm_results()
    return await experiment_json(ctx, await _existing(ctx, request))


async def _update(ctx: Caller[Store], request: Request, replace: bool) -> Any:
    record = await _existing(ctx, request)
    body = await _body(request)
    if isinstance(body, dict) and "holdout_id" not in body:
        holdout = body.get("holdout")
        if "holdout" in body and (holdout is None or type(holdout) is int):
            body = {**body, "holdout_id": holdout}  # PostHog's clients send the id as holdout
    old = record.definition
    try:
        if replace:
            definition = parse_experiment(body)
            if definition.feature_flag_key != old.feature_flag_key:
                raise ExperimentInvalid(
                    [("feature_flag_key", "The flag of an existing experiment cannot change.")]
                )
        else:
            definition = apply_patch(old, body)
    except ExperimentInvalid as error:
        raise invalid_input(error) from None
    launched = old.start_date is not None
    if launched and definition.holdout_id != old.holdout_id:
        raise ApiError(
            400, "invalid_input", "The holdout of a launched experiment cannot change.", "holdout"
        )
    new_variants = msgspec.to_builtins(definition.variants)
    if launched and new_variants != msgspec.to_builtins(old.variants):
        raise ApiError(
            400,
            "invalid_input",
            "The variants of a launched experiment cannot change.",
            "parameters.feature_flag_variants",
        )
    current = await ctx.store.get_flag(ctx.project_id, record.feature_flag_id)
    flag = None
    if current is not None:
        wanted = dict(current)
        if not launched and definition.start_date is not None:
            wanted["active"] = True
        if definition.holdout_id != old.holdout_id:
            wanted = with_holdout(wanted, definition.holdout_id, await _holdout_of(ctx, definition))
        if not launched and new_variants != msgspec.to_builtins(old.variants):
            filters = dict(wanted.get("filters") or {})
            filters["multivariate"] = {"variants": new_variants}
            wanted["filters"] = filters
        if wanted != current:
            flag = _checked_flag(wanted, current)
    else:
        await _holdout_of(ctx, definition)
    updated = await ctx.store.update_experiment(
        ctx.project_id, record.id, definition, flag=flag, source=ctx.source
    )
    return await experiment_json(ctx, updated)


async def patch_experiment(ctx: Caller[Store], request: Request) -> Any:
    return await _update(ctx, request, replace=False)


async def put_experiment(ctx: Caller[Store], request: Request) -> Any:
    return await _update(ctx, request, replace=True)


async def delete_experiment(ctx: Caller[Store], request: Request) -> Any:
    record = await _existing(ctx, request)
    await ctx.store.update_experiment(
        ctx.project_id, record.id, record.definition, deleted=True, source=ctx.source
    )
    return 204, None


async def experiment_results(ctx: Caller[Store], request: Request) -> Any:
    return await results_json(ctx.store, await _existing(ctx, request))


# holdouts ---------------------------------------------------------------------------------


async def list_holdouts(ctx: Caller[Store], request: Request) -> Any:
    records = await ctx.store.list_holdouts(ctx.project_id)
    results = [holdout_json(r) for r in records]
    return {"count": len(results), "next": None, "previous": None, "results": results}


def _holdout(data: Any) -> Holdout:
    try:
        return parse_holdout(data)
    except ExperimentInvalid as error:
        raise invalid_input(error) from None


async def create_holdout(ctx: Caller[Store], request: Request) -> Any:
    holdout = _holdout(await _body(request))
    return 201, holdout_json(await ctx.store.create_holdout(ctx.project_id, holdout))


async def _existing_holdout(ctx: Caller[Store], request: Request) -> HoldoutRecord:
    record = await ctx.store.get_holdout(ctx.project_id, _path_id(request, "holdout_id", "holdout"))
    if record is None:
        raise ApiError(404, "not_found", "no such holdout")
    return record


async def get_holdout(ctx: Caller[Store], request: Request) -> Any:
    return holdout_json(await _existing_holdout(ctx, request))


async def update_holdout(ctx: Caller[Store], request: Request) -> Any:
    record = await _existing_holdout(ctx, request)
    body = await _body(request)
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "Must be an object.")
    merged = {"name": record.name, "description": record.description, "filters": record.filters}
    merged.update({k: body[k] for k in ("name", "description", "filters") if k in body})
    holdout = _holdout(merged)
    return holdout_json(
        await ctx.store.update_holdout(ctx.project_id, record.id, holdout, source=ctx.source)
    )


async def delete_holdout(ctx: Caller[Store], request: Request) -> Any:
    record = await _existing_holdout(ctx, request)
    await ctx.store.delete_holdout(ctx.project_id, record.id)
    return 204, None


ROUTES = [
    ("GET", "/experiments/", list_experiments, "List experiments"),
    ("POST", "/experiments/", create_experiment, "Create an experiment (and its flag)"),
    ("GET", "/experiments/{experiment_id}/", get_experiment, "Get an experiment"),
    ("PATCH", "/experiments/{experiment_id}/", patch_experiment, "Update an experiment"),
    ("PUT", "/experiments/{experiment_id}/", put_experiment, "Replace an experiment"),
    ("DELETE", "/experiments/{experiment_id}/", delete_experiment, "Soft-delete an experiment"),
    (
        "GET",
        "/experiments/{experiment_id}/results/",
        experiment_results,
        "An experiment's results: per metric, the variants against control",
    ),
    ("GET", "/experiment_holdouts/", list_holdouts, "List experiment holdouts"),
    ("POST", "/experiment_holdouts/", create_holdout, "Create an experiment holdout"),
    ("GET", "/experiment_holdouts/{holdout_id}/", get_holdout, "Get an experiment holdout"),
    ("PATCH", "/experiment_holdouts/{holdout_id}/", update_holdout, "Update a holdout"),
    ("DELETE", "/experiment_holdouts/{holdout_id}/", delete_holdout, "Delete an unused holdout"),
]
"""Paths below ``/api/projects/{project_id}``: the management API's ``ROUTES`` adds them."""
