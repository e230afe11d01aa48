"""The experiment and holdout handlers of the management API, in PostHog's shapes: each
decodes its request, calls its use case (``application/experiments.py``,
``application/holdouts.py``) and renders the records it returns (``experiment_json``,
``holdout_json``, ``results_json``: the wire shapes, defined once beside the use cases).

``/experiments/``: create (the multivariate flag is created in the same transaction, or an
existing flag with the key is linked), list, retrieve, PATCH/PUT (archiving is
``{"archived": true}``; launching, a ``start_date`` on a draft, activates the flag), DELETE
(soft), and ``/results/``, computed from the aggregates ingestion keeps. ``/experiment_holdouts/``:
the holdouts the flag engine serves ``holdout-<id>`` to. Invalid input answers 400 naming the
field (``attr``) and the problem.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from flagstaff.application import experiments, holdouts
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.experiments.warm import warm_results
from flagstaff.http.rest import int_param, json_body, paginated, path_int
from flagstaff.store.base import Store


def _path_id(request: Request, name: str, what: str) -> int:
    try:
        return path_int(request, name)
    except ApiError:
        raise ApiError(404, "not_found", f"no such {what}") from None


def _experiment_id(request: Request) -> int:
    return _path_id(request, "experiment_id", "experiment")


def _holdout_id(request: Request) -> int:
    return _path_id(request, "holdout_id", "holdout")


# experiments ------------------------------------------------------------------------------


async def list_experiments(ctx: Caller[Store], request: Request) -> Any:
    warm_results()
    limit = int_param(request, "limit", 100, 1000)
    offset = int_param(request, "offset", 0)
    page = await experiments.experiments_page(ctx.store, ctx.project_id, limit, offset)
    results = [
        experiments.experiment_json(
            await experiments.experiment_view(ctx.store, ctx.project_id, record)
        )
        for record in page.results
    ]
    return paginated(request, page.count, results, limit, offset)


async def create_experiment(ctx: Caller[Store], request: Request) -> Any:
    warm_results()
    data = experiments.experiment_input(await json_body(request))
    return 201, experiments.experiment_json(await experiments.create_experiment(ctx, data))


async def get_experiment(ctx: Caller[Store], request: Request) -> Any:
    warm_results()
    record = await experiments.find_experiment(ctx.store, ctx.project_id, _experiment_id(request))
    view = await experiments.experiment_view(ctx.store, ctx.project_id, record)
    return experiments.experiment_json(view)


async def _update(ctx: Caller[Store], request: Request, replace: bool) -> Any:
    record = await experiments.find_experiment(ctx.store, ctx.project_id, _experiment_id(request))
    data = experiments.experiment_input(await json_body(request))
    view = await experiments.update_experiment(ctx, record, data, replace=replace)
    return experiments.experiment_json(view)


async def patch_experiment(ctx: Caller[Store], request: Request) -> Any:
    return await _update(ctx, request, replace=False)


async def put_experiment(ctx: Caller[Store], request: Request) -> Any:
    return await _update(ctx, request, replace=True)


async def delete_experiment(ctx: Caller[Store], request: Request) -> Any:
    await experiments.delete_experiment(ctx, _experiment_id(request))
    return 204, None


async def experiment_results(ctx: Caller[Store], request: Request) -> Any:
    record = await experiments.find_experiment(ctx.store, ctx.project_id, _experiment_id(request))
    results = await experiments.experiment_results(ctx.store, record)
    return experiments.results_json(record.id, results)


# holdouts ---------------------------------------------------------------------------------


async def list_holdouts(ctx: Caller[Store], request: Request) -> Any:
    results = [holdouts.holdout_json(r) for r in await holdouts.holdouts(ctx.store, ctx.project_id)]
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def create_holdout(ctx: Caller[Store], request: Request) -> Any:
    data = holdouts.holdout_input(await json_body(request))
    return 201, holdouts.holdout_json(await holdouts.create_holdout(ctx, data))


async def get_holdout(ctx: Caller[Store], request: Request) -> Any:
    record = await holdouts.find_holdout(ctx.store, ctx.project_id, _holdout_id(request))
    return holdouts.holdout_json(record)


async def update_holdout(ctx: Caller[Store], request: Request) -> Any:
    record = await holdouts.find_holdout(ctx.store, ctx.project_id, _holdout_id(request))
    data = holdouts.holdout_input(await json_body(request))
    return holdouts.holdout_json(await holdouts.update_holdout(ctx, record, data))


async def delete_holdout(ctx: Caller[Store], request: Request) -> Any:
    await holdouts.delete_holdout(ctx, _holdout_id(request))
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
